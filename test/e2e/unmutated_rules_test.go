package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli/unmutated"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

// guard unmutated finds marked objects wherever kube-apiserver's matcher
// says the webhook's rules reach: a "*/*" webhook's marks on namespaced
// and cluster-scoped objects, a "pods/*" webhook's on pods, a Cluster-scoped
// webhook's on cluster-scoped objects and not on namespaced ones of the
// same group, a Namespaced-scoped webhook's on Roles and not on
// ClusterRoles. -o json lists them for scripts, --exit-code exits 3 while
// any is marked and 0 once they are cleared. The marks are set by hand,
// as a marking policy sets them: listing reads only the label, and the
// webhooks never answer (an objectSelector that selects nothing keeps
// kube-apiserver from calling them).
func TestUnmutated_findsMarksUnderEveryRuleShape(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)

	// Three mutating configurations, one webhook each.
	type target struct{ configuration, webhook string }
	newTarget := func(prefix string, rules ...admissionregistrationv1.RuleWithOperations) target {
		name := uniqueName(t, prefix)
		w := configMapWebhook("hook."+name+".webhook-guard.io", "nowhere-"+name, "https://127.0.0.1:1/never", nil, admissionregistrationv1.Ignore)
		w.ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"webhook-guard.io/e2e-never": "true"}}
		w.Rules = rules
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"e2e": "unmutated"}},
			Webhooks: []admissionregistrationv1.MutatingWebhook{w}}
		require.NoError(t, env.Client.Create(ctx, mwc))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), mwc) })
		return target{name, w.Name}
	}
	writes := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	everything := newTarget("unmutated-all", admissionregistrationv1.RuleWithOperations{Operations: writes,
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}}})
	pods := newTarget("unmutated-pods", admissionregistrationv1.RuleWithOperations{Operations: writes,
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/*"}}})
	cluster := newTarget("unmutated-cluster", admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{rbacv1.GroupName}, APIVersions: []string{"*"}, Resources: []string{"*"}, Scope: ptr.To(admissionregistrationv1.ClusterScope)}})
	namespaced := newTarget("unmutated-namespaced", admissionregistrationv1.RuleWithOperations{Operations: writes,
		Rule: admissionregistrationv1.Rule{APIGroups: []string{rbacv1.GroupName}, APIVersions: []string{"*"}, Resources: []string{"*"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)}})
	mark := func(t target) map[string]string {
		return map[string]string{circuit.UnmutatedLabel: marking.ID(t.configuration, t.webhook)}
	}
	note := func(t target) map[string]string {
		return map[string]string{circuit.UnmutatedAnnotation: t.configuration + "/" + t.webhook + " since 2026-12-01T11:00:00Z"}
	}

	// The marked objects.
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}))
	byAllCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-all", Labels: mark(everything), Annotations: note(everything)}}
	byAllCR := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: uniqueName(t, "by-all"), Labels: mark(everything), Annotations: note(everything)}}
	byPodsPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-pods", Labels: mark(pods), Annotations: note(pods)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	byPodsCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-pods", Labels: mark(pods), Annotations: note(pods)}}
	byClusterCR := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: uniqueName(t, "by-cluster"), Labels: mark(cluster), Annotations: note(cluster)}}
	byClusterRole := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-cluster", Labels: mark(cluster), Annotations: note(cluster)}}
	byNamespacedRole := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-namespaced", Labels: mark(namespaced), Annotations: note(namespaced)}}
	byNamespacedCR := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: uniqueName(t, "by-namespaced"), Labels: mark(namespaced), Annotations: note(namespaced)}}
	for _, o := range []client.Object{byAllCM, byAllCR, byPodsPod, byPodsCM, byClusterCR, byClusterRole, byNamespacedRole, byNamespacedCR} {
		require.NoError(t, env.Client.Create(ctx, o))
		if o.GetNamespace() == "" {
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
		}
	}

	bin, err := env.BuildGuard()
	require.NoError(t, err)
	guard := func(targets []target, args ...string) (string, int) {
		t.Helper()
		var cfg strings.Builder
		cfg.WriteString("apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\ntargets:\n")
		for _, tg := range targets {
			fmt.Fprintf(&cfg, "- configuration: %s\n  webhook: %s\n  allowAdmissionWithoutMutation: true\n", tg.configuration, tg.webhook)
		}
		path := filepath.Join(t.TempDir(), "guard.yaml")
		require.NoError(t, os.WriteFile(path, []byte(cfg.String()), 0o600))
		cmd := exec.Command(bin, append([]string{"unmutated", "--config", path, "--kubeconfig", env.KubeconfigPath}, args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		t.Logf("$ guard unmutated %s\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return stdout.String(), exit.ExitCode()
		}
		require.NoError(t, err)
		return stdout.String(), 0
	}
	type row struct{ group, version, kind, namespace, name, circuitID string }
	listed := func(out string) []row {
		t.Helper()
		var rep struct {
			Objects []struct {
				Group, Version, Kind, Namespace, Name, CircuitID, Configuration, Webhook, Note string
			} `json:"objects"`
			Cleared     bool     `json:"cleared"`
			Unavailable []string `json:"unavailable"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &rep), "%s", out)
		assert.Empty(t, rep.Unavailable)
		rows := []row{}
		for _, o := range rep.Objects {
			assert.Equal(t, marking.ID(o.Configuration, o.Webhook), o.CircuitID, "the circuit of %s %s", o.Kind, o.Name)
			assert.Equal(t, o.Configuration+"/"+o.Webhook+" since 2026-12-01T11:00:00Z", o.Note)
			rows = append(rows, row{o.Group, o.Version, o.Kind, o.Namespace, o.Name, o.CircuitID})
		}
		return rows
	}
	id := func(t target) string { return marking.ID(t.configuration, t.webhook) }

	// pods/* reaches pods (not ConfigMaps); Cluster reaches ClusterRoles
	// (not Roles): with those two targets alone, only their own kinds are
	// listed.
	out, code := guard([]target{pods, cluster}, "-o", "json", "--exit-code")
	assert.Equal(t, unmutated.ExitMarked, code, "--exit-code with marked objects")
	assert.Equal(t, []row{
		{"", "v1", "Pod", ns, "by-pods", id(pods)},
		{rbacv1.GroupName, "v1", "ClusterRole", "", byClusterCR.Name, id(cluster)},
	}, listed(out))

	// Namespaced reaches Roles (not ClusterRoles) of the same group.
	out, code = guard([]target{namespaced}, "-o", "json", "--exit-code")
	assert.Equal(t, unmutated.ExitMarked, code)
	assert.Equal(t, []row{
		{rbacv1.GroupName, "v1", "Role", ns, "by-namespaced", id(namespaced)},
	}, listed(out), "its ClusterRole is out of the rule's scope")

	// */* reaches every kind, namespaced or not: each object once, with
	// whichever of the targets' marks it carries.
	all := []target{everything, pods, cluster, namespaced}
	out, code = guard(all, "-o", "json")
	assert.Equal(t, 0, code, "without --exit-code, finding marks is a success")
	got := listed(out)
	for _, want := range []row{
		{"", "v1", "ConfigMap", ns, "by-all", id(everything)},
		{"", "v1", "ConfigMap", ns, "by-pods", id(pods)},
		{"", "v1", "Pod", ns, "by-pods", id(pods)},
		{rbacv1.GroupName, "v1", "ClusterRole", "", byAllCR.Name, id(everything)},
		{rbacv1.GroupName, "v1", "ClusterRole", "", byClusterCR.Name, id(cluster)},
		{rbacv1.GroupName, "v1", "Role", ns, "by-cluster", id(cluster)},
		{rbacv1.GroupName, "v1", "Role", ns, "by-namespaced", id(namespaced)},
		{rbacv1.GroupName, "v1", "ClusterRole", "", byNamespacedCR.Name, id(namespaced)},
	} {
		assert.Contains(t, got, want)
	}
	assert.Len(t, got, 8)

	// The table for people, then --clear; afterwards --exit-code says 0.
	out, code = guard(all)
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "8 objects were admitted without a webhook's mutation")
	assert.Contains(t, out, "ClusterRole "+byAllCR.Name+"  skipped "+everything.configuration+"/"+everything.webhook+" since ")
	assert.Contains(t, out, "Pod "+ns+"/by-pods  skipped ")
	out, code = guard(all, "--clear")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "Cleared the marks of 8 objects.")
	out, code = guard(all, "-o", "json", "--exit-code")
	assert.Equal(t, 0, code, "--exit-code with nothing marked")
	assert.Empty(t, listed(out))
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(byAllCR), byAllCR))
	assert.NotContains(t, byAllCR.Labels, circuit.UnmutatedLabel)
	assert.NotContains(t, byAllCR.Annotations, circuit.UnmutatedAnnotation)
}
