package rbac

import (
	"maps"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

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

// Render returns every object "guard manifests rbac" writes for cfg, in
// this order: the ClusterRole RenderTargetsRole, then the Role and
// RoleBinding of each namespace RenderPathProbeGrants renders, binding
// Subject(breakerUsername), the guard's identity.
func Render(cfg *config.Configuration, breakerUsername string) []runtime.Object {
	out := []runtime.Object{RenderTargetsRole(cfg)}
	for _, g := range RenderPathProbeGrants(cfg, Subject(breakerUsername)) {
		out = append(out, g.Role, g.Binding)
	}
	return out
}

// RenderTargetsRole renders the ClusterRole TargetsRoleName. It grants patch
// (the breaker's one write per transition is a JSON patch) on
// mutatingwebhookconfigurations and on
// validatingwebhookconfigurations, each limited by resourceNames to the
// names of cfg's targets of that kind, sorted and without repeats, and
// nothing else.
// Reading configurations is granted by the static ClusterRole
// webhook-guard. The path probe's grant is not here: a ClusterRole's
// resourceNames name no namespace (RenderPathProbeGrants).
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
	return role
}

// PathProbeRoleName is the name of the Role, and of its RoleBinding, that
// RenderPathProbeGrants renders in each namespace: webhook-guard-path-probe
// for the main installation, webhook-guard-<instance>-path-probe for a
// named instance, so that two installations whose targets' Services share
// a namespace do not overwrite each other's grant.
func PathProbeRoleName(instance string) string {
	if instance == "" {
		return "webhook-guard-path-probe"
	}
	return "webhook-guard-" + instance + "-path-probe"
}

// PathProbeGrant is the path probe's RBAC in one namespace.
type PathProbeGrant struct {
	// Role grants get on services/proxy, by resourceNames, in the
	// namespace.
	Role *rbacv1.Role
	// Binding binds Role to the guard's identity.
	Binding *rbacv1.RoleBinding
}

// RenderPathProbeGrants renders the path probe's RBAC: for each namespace
// of cfg's apiserverSignal.pathProbe.service Services, of targets whose
// apiserver signal is enabled, a Role PathProbeRoleName(cfg.Instance) in
// that namespace with get on services/proxy limited by resourceNames to
// the "https:<service>:<port>" names of that namespace's Services (the
// name kube-apiserver's RBAC sees, proven in test/e2e/partition), sorted
// and without repeats, and a RoleBinding of it to subject. The grants are
// sorted by namespace.
//
// A Role, unlike a ClusterRole, holds in its own namespace only: the
// token may not GET through the proxy of a Service of the same name in
// another namespace. No path probe Service renders nothing, never a rule
// without resourceNames. The objects carry TypeMeta and Labels.
func RenderPathProbeGrants(cfg *config.Configuration, subject rbacv1.Subject) []PathProbeGrant {
	if cfg == nil {
		return nil
	}
	byNamespace := map[string][]string{}
	for _, t := range cfg.Targets {
		if svc := t.APIServerSignal.PathProbe.Service; t.APIServerSignal.Enabled && svc != nil {
			byNamespace[svc.Namespace] = append(byNamespace[svc.Namespace], svc.ProxyName())
		}
	}
	name := PathProbeRoleName(cfg.Instance)
	var out []PathProbeGrant
	for _, ns := range slices.Sorted(maps.Keys(byNamespace)) {
		names := byNamespace[ns]
		slices.Sort(names)
		meta := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: Labels()}
		out = append(out, PathProbeGrant{
			Role: &rbacv1.Role{
				TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
				ObjectMeta: meta,
				Rules: []rbacv1.PolicyRule{{
					APIGroups:     []string{""},
					Resources:     []string{"services/proxy"},
					ResourceNames: slices.Compact(names),
					Verbs:         []string{"get"},
				}},
			},
			Binding: &rbacv1.RoleBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
				ObjectMeta: *meta.DeepCopy(),
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects:   []rbacv1.Subject{subject},
			},
		})
	}
	return out
}

// Subject returns the RBAC subject whose username is username: the
// ServiceAccount of a "system:serviceaccount:<namespace>:<name>"
// username (the guard's identity when it runs in a cluster), else the
// User of that name.
func Subject(username string) rbacv1.Subject {
	if ns, name, err := serviceaccount.SplitUsername(username); err == nil {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}
	}
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: username}
}
