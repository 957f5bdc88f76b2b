package rbac

import (
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// TargetsRoleName is the name of the ClusterRole rendered by RenderTargetsRole.
// The static ClusterRoleBinding of the same name in deploy/kustomize/base
// binds it to the service account.
const TargetsRoleName = "webhook-guard-targets"

// Labels returns the labels put on every object this package renders.
func Labels() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "webhook-guard"}
}

// RenderTargetsRole renders the ClusterRole TargetsRoleName. It grants patch
// (the breaker's one write per transition is a JSON patch) on
// mutatingwebhookconfigurations and on
// validatingwebhookconfigurations, each limited by resourceNames to the
// names of cfg's targets of that kind, sorted and without repeats; get on
// services/proxy limited to the "https:<service>:<port>" names of the
// targets' apiserverSignal.pathProbe.service (the path probe); and
// nothing else. Reading configurations is granted by the static ClusterRole
// webhook-guard.
//
// A kind with no target gets no rule: a rule with an empty resourceNames
// list would grant every name. The result carries TypeMeta and Labels.
func RenderTargetsRole(cfg *config.Configuration) *rbacv1.ClusterRole {
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: TargetsRoleName, Labels: Labels()},
	}
	for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
		var names []string
		if cfg != nil {
			names = slices.Clone(cfg.Names(kind))
		}
		slices.Sort(names)
		names = slices.Compact(names)
		if len(names) == 0 {
			continue
		}
		role.Rules = append(role.Rules, rbacv1.PolicyRule{
			APIGroups:     []string{"admissionregistration.k8s.io"},
			Resources:     []string{kind.Resource()},
			ResourceNames: names,
			Verbs:         []string{"patch"},
		})
	}
	if names := pathProbeNames(cfg); len(names) > 0 {
		// The path probe: a GET through kube-apiserver's service proxy to
		// each target's webhook Service. RBAC sees the name the request
		// carries, "https:<service>:<port>" (proven against a real
		// apiserver in test/e2e/partition). A ClusterRole's resourceNames
		// name no namespace: see docs/security.md.
		role.Rules = append(role.Rules, rbacv1.PolicyRule{
			APIGroups:     []string{""},
			Resources:     []string{"services/proxy"},
			ResourceNames: names,
			Verbs:         []string{"get"},
		})
	}
	if cfg != nil && cfg.Instance != "" {
		// The static role grants update on the default installation's
		// policy only; an instance's policy has a name of its own.
		name := "webhook-guard-" + cfg.Instance
		role.Rules = append(role.Rules, rbacv1.PolicyRule{
			APIGroups:     []string{"admissionregistration.k8s.io"},
			Resources:     []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
			ResourceNames: []string{name},
			Verbs:         []string{"update"},
		})
	}
	return role
}

// pathProbeNames returns the service proxy names of cfg's path probe
// Services, sorted and without repeats, for targets whose apiserver
// signal is enabled.
func pathProbeNames(cfg *config.Configuration) []string {
	if cfg == nil {
		return nil
	}
	var names []string
	for _, t := range cfg.Targets {
		if svc := t.APIServerSignal.PathProbe.Service; t.APIServerSignal.Enabled && svc != nil {
			names = append(names, svc.ProxyName())
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
