package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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

// Output formats of -o/--output.
const (
	OutputTable = "table"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// AddOutputFlag adds -o/--output to fs, bound to p. Default table.
func AddOutputFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVarP(p, "output", "o", OutputTable, "Output format: table, json or yaml.")
}

// ValidateOutput refuses an output format other than table, json and
// yaml, as a UsageError.
func ValidateOutput(format string) error {
	switch format {
	case OutputTable, OutputJSON, OutputYAML:
		return nil
	}
	return Usagef("-o %q: must be table, json or yaml", format)
}

// PrintObject writes v to w as indented JSON (format json) or as YAML
// (format yaml).
func PrintObject(w io.Writer, format string, v any) error {
	if format == OutputJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
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
	// Complete fills in what the flags leave out (clients, the installed
	// configuration).
	Complete() error
	// Run does the command's work.
	Run(ctx context.Context) error
}

// RunE is cobra's RunE for o: Validate, Complete, then Run.
func RunE(o Command) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := o.Validate(); err != nil {
			return err
		}
		if err := o.Complete(); err != nil {
			return err
		}
		return o.Run(cmd.Context())
	}
}
