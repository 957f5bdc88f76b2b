// Package manifests is "guard manifests": it renders, from a
// GuardConfiguration, the objects that depend on it: the guard's
// admission objects (the static webhook for control planes, the policy
// for kustomize), the ClusterRole that lets the breaker write the
// targets and, in each namespace of a path probe Service, the Role and
// RoleBinding that let the path probe reach it, and the marking policies
// of the mutating targets. It writes YAML to stdout and reaches no
// cluster.
package manifests

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/internal/rbac"
)

// The kinds of manifest, one subcommand each.
const (
	KindStatic  = "static"
	KindPolicy  = "policy"
	KindRBAC    = "rbac"
	KindMarking = "marking"
)

// Options are the flags of "guard manifests KIND".
type Options struct {
	// Factory owns --config, the GuardConfiguration file (required): the
	// managed configurations. No client is built.
	*factory.Factory
	cli.IOStreams
	// Kind is what to render: KindStatic, KindPolicy, KindRBAC or
	// KindMarking; the subcommand sets it.
	Kind string
	// BreakerUsername is the breaker's username (--breaker): the
	// identity the guard's admission objects exempt, and the subject the
	// path probe's RoleBindings bind (its ServiceAccount, for a
	// system:serviceaccount username). Default circuit.DefaultUsername;
	// for the admission objects, the running service fills in its real
	// identity.
	BreakerUsername string
	// URL is where control-plane hosts reach the guard's webhook, for the
	// static manifest (--url). Required for static.
	URL string
	// CAFile is the PEM CA bundle that verifies the webhook's serving
	// certificate, for the static manifest (--ca-file). Required for
	// static.
	CAFile string
}

// NewCmd returns "guard manifests", with one subcommand per kind.
func NewCmd(streams cli.IOStreams, f *factory.Factory) *cobra.Command {
	o := &Options{Factory: f, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "manifests static|policy|rbac|marking --config FILE",
		Short: "Render what a configuration needs: manifests static|policy|rbac|marking",
		Long: `Renders, from a GuardConfiguration, the objects that depend on it, as YAML
on stdout: what a user overlay or the Helm chart installs beside the
base ("make manifests" writes them for the repository's example
overlays). "targets" is another name for "rbac".`,
		// A kind that is not a subcommand reaches here.
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unknown kind %q: want %q, %q, %q or %q", args[0], KindStatic, KindPolicy, KindRBAC, KindMarking)
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error {
			return cli.Usagef("want %q, %q, %q or %q", KindStatic, KindPolicy, KindRBAC, KindMarking)
		},
	}
	f.AddConfigFlag(cmd.PersistentFlags(), "GuardConfiguration file (required): the managed configurations.")
	cmd.PersistentFlags().StringVar(&o.BreakerUsername, "breaker", circuit.DefaultUsername, "The breaker's username, system:serviceaccount:<namespace>:webhook-guard: policy and static exempt it (the running service fills in its real identity), rbac binds the path probe's Roles to it.")
	kind := func(kind, short string) *cobra.Command {
		return &cobra.Command{
			Use:   kind + " --config FILE",
			Short: short,
			Args:  cli.NoArgs,
			RunE: func(*cobra.Command, []string) error {
				o.Kind = kind
				if err := o.Validate(); err != nil {
					return err
				}
				return o.Run()
			},
		}
	}
	static := kind(KindStatic, "Render the static admission webhook manifest (webhook-guard.static.k8s.io)")
	static.Flags().StringVar(&o.URL, "url", "", "The URL at which control-plane hosts reach the guard's webhook (https://.../validate-mutatingwebhookconfigurations).")
	static.Flags().StringVar(&o.CAFile, "ca-file", "", "PEM CA bundle that verifies the webhook's serving certificate.")
	cmd.AddCommand(static,
		kind(KindPolicy, "Render the ValidatingAdmissionPolicy and binding"),
		withAliases(kind(KindRBAC, "Render the ClusterRole that may patch the target configurations, and the path probe's Role and RoleBinding in each of its Services' namespaces"), "targets"),
		kind(KindMarking, "Render the marking policies of the mutating targets (installed with everything else)"),
	)
	return cmd
}

func withAliases(cmd *cobra.Command, aliases ...string) *cobra.Command {
	cmd.Aliases = aliases
	return cmd
}

// Validate checks the flags and reads the configuration file.
func (o *Options) Validate() error {
	if o.ConfigPath == "" {
		return cli.UsageError{Err: errors.New("--config is required")}
	}
	if o.Kind == KindStatic && (o.URL == "" || o.CAFile == "") {
		return cli.UsageError{Err: errors.New("--url and --ca-file are required")}
	}
	return o.ReadConfigFile()
}

// Run writes the manifest of o.Kind to o.Out.
func (o *Options) Run() error {
	cfg := o.Config
	opts := admission.Options{BreakerUsername: o.BreakerUsername, Managed: cfg.Managed(circuit.KindMutating), ManagedValidating: cfg.Managed(circuit.KindValidating), Instance: cfg.Instance}
	var out []byte
	var err error
	switch o.Kind {
	case KindPolicy:
		policy, binding := admission.RenderPolicy(opts)
		out, err = admission.MarshalManifest(policy, binding)
	case KindRBAC:
		out, err = admission.MarshalManifest(rbac.Render(cfg, o.BreakerUsername)...)
	case KindMarking:
		out, err = admission.MarshalManifest(markingPolicies(cfg)...)
	case KindStatic:
		ca, rerr := os.ReadFile(o.CAFile)
		if rerr != nil {
			return fmt.Errorf("reading --ca-file: %w", rerr)
		}
		out, err = admission.MarshalManifest(admission.RenderStaticWebhook(o.URL, ca, opts))
	default:
		return fmt.Errorf("unknown kind %q", o.Kind)
	}
	if err != nil {
		return err
	}
	_, err = o.Out.Write(out)
	return err
}

// markingPolicies returns the marking policy and binding of every mutating
// target, in the order of the targets, without repeats.
func markingPolicies(cfg *config.Configuration) []runtime.Object {
	var out []runtime.Object
	seen := map[string]bool{}
	for _, t := range cfg.Targets {
		name := marking.Name(t.Configuration, t.Webhook)
		if t.Kind != circuit.KindMutating || seen[name] {
			continue
		}
		seen[name] = true
		policy, binding := marking.Render(t.Configuration, t.Webhook)
		out = append(out, policy, binding)
	}
	return out
}
