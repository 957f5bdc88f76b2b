package rbac_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"

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

// No installation's token may write an admission policy, its own guard
// policy included: kube-apiserver runs no admission policy on those
// writes, so a token that could write the guard policy could loosen it.
// A named instance's targets role grants patch on its targets and nothing
// else.
func TestRenderTargetsRole_grantsNoWriteOnAdmissionPolicies(t *testing.T) {
	cfg := &config.Configuration{Instance: "canary", Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: "a", Webhook: "a.example.com"}}}
	for _, instance := range []string{"canary", ""} {
		cfg.Instance = instance
		role := rbac.RenderTargetsRole(cfg)
		require.Len(t, role.Rules, 1, instance)
		assert.Equal(t, []string{"mutatingwebhookconfigurations"}, role.Rules[0].Resources, instance)
		assert.Equal(t, []string{"patch"}, role.Rules[0].Verbs, instance)
	}
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

// The path probe's grant is not in the ClusterRole: a ClusterRole's
// resourceNames name no namespace.
func TestRenderTargetsRole_grantsNothingOnServicesProxy(t *testing.T) {
	tgt := config.Target{Kind: circuit.KindMutating, Configuration: "a", Webhook: "a.example.com"}
	tgt.APIServerSignal.Enabled = true
	tgt.APIServerSignal.PathProbe.Service = &config.Service{Namespace: "webhooks", Name: "hook", Port: 443}
	for _, r := range rbac.RenderTargetsRole(&config.Configuration{Targets: []config.Target{tgt}}).Rules {
		assert.NotContains(t, r.Resources, "services/proxy", "rule %v", r)
	}
}

// pathProbeTarget is a mutating target whose path probe names the
// Service namespace/name:port, or none when name is empty.
func pathProbeTarget(configuration, namespace, name string, port int32, enabled bool) config.Target {
	tgt := config.Target{Kind: circuit.KindMutating, Configuration: configuration, Webhook: configuration + ".example.com"}
	tgt.APIServerSignal.Enabled = enabled
	if name != "" {
		tgt.APIServerSignal.PathProbe.Service = &config.Service{Namespace: namespace, Name: name, Port: port}
	}
	return tgt
}

// The path probe may GET through kube-apiserver's service proxy to the
// Services its targets name, by the name RBAC sees, in their own
// namespaces only: one Role and RoleBinding per namespace.
func TestRenderPathProbeGrants(t *testing.T) {
	guard := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "webhook-guard", Namespace: "guard-system"}
	proxyRule := func(names ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services/proxy"}, ResourceNames: names, Verbs: []string{"get"}}}
	}
	cases := map[string]struct {
		cfg  *config.Configuration
		want map[string][]rbacv1.PolicyRule // by namespace
	}{
		"each namespace gets the names of its own Services only, sorted, once": {
			cfg: &config.Configuration{Targets: []config.Target{
				pathProbeTarget("b", "webhooks", "zeta", 443, true),
				pathProbeTarget("a", "webhooks", "alpha", 8443, true),
				pathProbeTarget("c", "webhooks", "zeta", 443, true), // the same Service twice: once
				pathProbeTarget("d", "other", "zeta", 443, true),    // the same name elsewhere: there only
			}},
			want: map[string][]rbacv1.PolicyRule{
				"other":    proxyRule("https:zeta:443"),
				"webhooks": proxyRule("https:alpha:8443", "https:zeta:443"),
			},
		},
		"a target without a path probe Service grants nothing": {
			cfg:  &config.Configuration{Targets: []config.Target{pathProbeTarget("d", "", "", 0, true)}},
			want: map[string][]rbacv1.PolicyRule{},
		},
		"a target whose apiserver signal is off has no path probe": {
			cfg:  &config.Configuration{Targets: []config.Target{pathProbeTarget("e", "webhooks", "off", 443, false)}},
			want: map[string][]rbacv1.PolicyRule{},
		},
		"a nil configuration grants nothing": {
			cfg:  nil,
			want: map[string][]rbacv1.PolicyRule{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			grants := rbac.RenderPathProbeGrants(tc.cfg, guard)
			got := map[string][]rbacv1.PolicyRule{}
			var namespaces []string
			for _, g := range grants {
				require.NotNil(t, g.Role)
				require.NotNil(t, g.Binding)
				namespaces = append(namespaces, g.Role.Namespace)
				got[g.Role.Namespace] = g.Role.Rules

				assert.Equal(t, "rbac.authorization.k8s.io/v1", g.Role.APIVersion)
				assert.Equal(t, "Role", g.Role.Kind)
				assert.Equal(t, "webhook-guard-path-probe", g.Role.Name)
				assert.Equal(t, rbac.Labels(), g.Role.Labels)
				for _, r := range g.Role.Rules {
					assert.NotEmpty(t, r.ResourceNames, "a rule without resourceNames grants every name")
				}

				assert.Equal(t, "rbac.authorization.k8s.io/v1", g.Binding.APIVersion)
				assert.Equal(t, "RoleBinding", g.Binding.Kind)
				assert.Equal(t, g.Role.Name, g.Binding.Name)
				assert.Equal(t, g.Role.Namespace, g.Binding.Namespace, "the binding is in the Role's namespace")
				assert.Equal(t, rbac.Labels(), g.Binding.Labels)
				assert.Equal(t, rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: g.Role.Name}, g.Binding.RoleRef)
				assert.Equal(t, []rbacv1.Subject{guard}, g.Binding.Subjects)
			}
			assert.True(t, slices.IsSorted(namespaces), "grants are sorted by namespace: %v", namespaces)
			assert.Equal(t, tc.want, got)
		})
	}
}

