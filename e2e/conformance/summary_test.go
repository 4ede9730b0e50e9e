package conformance

import (
	"strings"
	"testing"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
)

func TestWriteSummaryListsEveryProfileWithCountsAndFailures(t *testing.T) {
	report := &confv1.ConformanceReport{
		Implementation:    confv1.Implementation{Project: "turna", Version: "v0.1.0"},
		Mode:              "gateway-namespace",
		GatewayAPIVersion: "v1.7.0",
		GatewayAPIChannel: "experimental",
		ProfileReports: []confv1.ProfileReport{
			{
				Name: "GATEWAY-UDP",
				Core: confv1.Status{Result: confv1.Success, Statistics: confv1.Statistics{Passed: 21}},
			},
			{
				Name: "GATEWAY-HTTP",
				Core: confv1.Status{Result: confv1.Failure, Statistics: confv1.Statistics{Passed: 36, Failed: 2},
					FailedTests: []string{"HTTPRouteSimpleSameNamespace", "HTTPRouteWeight"}},
				Extended: &confv1.ExtendedStatus{
					Status:              confv1.Status{Result: confv1.Success, Statistics: confv1.Statistics{Passed: 50, Skipped: 3}},
					UnsupportedFeatures: []string{"HTTPRouteCORS"},
				},
			},
		},
		SucceededProvisionalTests: []string{"UDPRouteTest"},
	}
	var out strings.Builder
	if err := WriteSummary(&out, report); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.Index(got, "| GATEWAY-HTTP") > strings.Index(got, "| GATEWAY-UDP") {
		t.Errorf("profiles out of order:\n%s", got)
	}
	for _, want := range []string{
		"# turna v0.1.0 conformance: mode gateway-namespace",
		"| GATEWAY-HTTP | failure | 36 | 2 | 0 | success | 50 | 0 | 3 | HTTPRouteSimpleSameNamespace, HTTPRouteWeight |",
		"| GATEWAY-UDP | success | 21 | 0 | 0 | - | 0 | 0 | 0 | none |",
		"GATEWAY-HTTP extended features not claimed: HTTPRouteCORS.",
		"Provisional tests that passed: UDPRouteTest.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}
