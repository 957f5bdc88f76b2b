package factory

import (
	"context"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// RegisterCompletions registers, on cmd, the shell completion of the
// factory's flags that cmd has, as kubectl completes them: --context,
// --cluster and --user from the kubeconfig; -n/--namespace from the
// cluster's namespaces. Call it once the flags are bound. What cannot be
// read completes to nothing.
func (f *Factory) RegisterCompletions(cmd *cobra.Command) {
	fromKubeconfig := map[string]func(*clientcmdapi.Config) []string{
		"context": func(c *clientcmdapi.Config) []string { return keys(c.Contexts) },
		"cluster": func(c *clientcmdapi.Config) []string { return keys(c.Clusters) },
		"user":    func(c *clientcmdapi.Config) []string { return keys(c.AuthInfos) },
	}
	for name, names := range fromKubeconfig {
		if cmd.Flags().Lookup(name) == nil {
			continue
		}
		_ = cmd.RegisterFlagCompletionFunc(name, func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			raw, err := f.ConfigFlags.ToRawKubeConfigLoader().RawConfig()
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return withPrefix(names(&raw), toComplete), cobra.ShellCompDirectiveNoFileComp
		})
	}
	if cmd.Flags().Lookup("namespace") != nil {
		_ = cmd.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return withPrefix(f.namespaceNames(commandContext(cmd)), toComplete), cobra.ShellCompDirectiveNoFileComp
		})
	}
}

// CompleteConfigurations is a cobra ValidArgsFunction for a command whose
// one argument is CONFIGURATION[/WEBHOOK]: the names of the cluster's
// MutatingWebhookConfigurations and ValidatingWebhookConfigurations, and,
// once the argument has a slash, CONFIGURATION/WEBHOOK for each webhook of
// that configuration.
func (f *Factory) CompleteConfigurations(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 || f.buildClients() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx := commandContext(cmd)
	var names []string
	if conf, _, ok := strings.Cut(toComplete, "/"); ok {
		names = f.webhookNames(ctx, conf)
	} else {
		names = f.configurationNames(ctx)
	}
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// namespaceNames lists the cluster's namespaces; nil when it cannot.
func (f *Factory) namespaceNames(ctx context.Context) []string {
	if f.buildClients() != nil {
		return nil
	}
	list, err := f.KubeClient.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(list.Items))
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	return names
}

// configurationNames lists the names of both kinds of webhook
// configuration, each once, sorted; what cannot be listed is left out.
func (f *Factory) configurationNames(ctx context.Context) []string {
	var names []string
	ar := f.KubeClient.AdmissionregistrationV1()
	if list, err := ar.MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range list.Items {
			names = append(names, c.Name)
		}
	}
	if list, err := ar.ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range list.Items {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// webhookNames lists CONFIGURATION/WEBHOOK for each webhook of the
// configurations of either kind named conf.
func (f *Factory) webhookNames(ctx context.Context, conf string) []string {
	var names []string
	ar := f.KubeClient.AdmissionregistrationV1()
	if c, err := ar.MutatingWebhookConfigurations().Get(ctx, conf, metav1.GetOptions{}); err == nil {
		for _, w := range c.Webhooks {
			names = append(names, conf+"/"+w.Name)
		}
	}
	if c, err := ar.ValidatingWebhookConfigurations().Get(ctx, conf, metav1.GetOptions{}); err == nil {
		for _, w := range c.Webhooks {
			names = append(names, conf+"/"+w.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// commandContext is cmd's context, or a background one when cobra has
// none (a command run without ExecuteContext).
func commandContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// keys are m's keys, sorted.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// withPrefix keeps the names that start with prefix, as kubectl's
// completion does, in their order.
func withPrefix(names []string, prefix string) []cobra.Completion {
	out := make([]cobra.Completion, 0, len(names))
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}