// Two installations whose targets' Services share a namespace each get a
// Role and RoleBinding of their own there.
func TestRenderPathProbeGrants_aNamedInstanceHasRolesOfItsOwn(t *testing.T) {
	cfg := &config.Configuration{Instance: "canary", Targets: []config.Target{pathProbeTarget("a", "webhooks", "hook", 443, true)}}
	grants := rbac.RenderPathProbeGrants(cfg, rbac.Subject("system:serviceaccount:canary:webhook-guard"))
	require.Len(t, grants, 1)
	assert.Equal(t, "webhook-guard-canary-path-probe", grants[0].Role.Name)
	assert.Equal(t, "webhook-guard-canary-path-probe", grants[0].Binding.Name)
	assert.Equal(t, "webhook-guard-canary-path-probe", grants[0].Binding.RoleRef.Name)
	assert.Equal(t, "webhook-guard-path-probe", rbac.PathProbeRoleName(""))
}

func TestSubject(t *testing.T) {
	cases := map[string]struct {
		username string
		want     rbacv1.Subject
	}{
		"a ServiceAccount's username is that ServiceAccount": {
			username: "system:serviceaccount:guard-system:webhook-guard",
			want:     rbacv1.Subject{Kind: "ServiceAccount", Name: "webhook-guard", Namespace: "guard-system"},
		},
		"any other username is a User": {
			username: "guard-operator",
			want:     rbacv1.Subject{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "guard-operator"},
		},
		"a malformed ServiceAccount username is a User of that name": {
			username: "system:serviceaccount:no-name",
			want:     rbacv1.Subject{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "system:serviceaccount:no-name"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, rbac.Subject(tc.username))
		})
	}
}

// Render is what "guard manifests rbac" writes: the ClusterRole, then
// each namespace's Role and RoleBinding, bound to the breaker's
// ServiceAccount.
func TestRender_writesTheClusterRoleThenEachNamespacesRoleAndBinding(t *testing.T) {
	cfg := &config.Configuration{Targets: []config.Target{
		pathProbeTarget("b", "beta", "hook", 443, true),
		pathProbeTarget("a", "alpha", "hook", 443, true),
	}}
	objs := rbac.Render(cfg, "system:serviceaccount:guard-system:webhook-guard")
	var got []string
	for _, obj := range objs {
		m, err := meta.Accessor(obj)
		require.NoError(t, err)
		got = append(got, obj.GetObjectKind().GroupVersionKind().Kind+" "+m.GetNamespace()+"/"+m.GetName())
	}
	assert.Equal(t, []string{
		"ClusterRole /webhook-guard-targets",
		"Role alpha/webhook-guard-path-probe", "RoleBinding alpha/webhook-guard-path-probe",
		"Role beta/webhook-guard-path-probe", "RoleBinding beta/webhook-guard-path-probe",
	}, got)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "webhook-guard", Namespace: "guard-system"}}, objs[2].(*rbacv1.RoleBinding).Subjects)
	assert.Len(t, rbac.Render(&config.Configuration{Targets: []config.Target{pathProbeTarget("a", "", "", 0, true)}}, "x"), 1, "no path probe Service: the ClusterRole alone")
}
