// Command summary prints the summary table of a conformance report YAML, as the driver writes
// it after a run: `go run ./cmd/summary reports/v1.7.0/turna-default-report.yaml`.
package main

import (
	"fmt"
	"os"

	"github.com/turna/turna/e2e/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: summary <report.yaml>")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err == nil {
		var report confv1.ConformanceReport
		if err = yaml.Unmarshal(raw, &report); err == nil {
			err = conformance.WriteSummary(os.Stdout, &report)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
}
