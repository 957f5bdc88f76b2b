// Command guard is webhook-guard: it keeps admission working when an
// approved admission webhook goes down, and guards the fields it changes.
//
// This package wires it together: the signal context, the root command
// with one subcommand per package under internal/cli, and the exit codes.
// It holds no flags and no decision logic of its own.
package main
