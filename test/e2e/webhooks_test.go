package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// webhooksJSON is "guard webhooks -o json", as a platform team's script
// reads it.
type webhooksJSON struct {
	ConfigSource     string `json:"configSource"`
	Metrics          string `json:"metrics"`
	Window           string `json:"window"`
	APIServerStarted string `json:"apiserverStarted"`
	Webhooks         []struct {
		Risk           string   `json:"risk"`
		Kind           string   `json:"kind"`
		Configuration  string   `json:"configuration"`
		Webhook        string   `json:"webhook"`
		FailurePolicy  string   `json:"failurePolicy"`
		TimeoutSeconds int32    `json:"timeoutSeconds"`
		Calls          *float64 `json:"calls"`
		FailedCalls    *float64 `json:"failedCalls"`
		FailureRatio   *float64 `json:"failureRatio"`
		P99Seconds     *float64 `json:"p99Seconds"`
		Managed        *bool    `json:"managed"`
		Reasons        []string `json:"riskReasons"`
	} `json:"webhooks"`
	Unavailable []string `json:"unavailable"`
}

// runWebhooks runs the real binary's "guard webhooks" with kubeconfig.
func runWebhooks(t *testing.T, kubeconfig string, args ...string) (stdout, stderr string) {
	t.Helper()
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	cmd := exec.Command(bin, append([]string{"webhooks", "--kubeconfig", kubeconfig}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "guard webhooks: %s", errb.String())
	return out.String(), errb.String()
}

// A platform team's inventory: an unmanaged webhook whose every call
// fails (a closed port, under Ignore so creates go on), an unmanaged
// validating webhook that answers after 0.9 s of its 1 s timeout, and a
// healthy managed target. kube-apiserver's own metrics tell them apart.
func TestWebhooks_inventoryFromTheApiserversOwnMetrics(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)
	base := uniqueName(t, "inventory")
	failingCfg, slowCfg, managedCfg := base+"-failing", base+"-slow", base+"-managed"
	failingHook, slowHook, managedHook := "failing."+base+".webhook-guard.io", "slow."+base+".webhook-guard.io", "managed."+base+".webhook-guard.io"

	wh := startWebhook(t, harness.WebhookOptions{})
	wh.SetBehaviour("/slow", harness.Delayed(900*time.Millisecond, harness.Allow()))
	wh.SetBehaviour("/managed", harness.Allow())

	failing := configMapWebhook(failingHook, ns, "https://127.0.0.1:1/closed", nil, admissionregistrationv1.Ignore)
	managed := configMapWebhook(managedHook, ns, wh.URL("/managed"), wh.CA.CertPEM, admissionregistrationv1.Fail)
	slowM := configMapWebhook(slowHook, ns, wh.URL("/slow"), wh.CA.CertPEM, admissionregistrationv1.Ignore)
	slow := admissionregistrationv1.ValidatingWebhook{Name: slowM.Name, AdmissionReviewVersions: slowM.AdmissionReviewVersions, SideEffects: slowM.SideEffects,
		FailurePolicy: slowM.FailurePolicy, TimeoutSeconds: ptr.To[int32](1), ClientConfig: slowM.ClientConfig, NamespaceSelector: slowM.NamespaceSelector, Rules: slowM.Rules}
	objs := []client.Object{
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: failingCfg}, Webhooks: []admissionregistrationv1.MutatingWebhook{failing}},
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: managedCfg}, Webhooks: []admissionregistrationv1.MutatingWebhook{managed}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: slowCfg}, Webhooks: []admissionregistrationv1.ValidatingWebhook{slow}},
	}
	for _, o := range objs {
		require.NoError(t, env.Client.Create(ctx, o))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}

	// The installation as "guard status" finds it: the Deployment whose
	// volume "config" names the ConfigMap with the GuardConfiguration.
	guardConfig := fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
