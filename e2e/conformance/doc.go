// Package conformance runs the upstream Gateway API conformance suite against a cluster with
// Turna installed. It lives in a test file because the suite needs a *testing.T; build it with
// `go test -c` (e2e/conformance/run.sh does) and run the binary with the suite's flags plus
// -summary-output.
package conformance
