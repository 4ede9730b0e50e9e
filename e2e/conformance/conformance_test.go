package conformance

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/gateway-api/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/gateway-api/conformance/tests"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/yaml"
)

var summaryOutput = flag.String("summary-output", "",
	"Markdown summary table path (default: the report path with -report.yaml replaced by -summary.md)")

// TestConformance is conformance.RunConformance with the summary added: the suite's own flags
// select the GatewayClass, profiles, features (inferred from the GatewayClass status when no
// feature flag is given), mode and report path.
func TestConformance(t *testing.T) {
	opts := conformance.DefaultOptions(t)
	if opts.ReportOutputPath != "" {
		require.NoError(t, opts.Implementation.Validate(), "implementation details (--organization, --project, --url, --version, --contact)")
	}
	cSuite, err := suite.NewConformanceTestSuite(opts)
	require.NoError(t, err, "initializing the conformance suite")

	t.Cleanup(func() {
		report, err := cSuite.Report()
		require.NoError(t, err, "building the conformance report")
		writeOutputs(t, report, opts.ReportOutputPath)
	})

	cSuite.Setup(t, tests.ConformanceTests)
	require.NoError(t, cSuite.Run(t, tests.ConformanceTests))
}

// writeOutputs writes the report YAML and the summary next to it, and prints the summary.
func writeOutputs(t *testing.T, report *confv1.ConformanceReport, reportPath string) {
	raw, err := yaml.Marshal(report)
	require.NoError(t, err)
	var summary bytes.Buffer
	require.NoError(t, WriteSummary(&summary, report))
	summaryPath := *summaryOutput
	if reportPath != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(reportPath), 0o755))
		require.NoError(t, os.WriteFile(reportPath, raw, 0o644))
		t.Logf("report: %s", reportPath)
		if summaryPath == "" {
			summaryPath = strings.TrimSuffix(strings.TrimSuffix(reportPath, ".yaml"), "-report") + "-summary.md"
		}
	}
	if summaryPath != "" {
		require.NoError(t, os.WriteFile(summaryPath, summary.Bytes(), 0o644))
		t.Logf("summary: %s", summaryPath)
	}
	t.Logf("Conformance report:\n%s", raw)
	// Printed on stdout as well, so it is the last thing a run shows even without -v.
	os.Stdout.Write(summary.Bytes())
}
