// Command guard is webhook-guard: it keeps admission working when an
// approved mutating webhook goes down, and guards the fields it changes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := certmanagerv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
}

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "guard:", err)
		}
		os.Exit(exitCode(err))
	}
}

func exitCode(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

// usageError marks a mistake on the command line.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

const usage = `guard keeps admission working when an approved mutating webhook goes down.

Usage:
  guard <command> [flags]

Commands:
  run               run the breaker and the guard (the service)
  status            print every configured target with its circuit state and probe counts
  webhooks          list every webhook in the cluster, riskiest first: failurePolicy, timeout, failure ratio and p99 from kube-apiserver's metrics, managed or not
  unmutated         list the objects admitted without a webhook's mutation while its circuit was open
  manifests static  render the static admission webhook manifest (webhook-guard.static.k8s.io)
  manifests policy  render the ValidatingAdmissionPolicy and binding
  manifests rbac    render the ClusterRole that may update the target configurations
  manifests marking render the marking policies of the mutating targets (installed with everything else)
  version           print the version

Run "guard <command> --help" for the flags of a command.
`

// run dispatches a subcommand. It is main without the process: tests call
// it to check flags and configuration handling without starting servers.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return dispatch(ctx, args, stdout, stderr, ctrl.GetConfig)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer, restConfig func() (*rest.Config, error)) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{errors.New("no command given")}
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version":
		fmt.Fprintln(stdout, versionString())
		return nil
	case "run":
		return runCommand(ctx, args[1:], stderr, restConfig)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(stderr)))
	switch args[0] {
	case "status":
		return statusCommand(ctx, args[1:], stdout, stderr, restConfig)
	case "webhooks":
		return webhooksCommand(ctx, args[1:], stdout, stderr, restConfig)
	case "unmutated":
		return unmutatedCommand(ctx, args[1:], stdout, stderr, restConfig)
	case "manifests":
		return manifestsCommand(args[1:], stdout, stderr)
	default:
		fmt.Fprint(stderr, usage)
		return usageError{fmt.Errorf("unknown command %q", args[0])}
	}
}

func flagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
