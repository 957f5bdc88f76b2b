// Package factory builds the clients of a guard command once, from the
// flags it owns: --kubeconfig and --context (which cluster, as whom),
// -n/--namespace and --deployment (which installation), and --config
// (which GuardConfiguration, or the installed one). Commands embed a
// *Factory in their Options (cert-manager's cmctl pkg/factory). It reads
// files and builds clients; it does not decide anything a command does.
package factory
