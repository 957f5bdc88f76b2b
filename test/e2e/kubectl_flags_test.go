package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// guardComplete runs the guard's hidden __complete command, as the shells'
// completion scripts do, and returns what it offers, without the
// directive line.
func guardComplete(t *testing.T, args ...string) []string {
	t.Helper()
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	cmd := exec.Command(bin, append([]string{"__complete"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.KubeconfigPath)
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Equal(t, ":4", lines[len(lines)-1], "no file names are offered")
	return lines[:len(lines)-1]
}

// -n/--namespace completes to the cluster's namespaces, and release's
// argument to the names of its webhook configurations of both kinds, and
// after a slash to that configuration's webhooks, as kubectl completes
// names from the cluster.
func TestCompletion_namespacesAndConfigurationsFromTheCluster(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)

	byName := guardComplete(t, "status", "-n", ns)
	assert.Contains(t, byName, ns, "the namespace by its full name")
	for _, n := range byName {
		assert.True(t, strings.HasPrefix(n, ns), "%s: only those with the prefix", n)
	}
	assert.Contains(t, guardComplete(t, "webhooks", "--namespace", ""), ns, "every namespace")
	assert.Contains(t, guardComplete(t, "release", "-n", "kube-"), "kube-system")
	assert.NotContains(t, guardComplete(t, "release", "-n", "kube-"), ns, "not those without the prefix")

	// Two configurations of a name of this test's, one of each kind, whose
	// webhooks match a group nobody serves: the apiserver never calls them.
	prefix := uniqueName(t, "complete")
	mutating, validating := prefix+"-mutating", prefix+"-validating"
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"complete.example.com"}, APIVersions: []string{"v1"}, Resources: []string{"nothing"}},
	}}
	clientConfig := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/never")}
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: mutating}}
	for _, hook := range []string{"a.complete.example.com", "b.complete.example.com"} {
		mwc.Webhooks = append(mwc.Webhooks, admissionregistrationv1.MutatingWebhook{Name: hook, ClientConfig: clientConfig, Rules: rules,
			SideEffects: &none, FailurePolicy: &ignore, AdmissionReviewVersions: []string{"v1"}})
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: validating},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "v.complete.example.com", ClientConfig: clientConfig, Rules: rules,
			SideEffects: &none, FailurePolicy: &ignore, AdmissionReviewVersions: []string{"v1"}}}}
	require.NoError(t, env.Client.Create(ctx, mwc))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), mwc) })
	require.NoError(t, env.Client.Create(ctx, vwc))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vwc) })

	assert.Equal(t, []string{mutating, validating}, guardComplete(t, "release", prefix), "configurations of both kinds")
	assert.Contains(t, guardComplete(t, "release", ""), mutating, "every configuration")
	assert.Equal(t, []string{mutating + "/a.complete.example.com", mutating + "/b.complete.example.com"}, guardComplete(t, "release", mutating+"/"),
		"after the slash, the configuration's webhooks")
	assert.Equal(t, []string{mutating + "/b.complete.example.com"}, guardComplete(t, "release", mutating+"/b"))
	assert.Equal(t, []string{validating + "/v.complete.example.com"}, guardComplete(t, "release", validating+"/"))
	assert.Empty(t, guardComplete(t, "release", mutating, "--all", ""), "one argument only")
}

// Without -n, the namespace is the kubeconfig context's, as in kubectl:
// the guard's Deployment there is the installation status reads; -n wins.
func TestNamespace_theKubeconfigContextsFindsTheInstallation(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns)
	bin, err := env.BuildGuard()
	require.NoError(t, err)

	kc, err := clientcmd.LoadFromFile(env.KubeconfigPath)
	require.NoError(t, err)
	kc.Contexts[kc.CurrentContext].Namespace = ns
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, kubeconfig))

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-guard-config-abc"}, Data: map[string]string{"config.yaml": `apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: context-namespace
  webhook: a.context-namespace.example.com
  allowAdmissionWithoutMutation: true
`}}
	require.NoError(t, env.Client.Create(ctx, cm))
	labels := map[string]string{"app": "webhook-guard"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-guard"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](0),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "guard", Image: "guard", Args: []string{"run", "--leader-election-namespace=" + ns}}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}},
		}},
	}}
	require.NoError(t, env.Client.Create(ctx, d))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), d) })

	status := func(args ...string) (report struct {
		Namespace    string `json:"namespace"`
		ConfigSource string `json:"configSource"`
	}, stderr string) {
		cmd := exec.CommandContext(ctx, bin, append([]string{"status", "--kubeconfig", kubeconfig, "-o", "json"}, args...)...)
		var errOut strings.Builder
		cmd.Stderr = &errOut
		out, err := cmd.Output()
		require.NoError(t, err, "%s", errOut.String())
		require.NoError(t, json.Unmarshal(out, &report), "%s", out)
		return report, errOut.String()
	}
	report, stderr := status("-v=1")
	assert.Equal(t, ns, report.Namespace)
	assert.Equal(t, "ConfigMap "+ns+"/webhook-guard-config-abc (mounted by Deployment webhook-guard)", report.ConfigSource)
	assert.Contains(t, stderr, `"The guard's installation" namespace="`+ns+`" foundBy="the kubeconfig context's namespace, where Deployment webhook-guard is"`, "-v=1 says how it was found")

	// -n wins over the context's namespace, as in kubectl.
	other := testNamespace(t)
	out, err := exec.CommandContext(ctx, bin, "status", "--kubeconfig", kubeconfig, "-n", other).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "reading the guard's Deployment "+other+"/webhook-guard")
}
