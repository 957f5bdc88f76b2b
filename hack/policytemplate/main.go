// Command policytemplate writes the guard policy template the Helm chart
// renders its guard policy and binding from (admission.PolicyTemplateJSON)
// to standard output; "make manifests" writes it to
// deploy/helm/webhook-guard/files/policy.json, and a drift test in
// deploy/ fails while that file is out of date.
package main

import (
	"fmt"
	"os"

	"github.com/webhook-guard/webhook-guard/internal/admission"
)

func main() {
	data, err := admission.PolicyTemplateJSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, "policytemplate:", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(data); err != nil {
		fmt.Fprintln(os.Stderr, "policytemplate:", err)
		os.Exit(1)
	}
}
