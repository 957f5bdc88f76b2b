// Command markingtemplate writes the marking policy template the Helm
// chart renders its marking policies from (marking.TemplateJSON) to
// standard output; "make manifests" writes it to
// deploy/helm/webhook-guard/files/marking.json, and a drift test in
// deploy/ fails while that file is out of date.
package main

import (
	"fmt"
	"os"

	"github.com/webhook-guard/webhook-guard/internal/marking"
)

func main() {
	data, err := marking.TemplateJSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, "markingtemplate:", err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(data); err != nil {
		fmt.Fprintln(os.Stderr, "markingtemplate:", err)
		os.Exit(1)
	}
}
