package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/cli/manifests"
	"github.com/webhook-guard/webhook-guard/internal/cli/release"
	runcmd "github.com/webhook-guard/webhook-guard/internal/cli/run"
	"github.com/webhook-guard/webhook-guard/internal/cli/status"
	"github.com/webhook-guard/webhook-guard/internal/cli/unmutated"
	versioncmd "github.com/webhook-guard/webhook-guard/internal/cli/version"
	"github.com/webhook-guard/webhook-guard/internal/cli/webhooks"
)

// version and commit are set at build time with -ldflags
// "-X main.version=... -X main.commit=..." (Makefile, Dockerfile,
// hack/release.sh); versioncmd.New falls back to what go build recorded
// where they are unset.
var (
	version = "dev"
	commit  = "unknown"
)

// Exit codes. A command may choose another with a cli.ExitError ("guard
// status --exit-code", "guard unmutated --exit-code").
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stdout, os.Stderr, factory.LoadRESTConfig, displayName(os.Args[0])); err != nil {
		fmt.Fprintln(os.Stderr, "guard:", err)
		os.Exit(exitCode(err))
	}
}

func exitCode(err error) int {
	var exit cli.ExitError
	if errors.As(err, &exit) {
		return exit.Code
	}
	if errors.As(err, new(cli.UsageError)) {
		return exitUsage
	}
	return exitFailure
}

// run runs the command args name. It is main without the process: tests
// call it with a load that fails them, to check that flags and
// configuration are validated before anything reaches the cluster.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, load factory.Loader, name string) error {
	root := newRootCommand(cli.IOStreams{Out: stdout, ErrOut: stderr}, load)
	root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: name}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}

// newRootCommand is "guard", with a subcommand per package of
// internal/cli, each with a Factory of its own.
func newRootCommand(streams cli.IOStreams, load factory.Loader) *cobra.Command {
	root := &cobra.Command{
		Use:   "guard",
		Short: "guard keeps admission working when an approved admission webhook goes down.",
		// Without a subcommand: a command that is not one, or none.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usage(cmd, fmt.Errorf("unknown command %q", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usage(cmd, errors.New("no command given"))
		},
		// The log of every command but run, which replaces it with its own.
		PersistentPreRun: func(*cobra.Command, []string) {
			ctrl.SetLogger(zap.New(zap.WriteTo(streams.ErrOut)))
		},
		// main prints the error, once, and chooses the exit code.
		SilenceErrors: true,
		SilenceUsage:  true,
		// "guard completion bash|zsh|fish|powershell".
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
	}
	root.SetFlagErrorFunc(usage)
	addKlogFlags(root.PersistentFlags(), streams.ErrOut)
	build := versioncmd.New(version, commit)
	root.AddCommand(
		runcmd.NewCmd(streams, factory.New(load), build),
		status.NewCmd(streams, factory.New(load)),
		webhooks.NewCmd(streams, factory.New(load)),
		unmutated.NewCmd(streams, factory.New(load)),
		release.NewCmd(streams, factory.New(load)),
		manifests.NewCmd(streams, factory.New(load)),
		versioncmd.NewCmd(streams, build),
	)
	return root
}

// addKlogFlags adds kubectl's -v/--v and --vmodule to fs: the verbosity
// of client-go's klog log (-v=6 prints every request and its response
// status, -v=8 their bodies, as in kubectl). klog writes to errOut, each
// line once. Every invocation starts at -v=0, as kubectl's process does.
func addKlogFlags(fs *pflag.FlagSet, errOut io.Writer) {
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	for name, value := range map[string]string{"v": "0", "vmodule": "", "logtostderr": "false", "one_output": "true"} {
		if err := klogFlags.Set(name, value); err != nil {
			panic(fmt.Sprintf("klog flag %s: %v", name, err))
		}
	}
	klog.SetOutput(errOut)
	for _, name := range []string{"v", "vmodule"} {
		pf := pflag.PFlagFromGoFlag(klogFlags.Lookup(name))
		if name == "v" {
			pf.Shorthand = "v"
		}
		fs.AddFlag(pf)
	}
}

// displayName is how the binary invoked as arg0 names itself in help and
// usage: "kubectl guard" when kubectl runs it as the plugin kubectl-guard
// (kubectl's plugin lookup runs the first kubectl-guard on PATH for
// "kubectl guard ..."), else "guard".
func displayName(arg0 string) string {
	base := strings.TrimSuffix(filepath.Base(arg0), ".exe")
	if plugin, ok := strings.CutPrefix(base, "kubectl-"); ok && plugin != "" {
		return "kubectl " + strings.ReplaceAll(plugin, "_", "-")
	}
	return "guard"
}

// usage prints cmd's usage on stderr, as a mistake on the command line
// deserves, and marks err as a cli.UsageError.
func usage(cmd *cobra.Command, err error) error {
	cmd.PrintErr(cmd.UsageString())
	return cli.UsageError{Err: err}
}
