// Command chartdocs writes the values table of the Helm chart's README.md
// from values.yaml, as helm-docs does: every key, its type (from
// values.schema.json where it says, else from the default), its default
// and the comment above it. "make docs" runs it; a test in this folder
// fails while the README is out of date.
//
//	go run ./chartdocs -chart <path to deploy/helm/webhook-guard>
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	chart := flag.String("chart", "", "the chart's folder (absolute: go run -C hack)")
	flag.Parse()
	if err := run(*chart); err != nil {
		fmt.Fprintln(os.Stderr, "chartdocs:", err)
		os.Exit(1)
	}
}

func run(chart string) error {
	if chart == "" {
		return fmt.Errorf("-chart is required")
	}
	readme, err := Generate(chart)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(chart, "README.md"), []byte(readme), 0o644)
}

// Generate returns the chart's README.md with its values table generated
// from values.yaml and values.schema.json.
func Generate(chart string) (string, error) {
	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return "", err
	}
	schema, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		return "", err
	}
	readme, err := os.ReadFile(filepath.Join(chart, "README.md"))
	if err != nil {
		return "", err
	}
	rows, err := Rows(values, schema)
	if err != nil {
		return "", err
	}
	return Update(string(readme), Table(rows))
}
