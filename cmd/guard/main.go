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
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
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

const usage = `guard keeps admission working when an approved mutating webhook goes down.

Usage:
  guard <command> [flags]

Commands:
  run        run the breaker and the guard (the service)
  status     print every configured target with its circuit state
  manifests  render manifests (static: the static admission webhook)
  version    print the version

Run "guard <command> --help" for the flags of a command.
`

// run dispatches a subcommand. It is main without the process: tests call
// it to check flags and configuration handling without starting servers.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
	default:
		fmt.Fprint(stderr, usage)
		return usageError{fmt.Errorf("unknown command %q", args[0])}
	}
}
