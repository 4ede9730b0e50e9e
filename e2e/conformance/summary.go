package conformance

import (
	"fmt"
	"io"
	"slices"
	"strings"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
)

// WriteSummary writes the per-profile table of a conformance report as Markdown: one row per
// profile with the core and extended passed/failed/skipped counts and the failing tests, then
// the provisional tests that passed. The same text is printed at the end of a run and kept
// next to the report.
func WriteSummary(w io.Writer, report *confv1.ConformanceReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s %s conformance: mode %s\n\n", report.Project, report.Version, report.Mode)
	fmt.Fprintf(&b, "Gateway API %s (%s channel), run %s.\n\n", report.GatewayAPIVersion, report.GatewayAPIChannel, report.Date)
	b.WriteString("| Profile | Core | passed | failed | skipped | Extended | passed | failed | skipped | Failing tests |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |\n")
	profiles := sortedProfiles(report.ProfileReports)
	for _, p := range profiles {
		ext, extResult := confv1.Statistics{}, "-"
		failing := append([]string(nil), p.Core.FailedTests...)
		if p.Extended != nil {
			ext, extResult = p.Extended.Statistics, string(p.Extended.Result)
			failing = append(failing, p.Extended.FailedTests...)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s | %d | %d | %d | %s |\n",
			p.Name, p.Core.Result, p.Core.Passed, p.Core.Failed, p.Core.Skipped,
			extResult, ext.Passed, ext.Failed, ext.Skipped,
			orNone(failing))
	}
	b.WriteString("\n")
	if len(report.ProfileReports) == 0 {
		b.WriteString("No test results: the suite stopped before its tests ran (its setup failed; see the log).\n\n")
	}
	for _, p := range profiles {
		if p.Extended != nil && len(p.Extended.UnsupportedFeatures) > 0 {
			fmt.Fprintf(&b, "%s extended features not claimed: %s.\n\n", p.Name, strings.Join(p.Extended.UnsupportedFeatures, ", "))
		}
	}
	fmt.Fprintf(&b, "Provisional tests that passed: %s.\n", orNone(report.SucceededProvisionalTests))
	_, err := io.WriteString(w, b.String())
	return err
}

// profileOrder is the order the summary lists profiles in (the report's order is not stable).
var profileOrder = []string{"GATEWAY-HTTP", "GATEWAY-GRPC", "GATEWAY-TLS", "GATEWAY-TCP", "GATEWAY-UDP"}

func sortedProfiles(in []confv1.ProfileReport) []confv1.ProfileReport {
	rank := func(name string) int {
		if i := slices.Index(profileOrder, name); i >= 0 {
			return i
		}
		return len(profileOrder)
	}
	out := slices.Clone(in)
	slices.SortStableFunc(out, func(a, b confv1.ProfileReport) int {
		if c := rank(a.Name) - rank(b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
