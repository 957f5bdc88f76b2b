package deploy_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
)

// roles reads every Role and ClusterRole in the kustomize tree, by
// "file: kind/name".
func roles(t *testing.T) map[string]rbacv1.ClusterRole {
	t.Helper()
	return kustomizeObjects[rbacv1.ClusterRole](t, "Role", "ClusterRole") // Role has the same fields
}

// kustomizeObjects reads every rbac.authorization.k8s.io/v1 object of the
// given kinds in the kustomize tree into T, by "file: kind/name". JSON
// patches are skipped.
func kustomizeObjects[T any](t *testing.T, kinds ...string) map[string]T {
	t.Helper()
	out := map[string]T{}
	docSep := regexp.MustCompile(`(?m)^---\s*$`)
	err := filepath.WalkDir("kustomize", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".yaml" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, doc := range docSep.Split(string(data), -1) {
			if len(bytes.TrimSpace([]byte(doc))) == 0 {
				continue
			}
			var generic any
			if err := yaml.Unmarshal([]byte(doc), &generic); err != nil {
				return err
			}
			if _, object := generic.(map[string]any); !object {
				continue // a JSON patch
			}
			var meta struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				return err
			}
			if meta.APIVersion != rbacv1.SchemeGroupVersion.String() || !slices.Contains(kinds, meta.Kind) {
				continue
			}
			var obj T
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				return err
			}
			out[path+": "+meta.Kind+"/"+meta.Metadata.Name] = obj
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestRBAC_isLeastPrivilegeOnPaper checks the written RBAC without a
// cluster; test/e2e/install_test.go asks a real apiserver the same
// questions with kubectl auth can-i.
func TestRBAC_isLeastPrivilegeOnPaper(t *testing.T) {
	all := roles(t)
	require.NotEmpty(t, all)
	names := map[string]bool{}
	for where, role := range all {
		names[role.Kind+"/"+role.Name] = true
		for i, rule := range role.Rules {
			for _, field := range [][]string{rule.Verbs, rule.APIGroups, rule.Resources, rule.NonResourceURLs} {
				assert.NotContains(t, field, "*", "%s rule %d uses a wildcard", where, i)
			}
			for _, v := range []string{"update", "patch", "delete"} {
				if slices.Contains(rule.Verbs, v) && len(rule.Resources) > 0 && !slices.Contains(rule.Resources, "leases") && !slices.Contains(rule.Resources, "events") {
					assert.NotEmpty(t, rule.ResourceNames, "%s rule %d grants %s on %v without resourceNames", where, i, v, rule.Resources)
				}
			}
			for _, res := range []string{"secrets", "configmaps"} {
				if !slices.Contains(rule.Resources, res) {
					continue
				}
				assert.Equal(t, "Role", role.Kind, "%s rule %d: nothing cluster-wide on %s", where, i, res)
				assert.NotContains(t, rule.Verbs, "list", "%s rule %d: no list on %s", where, i, res)
				assert.NotContains(t, rule.Verbs, "watch", "%s rule %d: no watch on %s", where, i, res)
				if !slices.Equal(rule.Verbs, []string{"create"}) {
					assert.NotEmpty(t, rule.ResourceNames, "%s rule %d: %s only by name", where, i, res)
				}
			}
			if slices.Contains(rule.Resources, "services") {
				// The probe resolves Services from a watch: a
				// leaked token enumerates Services, and cannot write them.
				assert.Equal(t, []string{"get", "list", "watch"}, rule.Verbs, "%s rule %d: the probe only reads Services", where, i)
				assert.Equal(t, []string{"services"}, rule.Resources, "%s rule %d: Services alone", where, i)
			}
			if slices.Contains(rule.Resources, "services/proxy") {
				// The path probe (internal/rbac): a ClusterRole's
				// resourceNames name no namespace, so the grant is a Role
				// in the Service's namespace, by name, get only.
				assert.Equal(t, "Role", role.Kind, "%s rule %d: services/proxy only in the Service's namespace", where, i)
				assert.Equal(t, []string{"get"}, rule.Verbs, "%s rule %d: the path probe only GETs", where, i)
				assert.Equal(t, []string{"services/proxy"}, rule.Resources, "%s rule %d: services/proxy alone", where, i)
				assert.NotEmpty(t, rule.ResourceNames, "%s rule %d: services/proxy only by name", where, i)
				for _, name := range rule.ResourceNames {
					assert.True(t, strings.HasPrefix(name, "https:"), "%s rule %d: %q is not the name RBAC sees, https:<service>:<port>", where, i, name)
				}
			}
			if slices.Contains(rule.Resources, "deployments") && role.Kind == "ClusterRole" {
				// Another installation's Deployment says where its
				// Lease is: by the shipped name, get only.
				assert.Equal(t, []string{"get"}, rule.Verbs, "%s rule %d: Deployments are only read", where, i)
				assert.Equal(t, []string{factory.DefaultDeployment}, rule.ResourceNames, "%s rule %d: the guard's Deployment only", where, i)
			}
			if slices.Contains(rule.Resources, "replicasets") {
				// Before it first leads, the guard reads where each
				// revision of its Deployment keeps its Lease (the
				// handover): its own ReplicaSets, listed, nothing else.
				assert.Equal(t, "Role", role.Kind, "%s rule %d: ReplicaSets only in the guard's namespace", where, i)
				assert.Equal(t, []string{"list"}, rule.Verbs, "%s rule %d: the handover only lists ReplicaSets", where, i)
				assert.Equal(t, []string{"replicasets"}, rule.Resources, "%s rule %d: ReplicaSets alone", where, i)
			}
			for _, res := range []string{"endpoints", "endpointslices", "pods"} {
				if role.Name == "webhook-guard-status-user" && res == "pods" {
					continue // get on its own pods, to proxy to /status
				}
				assert.NotContains(t, rule.Resources, res, "%s rule %d: nothing on %s (no pod IPs)", where, i, res)
			}
		}
	}
	for _, want := range []string{"ClusterRole/webhook-guard", "ClusterRole/webhook-guard-targets", "Role/webhook-guard-leader-election", "Role/webhook-guard-events", "Role/webhook-guard-canary", "Role/webhook-guard-rollout"} {
		assert.True(t, names[want], "%s is missing from deploy/kustomize", want)
	}
	for where, role := range all {
		if role.Name == "webhook-guard-events" {
			assert.Equal(t, "kube-system", role.Namespace, "%s: the guard records Events about cluster-scoped objects in kube-system", where)
		}
		if role.Name == "webhook-guard-canary" {
			assert.Equal(t, "default", role.Namespace, "%s: the marking canary is sent in default", where)
			assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}}}, role.Rules, "%s: the canary is a create", where)
		}
		if strings.HasSuffix(role.Name, "leader-election") {
			// In kube-system, which policy engines' */* webhooks
			// leave out.
			assert.Equal(t, "kube-system", role.Namespace, "%s: leases only in kube-system", where)
			for i, rule := range role.Rules {
				if !slices.Contains(rule.Resources, "leases") {
					continue
				}
				if slices.Contains(rule.Verbs, "update") {
					assert.Equal(t, []string{"webhook-guard.webhook-guard.io"}, rule.ResourceNames, "%s rule %d: it renews its own Lease only", where, i)
				}
				for _, v := range []string{"list", "watch", "patch", "delete"} {
					assert.NotContains(t, rule.Verbs, v, "%s rule %d: leader election needs get, create and update", where, i)
				}
			}
		}
	}
	for where, b := range bindings(t) {
		if strings.HasSuffix(b.Name, "leader-election") {
			assert.Equal(t, "kube-system", b.Namespace, "%s: bound where the Role is", where)
		}
	}
}

// TestDeployment_leaseIsInKubeSystem: the Deployment's Lease is where the
// leader-election Role lets it be, and "guard status" and "guard release"
// read it there from the Deployment (factory.LeaseNamespaceOf).
func TestDeployment_leaseIsInKubeSystem(t *testing.T) {
	d := &appsv1.Deployment{}
	data, err := os.ReadFile(filepath.Join(base, "deployment.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, d))
	ns, ok := factory.LeaseNamespaceOf(d)
	require.True(t, ok, "the Deployment does not say where its Lease is")
	assert.Equal(t, "kube-system", ns)
}
