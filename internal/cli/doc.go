// Package cli holds what every command of the guard binary shares: where
// it writes (IOStreams), the errors that choose an exit code (UsageError,
// ExitError) and the -o/--output flag with its printers, kubectl's json,
// yaml, name and jsonpath formats without k8s.io/cli-runtime. Each
// command is a package of its own under internal/cli, with an Options
// struct and Complete, Validate and Run methods; internal/cli/factory
// builds their clients. Package cli holds no command and reaches no
// cluster.
package cli
