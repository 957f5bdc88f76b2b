package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/internal/rbac"
)

// manifestsCommand renders the objects that depend on a configuration: the
// guard's admission objects (for control planes and for kustomize), the
// ClusterRole that lets the breaker write the targets, and the marking
// policies of the mutating targets.
func manifestsCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "static" && args[0] != "policy" && args[0] != "rbac" && args[0] != "marking") {
		return usageError{errors.New("manifests: want \"static\", \"policy\", \"rbac\" or \"marking\"")}
	}
	fs := flagSet("manifests "+args[0], stderr)
	path := fs.String("config", "", "GuardConfiguration file (required): the managed configurations.")
	breakerUser := fs.String("breaker", circuit.DefaultUsername, "The breaker's username; the running service fills in its real identity.")
	url := fs.String("url", "", "static: the URL at which control-plane hosts reach the guard's webhook (https://.../validate-mutatingwebhookconfigurations).")
	caFile := fs.String("ca-file", "", "static: PEM CA bundle that verifies the webhook's serving certificate.")
	if err := fs.Parse(args[1:]); err != nil {
		return usageError{err}
	}
	if *path == "" {
		return usageError{errors.New("manifests: --config is required")}
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	opts := admission.Options{BreakerUsername: *breakerUser, Managed: cfg.Managed(circuit.KindMutating), ManagedValidating: cfg.Managed(circuit.KindValidating), Instance: cfg.Instance}

	var out []byte
	switch args[0] {
	case "policy":
		policy, binding := admission.RenderPolicy(opts)
		out, err = admission.MarshalManifest(policy, binding)
	case "rbac":
		out, err = admission.MarshalManifest(rbac.RenderTargetsRole(cfg))
	case "marking":
		out, err = admission.MarshalManifest(markingPolicies(cfg)...)
	case "static":
		if *url == "" || *caFile == "" {
			return usageError{errors.New("manifests static: --url and --ca-file are required")}
		}
		ca, rerr := os.ReadFile(*caFile)
		if rerr != nil {
			return fmt.Errorf("reading --ca-file: %w", rerr)
		}
		out, err = admission.MarshalManifest(admission.RenderStaticWebhook(*url, ca, opts))
	}
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
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
