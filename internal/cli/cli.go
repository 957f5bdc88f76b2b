package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// IOStreams are where a command writes: Out for what it was asked for,
// ErrOut for logs and for what it could not read.
type IOStreams struct {
	Out, ErrOut io.Writer
}

// UsageError marks a mistake on the command line; main exits 2 on it.
type UsageError struct{ Err error }

func (u UsageError) Error() string { return u.Err.Error() }

func (u UsageError) Unwrap() error { return u.Err }

// Usagef is a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// ExitError asks main to exit with Code after printing Err: a command that
// did its work and reports a finding through its exit status ("guard
// status --exit-code").
type ExitError struct {
	Code int
	Err  error
}

func (e ExitError) Error() string { return e.Err.Error() }

func (e ExitError) Unwrap() error { return e.Err }

// NoArgs refuses positional arguments, as a UsageError; for cobra's Args.
func NoArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return Usagef("unexpected argument %q", args[0])
	}
	return nil
}

// Output formats of -o/--output: table for people, the default, and the
// formats of kubectl's -o for scripts, with kubectl's names and meanings.
const (
	OutputTable = "table"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
	// OutputName prints one kind[.group]/name line per object the command
	// reports (a Named report), as kubectl's -o name does.
	OutputName = "name"
	// OutputJSONPath is -o jsonpath=TEMPLATE: the template run on the
	// report's JSON, as kubectl's -o jsonpath runs it on an object's.
	OutputJSONPath = "jsonpath"
	// OutputJSONPathAsJSON is -o jsonpath-as-json=TEMPLATE: what the
	// template selects, as a JSON list.
	OutputJSONPathAsJSON = "jsonpath-as-json"
)

// outputFormats is what -o accepts, for usage and errors. It keeps the
// words "table, json or yaml" of the formats it began with.
const outputFormats = "table, json or yaml, or kubectl's name, jsonpath=TEMPLATE or jsonpath-as-json=TEMPLATE"

// AddOutputFlag adds -o/--output to fs, bound to p. Default table.
func AddOutputFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVarP(p, "output", "o", OutputTable, "Output format: "+outputFormats+
		" (a template of a single path may leave out its braces and leading dot, as kubectl's --sort-by does).")
}

// ValidateOutput refuses, as a UsageError that says what is accepted, an
// output format other than those of AddOutputFlag, and a jsonpath template
// that does not parse.
func ValidateOutput(format string) error {
	_, err := parseOutput(format)
	return err
}

// OutputFormat is format without its template: "jsonpath" for
// "jsonpath={.a}", format itself for the others.
func OutputFormat(format string) string {
	name, _, _ := strings.Cut(format, "=")
	return name
}

// Named is a report that -o name can print.
type Named interface {
	// ObjectNames are the Kubernetes objects the report is about, each as
	// ObjectName spells it, in the report's order.
	ObjectNames() []string
}

// ObjectName is an object's name as kubectl's -o name prints it: the kind
// in lower case, then ".group" unless it is the core group, then "/name";
// for example deployment.apps/web, configmap/settings. Like kubectl's, it
// leaves out the namespace.
func ObjectName(gk schema.GroupKind, name string) string {
	// As printObj of k8s.io/cli-runtime/pkg/printers/name.go.
	if gk.Group == "" {
		return strings.ToLower(gk.Kind) + "/" + name
	}
	return strings.ToLower(gk.Kind) + "." + gk.Group + "/" + name
}

// PrintObject writes v to w in format, any of AddOutputFlag's but table:
// indented JSON, YAML, a Named v's ObjectNames one a line, or what a
// jsonpath template makes of v's JSON (allowing missing keys, as kubectl
// does by default; nothing is written when the template fails).
func PrintObject(w io.Writer, format string, v any) error {
	p, err := parseOutput(format)
	if err != nil {
		return err
	}
	switch p.format {
	case OutputJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case OutputYAML:
		data, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	case OutputName:
		named, ok := v.(Named)
		if !ok {
			return fmt.Errorf("-o name: %T names no objects", v)
		}
		var b strings.Builder
		for _, n := range named.ObjectNames() {
			b.WriteString(n + "\n")
		}
		_, err := io.WriteString(w, b.String())
		return err
	case OutputJSONPath, OutputJSONPathAsJSON:
		// As kubectl's JSONPathPrinter: the template runs on v's JSON,
		// not on its Go fields.
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		var doc any
		if err := json.Unmarshal(data, &doc); err != nil {
			return err
		}
		var out bytes.Buffer
		if err := p.jsonPath.Execute(&out, doc); err != nil {
			return fmt.Errorf("-o %s: executing the template %q: %w", p.format, p.template, err)
		}
		_, err = w.Write(out.Bytes())
		return err
	}
	return fmt.Errorf("-o %q: a table is the command's own to print", format)
}