apiserverScrapeInterval: 1s
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
`, managedCfg, managedHook)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-guard-config-5f7c8d9b2k"}, Data: map[string]string{"config.yaml": guardConfig}}
	require.NoError(t, env.Client.Create(ctx, cm))
	labels := map[string]string{"app.kubernetes.io/name": "webhook-guard"}
	require.NoError(t, env.Client.Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-guard"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "manager", Image: "webhook-guard:latest"}},
				Volumes:    []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}},
			},
		}},
	}))

	// A reader: the configurations and /metrics cluster-wide, the
	// installation in its namespace. Nothing else.
	reader := webhooksReader(t, ns, "inventory-reader", true)

	const creates = 8
	for i := range creates {
		start := time.Now()
		require.NoError(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("driven-%d", i)}}))
		t.Logf("create %d took %s", i, time.Since(start).Round(time.Millisecond))
	}
	require.GreaterOrEqual(t, wh.APIServerCalls("/slow"), creates)
	require.GreaterOrEqual(t, wh.APIServerCalls("/managed"), creates)

	out, stderr := runWebhooks(t, reader.KubeconfigPath, "--namespace", ns, "-o", "json")
	t.Logf("guard webhooks -o json:\n%s%s", out, stderr)
	var rep webhooksJSON
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Empty(t, rep.Unavailable, stderr)
	assert.Equal(t, "ConfigMap "+ns+"/"+cm.Name+" (mounted by Deployment webhook-guard)", rep.ConfigSource)
	assert.Contains(t, rep.Metrics, "cumulative since kube-apiserver started at "+rep.APIServerStarted)
	rows := map[string]int{}
	for i, r := range rep.Webhooks {
		rows[r.Webhook] = i
	}
	for _, h := range []string{failingHook, slowHook, managedHook} {
		require.Contains(t, rows, h, "every webhook of every configuration is listed")
	}

	f := rep.Webhooks[rows[failingHook]]
	assert.Equal(t, "Mutating", f.Kind)
	assert.Equal(t, failingCfg, f.Configuration)
	assert.Equal(t, "Ignore", f.FailurePolicy)
	assert.Equal(t, int32(1), f.TimeoutSeconds)
	require.NotNil(t, f.Calls)
	assert.GreaterOrEqual(t, *f.Calls, float64(creates))
	require.NotNil(t, f.FailureRatio)
	assert.InDelta(t, 1, *f.FailureRatio, 0.01, "every call to a closed port failed (fail-open)")
	assert.Equal(t, ptr.To(false), f.Managed)
	assert.Equal(t, "medium", f.Risk, "%v", f.Reasons)

	s := rep.Webhooks[rows[slowHook]]
	assert.Equal(t, "Validating", s.Kind)
	assert.Equal(t, slowCfg, s.Configuration)
	assert.Equal(t, int32(1), s.TimeoutSeconds)
	require.NotNil(t, s.P99Seconds)
	assert.GreaterOrEqual(t, *s.P99Seconds, 0.8, "0.9 s answers are in the apiserver's (0.5, 1] bucket")
	assert.LessOrEqual(t, *s.P99Seconds, 2.5, "close to its 1 s timeout: within the next bucket at worst")
	assert.Equal(t, ptr.To(false), s.Managed)
	assert.Equal(t, "medium", s.Risk, "%v", s.Reasons)
	assert.Contains(t, strings.Join(s.Reasons, ";"), "near its 1s timeout")

	m := rep.Webhooks[rows[managedHook]]
	assert.Equal(t, ptr.To(true), m.Managed)
	assert.Equal(t, "Fail", m.FailurePolicy)
	require.NotNil(t, m.FailureRatio)
	assert.Zero(t, *m.FailureRatio)
	require.NotNil(t, m.P99Seconds)
	assert.Less(t, *m.P99Seconds, 0.8)
	assert.Equal(t, "low", m.Risk, "%v", m.Reasons)
	assert.Less(t, rows[failingHook], rows[managedHook], "riskiest first")
	assert.Less(t, rows[slowHook], rows[managedHook], "riskiest first")

	// The table, with the configuration from a file.
	cfgPath := filepath.Join(t.TempDir(), "guard.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(guardConfig), 0o600))
	table, _ := runWebhooks(t, reader.KubeconfigPath, "--config", cfgPath)
	t.Logf("guard webhooks:\n%s", table)
	assert.Contains(t, table, "Guard configuration: file "+cfgPath)
	assert.Contains(t, table, "RISK")
	for _, line := range strings.Split(table, "\n") {
		if strings.Contains(line, " "+managedHook+" ") {
			assert.Contains(t, line, " yes ", "managed")
		}
		if strings.Contains(line, " "+failingHook+" ") {
			assert.Contains(t, line, " 1.00 (", "failure ratio 1")
			assert.Contains(t, line, " no ", "unmanaged")
		}
	}

	// --window: only the calls made between two scrapes.
	type result struct {
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		bin, _ := env.BuildGuard()
		cmd := exec.Command(bin, "webhooks", "--kubeconfig", reader.KubeconfigPath, "--namespace", ns, "--window", "5s", "-o", "json")
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			e.WriteString(err.Error())
		}
		done <- result{o.String(), e.String()}
	}()
	time.Sleep(2 * time.Second) // after the first scrape
	for i := range 2 {
		require.NoError(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("windowed-%d", i)}}))
	}
	res := <-done
	t.Logf("guard webhooks --window 5s -o json:\n%s%s", res.out, res.stderr)
	var win webhooksJSON
	require.NoError(t, json.Unmarshal([]byte(res.out), &win), res.stderr)
	assert.Equal(t, "5s", win.Window)
	assert.Contains(t, win.Metrics, "calls in the last 5s")
	for _, r := range win.Webhooks {
		if r.Webhook == failingHook {
			require.NotNil(t, r.Calls)
			assert.Equal(t, 2.0, *r.Calls, "the window's creates only, not the %d before", creates)
			assert.Equal(t, ptr.To(1.0), r.FailureRatio)
		}
	}

	// Without get on /metrics it says which permission is missing and
	// still lists the webhooks.
	blind := webhooksReader(t, ns, "inventory-blind", false)
	out, stderr = runWebhooks(t, blind.KubeconfigPath, "--namespace", ns, "-o", "json")
	t.Logf("guard webhooks without /metrics:\n%s", stderr)
	assert.Contains(t, stderr, `unavailable: calls, failure ratios and p99 latencies: missing permission: get on the non-resource URL /metrics`)
	var partial webhooksJSON
	require.NoError(t, json.Unmarshal([]byte(out), &partial), out)
	found := false
	for _, r := range partial.Webhooks {
		if r.Webhook == failingHook {
			found = true
			assert.Nil(t, r.Calls)
			assert.Equal(t, ptr.To(false), r.Managed)
		}
	}
	assert.True(t, found, "the webhooks are still listed")
}

// webhooksReader is a ServiceAccount that may list webhook configurations
// and read the installation in ns, and get /metrics when metrics is set.
func webhooksReader(t *testing.T, ns, name string, metrics bool) *harness.Identity {
	t.Helper()
	ctx := context.Background()
	id, err := env.ServiceAccount(ctx, ns, name)
	require.NoError(t, err)
	rules := []rbacv1.PolicyRule{{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}, Verbs: []string{"list"}}}
	if metrics {
		rules = append(rules, rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}})
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + ns}, Rules: rules}
	require.NoError(t, env.Client.Create(ctx, role))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), role) })
	require.NoError(t, env.Bind(ctx, role.Name, role.Name, ns, name))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name}})
	})
	install := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
	}}
	require.NoError(t, env.Client.Create(ctx, install))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}))
	require.Eventually(t, func() bool {
		return id.Client.List(ctx, &admissionregistrationv1.ValidatingWebhookConfigurationList{}) == nil &&
			id.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "webhook-guard"}, &appsv1.Deployment{}) == nil
	}, 30*time.Second, 50*time.Millisecond, "RBAC for %s never took effect", id.Username)
	return id
}
