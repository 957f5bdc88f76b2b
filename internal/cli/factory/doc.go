// Package factory builds the clients of a guard command once, from the
// flags it owns: kubectl's connection flags from k8s.io/cli-runtime's
// ConfigFlags (--kubeconfig, --context, --user, --token, --as, ...: which
// cluster, as whom), -n/--namespace and --deployment (which installation:
// FindInstallation), and --config (which GuardConfiguration, or the
// installed one). It completes --context, --cluster, --user,
// -n/--namespace and configuration names for the shells. Commands embed a
// *Factory in their Options (cert-manager's cmctl pkg/factory). It reads
// files and builds clients; it does not decide anything a command does.
package factory
