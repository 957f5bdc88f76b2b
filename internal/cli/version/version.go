// Package version is "guard version", and the binary's version and commit
// that "guard run" logs and exports. main sets them at build time; this
// package only formats them.
package version

import (
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
	// Version is the release, "dev" for a local build (-ldflags -X
	// main.version, Makefile and Dockerfile).
	Version string
	// Commit is the git commit, "unknown" outside a checkout (-ldflags -X
	// main.commit).
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
	rev := unknownCommit
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	return rev
}

// Options are the inputs of "guard version".
type Options struct {
	cli.IOStreams
	// Build is what it prints.
	Build Build
}

// NewCmd returns "guard version".
func NewCmd(streams cli.IOStreams, build Build) *cobra.Command {
	o := &Options{IOStreams: streams, Build: build}
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cli.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return o.Run()
		},
	}
}

// Run prints the version.
func (o *Options) Run() error {
	_, err := fmt.Fprintln(o.Out, o.Build)
	return err
}
