// Package version is "guard version", and the binary's version and commit
// that "guard run" logs and exports. main sets them at build time; this
// package only formats them.
package version

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/webhook-guard/webhook-guard/internal/cli"
)

// unknownCommit is the commit of a binary built outside a git checkout.
const unknownCommit = "unknown"

// Build is what the binary was built from.
type Build struct {
	// Version is the release (-ldflags -X main.version, Makefile and
	// Dockerfile), else the main module's version go build recorded, else
	// "dev" (New).
	Version string
	// Commit is the git commit (-ldflags -X main.commit), else the
	// vcs.revision go build recorded, else "unknown" (New).
	Commit string
}

// String is what "guard version" prints: the version, the revision and
// the Go version.
func (b Build) String() string {
	return fmt.Sprintf("webhook-guard %s (revision %s, %s)", b.Version, b.Revision(), runtime.Version())
}

// Revision is Commit, or else the VCS revision go build recorded, or else
// "unknown".
func (b Build) Revision() string {
	if b.Commit != unknownCommit && b.Commit != "" {
		return b.Commit
	}
	return New(devVersion, unknownCommit).Commit
}

// devVersion is the version of a binary built without -X main.version
// and outside a module version (go build in a checkout).
const devVersion = "dev"

// New is the binary's Build: version and commit as -ldflags -X set them
// (main.version, main.commit), and where they are unset ("dev",
// "unknown" or empty) what the Go toolchain recorded in the binary
// (runtime/debug.ReadBuildInfo): the main module's version (a tag, or a
// pseudo-version go build derives from the checkout's commit; go install
// module@vX.Y.Z sets it too) and the setting vcs.revision (with "-dirty"
// when vcs.modified). So a plain "go build ./cmd/guard" in a checkout
// still says which commit it is.
func New(version, commit string) Build {
	info, _ := debug.ReadBuildInfo()
	return fromBuildInfo(version, commit, info)
}

// fromBuildInfo is New with the build info given (nil when there is none).
func fromBuildInfo(version, commit string, info *debug.BuildInfo) Build {
	b := Build{Version: version, Commit: commit}
	if b.Version == "" {
		b.Version = devVersion
	}
	if b.Commit == "" {
		b.Commit = unknownCommit
	}
	if info == nil {
		return b
	}
	if b.Version == devVersion && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = info.Main.Version
	}
	if b.Commit == unknownCommit {
		var rev string
		var modified bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			b.Commit = rev
			if modified {
				b.Commit += "-dirty"
			}
		}
	}
	return b
}

// Info is what "guard version -o json|yaml" prints, as kubectl version -o
// json prints its clientVersion.
type Info struct {
	// Version is Build.Version.
	Version string `json:"version"`
	// Revision is Build.Revision().
	Revision string `json:"revision"`
	// GoVersion is the Go release the binary was built with.
	GoVersion string `json:"goVersion"`
}

// Info is b as -o json|yaml prints it.
func (b Build) Info() Info {
	return Info{Version: b.Version, Revision: b.Revision(), GoVersion: runtime.Version()}
}

// Options are the inputs of "guard version".
type Options struct {
	cli.IOStreams
	// Build is what it prints.
	Build Build
	// Output is the format (-o, --output): json, yaml, jsonpath=TEMPLATE
	// or jsonpath-as-json=TEMPLATE; not name, for there is no object.
	// Default table: Build's one line.
	Output string
}

var _ cli.Command = &Options{}

// NewCmd returns "guard version". It only binds flags.
func NewCmd(streams cli.IOStreams, build Build) *cobra.Command {
	o := &Options{IOStreams: streams, Build: build}
	cmd := &cobra.Command{
		Use:   "version [-o json|yaml|jsonpath=TEMPLATE]",
		Short: "Print the version",
		Long: `Prints the version, the revision and the Go version, on one line; -o json or
-o yaml prints them as {version, revision, goVersion}, as kubectl version
-o json does for its client, and -o jsonpath=TEMPLATE runs a template on
that (-o jsonpath='{.version}').`,
		Args: cli.NoArgs,
		RunE: cli.RunE(o),
	}
	cmd.Flags().StringVarP(&o.Output, "output", "o", cli.OutputTable, "Output format: json or yaml, or kubectl's jsonpath=TEMPLATE or jsonpath-as-json=TEMPLATE; default: one line.")
	return cmd
}

// Validate refuses an output format it does not print.
func (o *Options) Validate() error {
	if err := cli.ValidateOutput(o.Output); err != nil {
		return err
	}
	if o.Output == cli.OutputName {
		return cli.Usagef("-o name: the version is no Kubernetes object; want json, yaml, jsonpath=TEMPLATE or jsonpath-as-json=TEMPLATE")
	}
	return nil
}

// Complete has nothing to complete: the version reaches no cluster.
func (o *Options) Complete(context.Context) error { return nil }

// Run prints the version.
func (o *Options) Run(context.Context) error {
	if o.Output == cli.OutputTable {
		_, err := fmt.Fprintln(o.Out, o.Build)
		return err
	}
	return cli.PrintObject(o.Out, o.Output, o.Build.Info())
}
