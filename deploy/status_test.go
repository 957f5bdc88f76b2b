package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The names of rbac/status_role.yaml, as internal/status uses them
// (ReaderServiceAccount) and as people bind them.
const (
	statusReader = "webhook-guard-status-reader"
	statusUser   = "webhook-guard-status-user"
)

// TestDeployment_servesStatusOnlyOnTheMetricsPort: the unauthenticated
// /status listener is off and its port is gone; "guard status" finds
// /status on the container port named "metrics" (internal/status
// MetricsPort), where the manager serves its HTTPS metrics endpoint.
func TestDeployment_servesStatusOnlyOnTheMetricsPort(t *testing.T) {
	pod := managerPod(t)
	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]
	var metrics int32
	for _, p := range c.Ports {
		assert.NotEqual(t, "status", p.Name, "a port for the unauthenticated /status")
		assert.NotEqual(t, int32(8082), p.ContainerPort, "a port for the unauthenticated /status")
		if p.Name == "metrics" {
			metrics = p.ContainerPort
		}
	}
	require.NotZero(t, metrics, "guard status reads /status from the container port named metrics")
	assert.Contains(t, c.Args, fmt.Sprintf("--metrics-bind-address=:%d", metrics))
	var status []string
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--status-bind-address") {
			status = append(status, a)
		}
	}
	assert.Equal(t, []string{"--status-bind-address=0"}, status, "the unauthenticated /status must be off in the pod")
}

// TestStatusRBAC_theReaderMayOnlyGetStatus: the reader's token, which
// "guard status" requests and sends to the guard, is granted GET /status
// and nothing else, by exactly one binding; no pod mounts a token of it.
func TestStatusRBAC_theReaderMayOnlyGetStatus(t *testing.T) {
	sas := statusObjects[corev1.ServiceAccount](t, "ServiceAccount")
	require.Len(t, sas, 1)
	assert.Equal(t, statusReader, sas[0].Name)
	assert.Equal(t, "webhook-guard-system", sas[0].Namespace)
	require.NotNil(t, sas[0].AutomountServiceAccountToken)
	assert.False(t, *sas[0].AutomountServiceAccountToken)

	all := roles(t)
	role, ok := all[filepath.Join(base, "rbac", "status_role.yaml")+": ClusterRole/"+statusReader]
	require.True(t, ok, "ClusterRole %s is missing", statusReader)
	assert.Equal(t, []rbacv1.PolicyRule{{NonResourceURLs: []string{"/status"}, Verbs: []string{"get"}}}, role.Rules)

	var grants []string
	for where, b := range bindings(t) {
		if slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == statusReader
		}) {
			grants = append(grants, where+" -> "+b.RoleRef.Kind+"/"+b.RoleRef.Name)
		}
	}
	assert.Equal(t, []string{filepath.Join(base, "rbac", "status_role.yaml") + ": ClusterRoleBinding/" + statusReader + " -> ClusterRole/" + statusReader}, grants)
}

// TestStatusRBAC_theUserRolesReadAndRequestOnlyTheReadersToken: what a
// person needs for "guard status" is read-only, except a token of the
// reader, by name; the roles are shipped unbound.
func TestStatusRBAC_theUserRolesReadAndRequestOnlyTheReadersToken(t *testing.T) {
	all := roles(t)
	file := filepath.Join(base, "rbac", "status_role.yaml")
	role, ok := all[file+": Role/"+statusUser]
	require.True(t, ok, "Role %s is missing", statusUser)
	assert.Equal(t, "webhook-guard-system", role.Namespace)
	cluster, ok := all[file+": ClusterRole/"+statusUser]
	require.True(t, ok, "ClusterRole %s is missing", statusUser)

	tokenRules := 0
	for i, rule := range append(slices.Clone(role.Rules), cluster.Rules...) {
		if slices.Contains(rule.Resources, "serviceaccounts/token") {
			tokenRules++
			assert.Equal(t, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{statusReader}, Verbs: []string{"create"}}, rule,
				"rule %d: a token of the reader only", i)
			continue
		}
		for _, v := range rule.Verbs {
			assert.Contains(t, []string{"get", "list"}, v, "rule %d on %v: guard status only reads", i, rule.Resources)
		}
		assert.Empty(t, rule.NonResourceURLs, "rule %d", i)
	}
	assert.Equal(t, 1, tokenRules)
	for _, rule := range cluster.Rules {
		if slices.Contains(rule.Resources, "leases") {
			// The Lease is in kube-system: by its name, which nothing
			// else has.
			assert.Equal(t, rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"webhook-guard.webhook-guard.io"}, Verbs: []string{"get"}}, rule)
			continue
		}
		assert.Equal(t, []string{"admissionregistration.k8s.io"}, rule.APIGroups, "cluster-wide, only the webhook configurations and the Lease")
	}

	events, ok := all[file+": Role/webhook-guard-status-events"]
	require.True(t, ok, "Role webhook-guard-status-events is missing")
	assert.Equal(t, "kube-system", events.Namespace, "where the guard records Events about cluster-scoped objects")
	assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}}}, events.Rules,
		"the HandedOff Events: list only")

	for where, b := range bindings(t) {
		assert.NotEqual(t, statusUser, b.RoleRef.Name, "%s binds %s: it is for the operator to bind", where, statusUser)
		assert.NotEqual(t, "webhook-guard-status-events", b.RoleRef.Name, "%s binds it: it is for the operator to bind", where)
	}
}

// statusObjects reads the objects of the given kind from
// rbac/status_role.yaml.
func statusObjects[T any](t *testing.T, kind string) []T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(base, "rbac", "status_role.yaml"))
	require.NoError(t, err)
	var out []T
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var meta struct {
			Kind string `json:"kind"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		if meta.Kind != kind {
			continue
		}
		var obj T
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &obj))
		out = append(out, obj)
	}
	return out
}

// bindings reads every RoleBinding and ClusterRoleBinding in the kustomize
// tree, by "file: kind/name".
func bindings(t *testing.T) map[string]rbacv1.RoleBinding {
	t.Helper()
	return kustomizeObjects[rbacv1.RoleBinding](t, "RoleBinding", "ClusterRoleBinding") // ClusterRoleBinding has the same fields
}
