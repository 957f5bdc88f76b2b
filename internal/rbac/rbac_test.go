package rbac_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/rbac"
)

func TestRenderTargetsRole(t *testing.T) {
	targets := func(pairs ...string) *config.Configuration {
		cfg := &config.Configuration{}
		for i := 0; i < len(pairs); i += 2 {
			cfg.Targets = append(cfg.Targets, config.Target{Kind: circuit.KindMutating, Configuration: pairs[i], Webhook: pairs[i+1]})
		}
		return cfg
	}
	writeRule := func(names ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{
			APIGroups:     []string{"admissionregistration.k8s.io"},
			Resources:     []string{"mutatingwebhookconfigurations"},
			ResourceNames: names,
			Verbs:         []string{"patch"},
		}}
	}
	cases := map[string]struct {
		cfg  *config.Configuration
		want []rbacv1.PolicyRule
	}{
		"one target grants update and patch on its configuration only": {
			cfg:  targets("slow-mutator", "slow-mutator.example.com"),
			want: writeRule("slow-mutator"),
		},
		"names are sorted so the output does not depend on file order": {
			cfg:  targets("zeta", "z.example.com", "alpha", "a.example.com", "mid", "m.example.com"),
			want: writeRule("alpha", "mid", "zeta"),
		},
		"two webhooks of one configuration name it once": {
			cfg:  targets("shared", "a.example.com", "other", "o.example.com", "shared", "b.example.com"),
			want: writeRule("other", "shared"),
		},
		"no targets grants nothing rather than every name": {
			cfg:  targets(),
			want: nil,
		},
		"validating targets get their own rule, a name shared across kinds counts for each": {
			cfg: func() *config.Configuration {
				cfg := targets("shared", "m.example.com")
				cfg.Targets = append(cfg.Targets,
					config.Target{Kind: circuit.KindValidating, Configuration: "policy-engine", Webhook: "v.example.com"},
					config.Target{Kind: circuit.KindValidating, Configuration: "shared", Webhook: "m.example.com"})
				return cfg
			}(),
			want: append(writeRule("shared"), rbacv1.PolicyRule{
				APIGroups:     []string{"admissionregistration.k8s.io"},
				Resources:     []string{"validatingwebhookconfigurations"},
				ResourceNames: []string{"policy-engine", "shared"},
				Verbs:         []string{"patch"},
			}),
		},
		"a nil configuration grants nothing": {
			cfg:  nil,
			want: nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			role := rbac.RenderTargetsRole(tc.cfg)
			require.NotNil(t, role)
			assert.Equal(t, "rbac.authorization.k8s.io/v1", role.APIVersion)
			assert.Equal(t, "ClusterRole", role.Kind)
			assert.Equal(t, rbac.TargetsRoleName, role.Name)
			assert.Equal(t, rbac.Labels(), role.Labels)
			var configurationRules []rbacv1.PolicyRule
			for _, r := range role.Rules {
				if r.Resources[0] != "mutatingadmissionpolicies" {
					configurationRules = append(configurationRules, r)
				}
			}
			assert.Equal(t, tc.want, configurationRules)
			for _, r := range role.Rules {
				assert.NotEmpty(t, r.ResourceNames, "a write rule without resourceNames grants every name")
			}
		})
	}
}

func TestRenderTargetsRole_doesNotModifyTheConfiguration(t *testing.T) {
	cfg := &config.Configuration{Targets: []config.Target{
		{Kind: circuit.KindMutating, Configuration: "b", Webhook: "b.example.com"},
		{Kind: circuit.KindMutating, Configuration: "a", Webhook: "a.example.com"},
	}}
	rbac.RenderTargetsRole(cfg)
	assert.Equal(t, []string{"b", "a"}, cfg.Names(circuit.KindMutating))
}

func TestRenderTargetsRole_aNamedInstanceMayUpdateItsOwnPolicyOnly(t *testing.T) {
	cfg := &config.Configuration{Instance: "canary", Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: "a", Webhook: "a.example.com"}}}
	role := rbac.RenderTargetsRole(cfg)
	require.Len(t, role.Rules, 2)
	assert.Equal(t, rbacv1.PolicyRule{
		APIGroups:     []string{"admissionregistration.k8s.io"},
		Resources:     []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
		ResourceNames: []string{"webhook-guard-canary"},
		Verbs:         []string{"update"},
	}, role.Rules[1])
	cfg.Instance = ""
	assert.Len(t, rbac.RenderTargetsRole(cfg).Rules, 1, "the default installation's policy is granted by the static role")
}

// The service's token may not write any MutatingAdmissionPolicy or
// binding: the marking policies are installed by an administrator.
func TestRenderTargetsRole_grantsNoWriteOnMutatingAdmissionPolicies(t *testing.T) {
	cfg := &config.Configuration{Instance: "canary", Targets: []config.Target{
		{Kind: circuit.KindMutating, Configuration: "a", Webhook: "a.example.com"},
		{Kind: circuit.KindMutating, Configuration: "b", Webhook: "b.example.com"},
		{Kind: circuit.KindValidating, Configuration: "v", Webhook: "v.example.com"},
	}}
	for _, r := range rbac.RenderTargetsRole(cfg).Rules {
		for _, res := range r.Resources {
			assert.NotContains(t, []string{"mutatingadmissionpolicies", "mutatingadmissionpolicybindings", "*"}, res, "rule %v", r)
		}
	}
}

// The path probe may GET through kube-apiserver's service proxy to the
// Services its targets name, by the name RBAC sees, and nowhere else.
func TestRenderTargetsRole_pathProbeMayReachItsTargetsServicesOnly(t *testing.T) {
	withService := func(configuration, svc string, port int32, enabled bool) config.Target {
		tgt := config.Target{Kind: circuit.KindMutating, Configuration: configuration, Webhook: configuration + ".example.com"}
		tgt.APIServerSignal.Enabled = enabled
		if svc != "" {
			tgt.APIServerSignal.PathProbe.Service = &config.Service{Namespace: "webhooks", Name: svc, Port: port}
		}
		return tgt
	}
	cfg := &config.Configuration{Targets: []config.Target{
		withService("b", "zeta", 443, true),
		withService("a", "alpha", 8443, true),
		withService("c", "zeta", 443, true), // the same Service twice: once
		withService("d", "", 0, true),       // none configured: nothing
		withService("e", "off", 443, false), // the signal is off: no path probe
		{Kind: circuit.KindValidating, Configuration: "v", Webhook: "v.example.com"},
	}}
	var proxy []rbacv1.PolicyRule
	for _, r := range rbac.RenderTargetsRole(cfg).Rules {
		if r.Resources[0] == "services/proxy" {
			proxy = append(proxy, r)
		}
	}
	assert.Equal(t, []rbacv1.PolicyRule{{
		APIGroups:     []string{""},
		Resources:     []string{"services/proxy"},
		ResourceNames: []string{"https:alpha:8443", "https:zeta:443"},
		Verbs:         []string{"get"},
	}}, proxy)
	assert.Empty(t, func() []rbacv1.PolicyRule {
		var out []rbacv1.PolicyRule
		for _, r := range rbac.RenderTargetsRole(&config.Configuration{Targets: []config.Target{withService("d", "", 0, true)}}).Rules {
			if r.Resources[0] == "services/proxy" {
				out = append(out, r)
			}
		}
		return out
	}(), "no path probe Service: no rule, never one without resourceNames")
}