// output is a parsed -o value.
type output struct {
	// format is one of the Output constants.
	format string
	// template is the jsonpath template, relaxed, and jsonPath its parse.
	template string
	jsonPath *jsonpath.JSONPath
}

// parseOutput parses an -o value, as kubectl's PrintFlags do: a format,
// or jsonpath=TEMPLATE or jsonpath-as-json=TEMPLATE. Every mistake is a
// UsageError that says what is accepted.
func parseOutput(value string) (output, error) {
	name, tmpl, hasTemplate := strings.Cut(value, "=")
	switch name {
	case OutputTable, OutputJSON, OutputYAML, OutputName:
		if !hasTemplate {
			return output{format: name}, nil
		}
	case OutputJSONPath, OutputJSONPathAsJSON:
		if tmpl == "" {
			return output{}, Usagef("-o %q: no template: give one after the =, for example -o %s='{.kind}' (kubectl's JSONPath: https://kubernetes.io/docs/reference/kubectl/jsonpath/)", value, name)
		}
		tmpl = relaxedJSONPath(tmpl)
		j := jsonpath.New("output").AllowMissingKeys(true)
		if err := j.Parse(tmpl); err != nil {
			return output{}, Usagef("-o %q: the template %q does not parse: %v (kubectl's JSONPath: https://kubernetes.io/docs/reference/kubectl/jsonpath/)", value, tmpl, err)
		}
		if name == OutputJSONPathAsJSON {
			j.EnableJSONOutput(true)
		}
		return output{format: name, template: tmpl, jsonPath: j}, nil
	}
	return output{}, Usagef("-o %q: must be %s", value, outputFormats)
}

// pathRegexp and relaxedJSONPath mirror RelaxedJSONPathExpression of
// k8s.io/kubectl/pkg/cmd/get/customcolumn.go (v0.37), kubectl's reading of
// --sort-by, -o custom-columns and "wait --for=jsonpath": a template that
// is a single path, with or without its braces and its leading dot
// (targets[*].state, .targets[*].state, {targets[*].state}), becomes
// {.targets[*].state}. kubectl's -o jsonpath itself does not relax (it
// prints a template without braces as text); here a single path does, as
// long as it starts with a field name. Anything else ({@}, {$.a},
// {"\n"}, several {...}) goes to the parser as given, so every template
// kubectl's -o jsonpath reads as a path is read the same.
var pathRegexp = regexp.MustCompile(`^\{\.?([^{}]+)\}$|^\.?([^{}]+)$`)

func relaxedJSONPath(tmpl string) string {
	m := pathRegexp.FindStringSubmatch(tmpl)
	if m == nil {
		return tmpl
	}
	field := m[1] + m[2] // one of the two is empty
	if r := field[0]; r != '_' && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') {
		return tmpl
	}
	return "{." + field + "}"
}

// Dash is s, or "-" for an empty table cell.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Command is a command's Options, as cert-manager's cmctl shapes them.
type Command interface {
	// Validate checks the flags and arguments.
	Validate() error
	// Complete fills in what the flags leave out (clients, the
	// installation's namespace, the installed configuration).
	Complete(ctx context.Context) error
	// Run does the command's work.
	Run(ctx context.Context) error
}

// RunE is cobra's RunE for o: Validate, Complete, then Run.
func RunE(o Command) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := o.Validate(); err != nil {
			return err
		}
		if err := o.Complete(cmd.Context()); err != nil {
			return err
		}
		return o.Run(cmd.Context())
	}
}
