package e2e

// "guard release" as a kustomize user runs it before uninstalling: an
// installation of its own (its own namespace, instance and names, so that
// deleting it touches nothing of the shared installation the other install
// tests use), three open circuits (one validating; a fourth target stays
// healthy), the guard stopped, then "guard release
// --all" and "kustomize build | kubectl delete -f -".

import (
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
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission/admissiontest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	statusapi "github.com/webhook-guard/webhook-guard/internal/status"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// The release test's installation: the base with every name prefixed
// (releasePrefix), in a namespace of its own, as instance releaseInstance.
const (
	releasePrefix   = "rel-"
	releaseInstance = "release-e2e"
	// releasePolicy is the guard policy of releaseInstance
	// (admission.Options.Policy).
	releasePolicy = "webhook-guard-" + releaseInstance
	releaseLease  = releaseInstance + ".webhook-guard.webhook-guard.io"
)

// releaseTarget is one of the test's targets.
type releaseTarget struct {
	kind          circuit.Kind
	configuration string
	webhook       string
	mode          circuit.Mode
	path          string
	// healthy targets stay healthy: the guard opens no circuit while
	// every target fails at once (it suspects its own network).
	healthy bool
}

var releaseTargets = []releaseTarget{
	{circuit.KindMutating, "release-mutating-a", "a.release.example.com", circuit.ModeBypass, "/release-a", false},
	{circuit.KindMutating, "release-mutating-b", "b.release.example.com", circuit.ModeIgnore, "/release-b", false},
	{circuit.KindMutating, "release-mutating-b", "healthy.release.example.com", circuit.ModeBypass, "/release-healthy", true},
	{circuit.KindValidating, "release-validating", "v.release.example.com", circuit.ModeBypass, "/release-v", false},
}

// releaseConfig is the installation's GuardConfiguration: fast timings, so
// the circuits open within seconds.
func releaseConfig() string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\napiserverScrapeInterval: 1s\ninstance: %s\ntargets:\n", releaseInstance)
	for _, tg := range releaseTargets {
		fmt.Fprintf(&b, "- kind: %s\n  configuration: %s\n  webhook: %s\n  mode: %s\n  openAfter: 2\n  closeAfter: 2\n  probe: {kind: AdmissionReview, interval: 100ms}\n",
			tg.kind, tg.configuration, tg.webhook, tg.mode)
		if tg.kind == circuit.KindMutating {
			b.WriteString("  allowAdmissionWithoutMutation: true\n")
		} else {
			b.WriteString("  allowAdmissionWithoutValidation: true\n")
		}
	}
	return b.String()
}

// releaseOverlay writes a user's overlay of the repository's base into a
// folder of its own and returns the folder to build. kustomize wants
// relative paths to the base, and applies "namespace:" before patches, so
// it is three kustomizations: inner (the base, the targets ClusterRole and
// the configuration, every name prefixed), namespaced (inner in namespace
// ns, the leader-election and Events Roles put back in "kube-system" and
// the canary's in "default") and top (that plus the
// cluster-scoped policies "guard manifests" renders, unprefixed, as their
// names are the contract).
func releaseOverlay(t *testing.T, ctx context.Context, bin, ns string) string {
	t.Helper()
	root, err := harness.RepoRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	render := func(args ...string) string {
		t.Helper()
		out, err := exec.CommandContext(ctx, bin, append([]string{"manifests"}, args...)...).Output()
		require.NoError(t, err, "guard manifests %v", args)
		return string(out)
	}
	inner := filepath.Join(dir, "inner")
	base, err := filepath.Rel(inner, filepath.Join(root, "deploy", "kustomize"))
	require.NoError(t, err)
	sa := releasePrefix + circuit.DefaultServiceAccount

	write("inner/config.yaml", releaseConfig())
	write("inner/targets-role.yaml", render("rbac", "--config", filepath.Join(inner, "config.yaml")))
	write("inner/kustomization.yaml", fmt.Sprintf(`resources:
- %[1]s/base
- targets-role.yaml
namePrefix: %[2]s
configMapGenerator:
- name: webhook-guard-config
  namespace: webhook-guard-system
  behavior: replace
  files:
  - config.yaml
`, base, releasePrefix))
	write("namespaced/kustomization.yaml", fmt.Sprintf(`namespace: %[1]s
resources:
- ../inner
replacements:
- source: {kind: ServiceAccount, name: %[2]s, fieldPath: metadata.namespace}
  targets:
  - select: {kind: RoleBinding, name: %[2]s-events}
    fieldPaths: [subjects.0.namespace]
  - select: {kind: RoleBinding, name: %[2]s-leader-election}
    fieldPaths: [subjects.0.namespace]
  - select: {kind: RoleBinding, name: %[2]s-canary}
    fieldPaths: [subjects.0.namespace]
transformers:
- events.yaml
`, ns, sa))
	write("namespaced/events.yaml", fmt.Sprintf(`apiVersion: builtin
kind: PatchTransformer
metadata:
  name: stay-in-kube-system
target:
  name: %[1]s-leader-election|%[1]s-events|%[1]s-status-events
patch: |-
  - op: replace
    path: /metadata/namespace
    value: kube-system
---
apiVersion: builtin
kind: PatchTransformer
metadata:
  name: canary-stays-in-default
target:
  name: %[1]s-canary
patch: |-
  - op: replace
    path: /metadata/namespace
    value: default
---
apiVersion: builtin
kind: PatchTransformer
metadata:
  name: leader-election-renews-the-instances-lease
target:
  kind: Role
  name: %[1]s-leader-election
patch: |-
  - op: add
    path: /rules/1/resourceNames/-
    value: %[2]s
`, sa, releaseLease))
	cfg := filepath.Join(inner, "config.yaml")
	write("cluster/policy.yaml", render("policy", "--config", cfg, "--breaker", "system:serviceaccount:"+ns+":"+sa))
	write("cluster/marking.yaml", render("marking", "--config", cfg))
	write("cluster/kustomization.yaml", "resources:\n- policy.yaml\n- marking.yaml\n")
	write("top/kustomization.yaml", "resources:\n- ../namespaced\n- ../cluster\n")
	return filepath.Join(dir, "top")
}

// releaseRaw is the configuration as kube-apiserver serves it, with
// resourceVersion, generation and managedFields removed: the first two
// change with every write, and managedFields records who wrote which field
// when (the breaker's and guard release's writes leave entries and
// timestamps of their field managers), which is bookkeeping about the
// configuration, not the configuration. It is re-encoded with sorted
// keys, so two reads compare byte for byte.
func releaseRaw(t *testing.T, ctx context.Context, kind circuit.Kind, name string) string {
	t.Helper()
	raw, err := env.Clientset.AdmissionregistrationV1().RESTClient().Get().
		AbsPath("/apis/admissionregistration.k8s.io/v1/" + kind.Resource() + "/" + name).DoRaw(ctx)
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(raw, &obj))
	meta := obj["metadata"].(map[string]any)
	delete(meta, "resourceVersion")
	delete(meta, "generation")
	delete(meta, "managedFields")
	out, err := json.MarshalIndent(obj, "", " ")
	require.NoError(t, err)
	return string(out)
}

// releaseRun runs "guard release" as the admin and returns its output.
func releaseRun(ctx context.Context, bin, kubeconfig string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"release", "--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestRelease_kustomizeLeavesEveryConfigurationAsItWas(t *testing.T) {
	ctx := context.Background()
	ns := uniqueName(t, "release-install")
	webhookNS := testNamespace(t)
	dumpOnFailure(t, ns, webhookNS)
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	sa := releasePrefix + circuit.DefaultServiceAccount
	breaker := "system:serviceaccount:" + ns + ":" + sa

	overlay := releaseOverlay(t, ctx, bin, ns)
	build := env.Kustomize(ctx, "build", overlay)
	require.NoError(t, build.Err, "kustomize build:\n%s", build.Stderr)
	installCRDsFor(t, ctx, installDocs(t, []byte(build.Stdout)))
	r := env.Kubectl(ctx, "", []byte(build.Stdout), "apply", "-f", "-")
	require.NoError(t, r.Err, "kubectl apply:\n%s%s", r.Stdout, r.Stderr)
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			env.Kubectl(context.Background(), "", []byte(build.Stdout), "delete", "--ignore-not-found", "--wait=false", "-f", "-")
		}
	})

	// The targets, as their owners made them: Fail, one with a
	// matchCondition of its own and a webhook the guard does not manage
	// beside it.
	wh := startWebhook(t, harness.WebhookOptions{})
	own := admissionregistrationv1.MatchCondition{Name: "not-kube-system", Expression: "request.namespace != 'kube-system'"}
	hooks := map[string][]admissionregistrationv1.MutatingWebhook{}
	var order []releaseTarget
	for _, tg := range releaseTargets {
		wh.SetBehaviour(tg.path, harness.Allow())
		hook := configMapWebhook(tg.webhook, webhookNS, wh.URL(tg.path), wh.CA.CertPEM, admissionregistrationv1.Fail)
		if tg.mode == circuit.ModeIgnore {
			hook.MatchConditions = []admissionregistrationv1.MatchCondition{own}
		}
		if len(hooks[tg.configuration]) == 0 {
			order = append(order, tg)
		}
		hooks[tg.configuration] = append(hooks[tg.configuration], hook)
	}
	for _, tg := range order {
		var obj client.Object
		if tg.kind == circuit.KindMutating {
			obj = &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: tg.configuration, Labels: map[string]string{"team": "platform"}}, Webhooks: hooks[tg.configuration]}
		} else {
			view := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: tg.configuration, Annotations: map[string]string{"owner": "policy-team"}}, Webhooks: hooks[tg.configuration]}
			obj = admissiontest.AsValidating(view)
		}
		require.NoError(t, env.Client.Create(ctx, obj))
		t.Cleanup(func() {
			if err := env.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s: %v", tg.configuration, err)
			}
		})
	}
	before := map[string]string{}
	for _, tg := range order {
		before[tg.configuration] = releaseRaw(t, ctx, tg.kind, tg.configuration)
	}

	// The guard, as the installed ServiceAccount, opens all three.
	id, err := env.ServiceAccount(ctx, ns, sa)
	require.NoError(t, err)
	require.Equal(t, breaker, id.Username)
	// Leader election as the installed Deployment has it: in kube-system,
	// where "guard release" reads the Lease from the Deployment.
	args := []string{"--leader-elect", "--leader-election-namespace", metav1.NamespaceSystem}
	if help, _ := exec.Command(bin, "run", "--help").CombinedOutput(); strings.Contains(string(help), "-cert-secret") {
		args = append(args, "--cert-secret=")
	}
	g := env.StartGuardT(t, harness.GuardOptions{Name: "release", Kubeconfig: id.KubeconfigPath, Config: releaseConfig(), Args: args, WithoutMarking: true})
	var opened []releaseTarget
	for _, tg := range releaseTargets {
		if !tg.healthy {
			wh.SetBehaviour(tg.path, harness.Delayed(2*time.Second, harness.Allow()))
			opened = append(opened, tg)
		}
	}
	for _, tg := range opened {
		require.Eventually(t, func() bool {
			if exited, code := g.Exited(); exited {
				require.FailNow(t, "the guard exited", "exit code %d; logs:\n%s", code, g.Logs())
			}
			st, err := installState(ctx, tg.kind, tg.configuration, tg.webhook)
			return err == nil && st.policy == admissionregistrationv1.Ignore && st.marker == (tg.mode == circuit.ModeBypass) &&
				strings.Contains(st.annotation, `"by":"`+breaker+"/"+releaseInstance+`"`)
		}, 60*time.Second, 100*time.Millisecond, "the circuit never opened on %s", tg.configuration)
	}

	// While the guard leads, release refuses and changes nothing.
	out, err := releaseRun(ctx, bin, env.KubeconfigPath, "--all", "-n", ns, "--deployment", sa, "--breaker", breaker)
	require.Error(t, err, "guard release ran while the guard leads:\n%s", out)
	assert.Contains(t, out, "leads (Lease "+metav1.NamespaceSystem+"/"+releaseLease+")")

	// Stopped: its Lease is released (LeaderElectionReleaseOnCancel).
	g.Stop()
	for _, tg := range opened {
		st, err := installState(ctx, tg.kind, tg.configuration, tg.webhook)
		require.NoError(t, err)
		require.Equal(t, admissionregistrationv1.Ignore, st.policy, "%s: the circuit must still be open when the guard stops", tg.configuration)
	}
	// Arming entries an administrator mangled by hand: the breaker would
	// have rewritten them, and the release removes them.
	r = env.Kubectl(ctx, "", nil, "annotate", "--overwrite", "mutatingwebhookconfiguration", "release-mutating-b", circuit.ArmingAnnotation+"={mangled")
	require.NoError(t, r.Err, "kubectl annotate:\n%s%s", r.Stdout, r.Stderr)
	dry, err := releaseRun(ctx, bin, env.KubeconfigPath, "--all", "--dry-run", "-n", ns, "--deployment", sa, "--breaker", breaker)
	require.NoError(t, err, "guard release --dry-run:\n%s", dry)
	for _, tg := range opened {
		st, err := installState(ctx, tg.kind, tg.configuration, tg.webhook)
		require.NoError(t, err)
		require.Equal(t, admissionregistrationv1.Ignore, st.policy, "--dry-run wrote %s", tg.configuration)
	}
	out, err = releaseRun(ctx, bin, env.KubeconfigPath, "--all", "-n", ns, "--deployment", sa, "--breaker", breaker)
	require.NoError(t, err, "guard release --all:\n%s", out)
	t.Logf("guard release --all:\n%s", out)
	assert.Equal(t, out, strings.ReplaceAll(dry, " (dry run)", ""), "--dry-run prints what release does")
	want := []string{
		"mutatingwebhookconfiguration/release-mutating-a a.release.example.com: released (failurePolicy Ignore -> Fail, bypass matchCondition removed, record entry removed, arming entry removed 2s later)",
		"mutatingwebhookconfiguration/release-mutating-b: unreadable arming entries removed (annotation " + circuit.ArmingAnnotation + " is not a circuit record: invalid character 'm' looking for beginning of object key string)",
		"mutatingwebhookconfiguration/release-mutating-b b.release.example.com: released (failurePolicy Ignore -> Fail, record entry removed, arming entry removed 2s later)",
		"mutatingwebhookconfiguration/release-mutating-b healthy.release.example.com: nothing to release (circuit closed)",
		"validatingwebhookconfiguration/release-validating v.release.example.com: released (failurePolicy Ignore -> Fail, bypass matchCondition removed, record entry removed)",
		"mutatingwebhookconfiguration/release-mutating-a: marking disarmed (a.release.example.com)",
		"mutatingwebhookconfiguration/release-mutating-b: marking disarmed (b.release.example.com)",
	}
	for _, tg := range releaseTargets[:3] {
		name := marking.Name(tg.configuration, tg.webhook)
		want = append(want, "mutatingadmissionpolicybinding/"+name+" deleted", "mutatingadmissionpolicy/"+name+" deleted")
	}
	want = append(want, "validatingadmissionpolicybinding/"+releasePolicy+" deleted", "validatingadmissionpolicy/"+releasePolicy+" deleted")
	assert.Equal(t, want, strings.Split(strings.TrimSpace(out), "\n"))

	// The rest goes the kustomize way.
	r = env.Kubectl(ctx, "", []byte(build.Stdout), "delete", "--ignore-not-found", "--wait=false", "-f", "-")
	require.NoError(t, r.Err, "kubectl delete:\n%s%s", r.Stdout, r.Stderr)
	deleted = true

	for _, tg := range order {
		assert.Equal(t, before[tg.configuration], releaseRaw(t, ctx, tg.kind, tg.configuration), "%s is not as it was before the guard touched it", tg.configuration)
	}
	for _, tg := range releaseTargets[:3] {
		name := marking.Name(tg.configuration, tg.webhook)
		assert.True(t, apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Name: name}, &admissionregistrationv1.MutatingAdmissionPolicy{})), "marking policy %s is left", name)
		assert.True(t, apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Name: name}, &admissionregistrationv1.MutatingAdmissionPolicyBinding{})), "marking binding %s is left", name)
	}
	assert.True(t, apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Name: releasePolicy}, &admissionregistrationv1.ValidatingAdmissionPolicy{})), "the guard policy is left")
	assert.True(t, apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Name: releasePolicy}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{})), "the guard policy's binding is left")
}

// "guard release --scale-down" never strands the
// cluster. It plans every configuration before it stops anything: an
// unreadable circuit record fails it with the Deployment untouched. And
// what fails after the scale-down (here, a leader that does not go within
// --timeout) scales the Deployment back to its replicas. No kubelet runs
// here: the Deployment is only its object, which is all the scale
// subresource needs.
func TestRelease_aFailureAfterTheScaleDownScalesBackUp(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	bin, err := env.BuildGuard()
	require.NoError(t, err)
	name := uniqueName(t, "strand")
	hook := "h." + name + ".example.com"
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  mode: Bypass
`, name, hook)), 0o600))

	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guard"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guard"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "guard"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "guard", Image: "webhook-guard:e2e"}}},
			},
		},
	}
	require.NoError(t, env.Client.Create(ctx, deployment))
	replicas := func() int32 {
		t.Helper()
		scale, err := env.Clientset.AppsV1().Deployments(ns).GetScale(ctx, "guard", metav1.GetOptions{})
		require.NoError(t, err)
		return scale.Spec.Replicas
	}
	// A leader that renews for an hour: scaling a Deployment stops no
	// process here.
	holder := "guard-7f9c_0"
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: statusapi.LeaseName("")},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	require.NoError(t, env.Client.Create(ctx, lease))

	// An unreadable record: nothing can be planned, nothing is stopped.
	w := configMapWebhook(hook, ns, "https://127.0.0.1:1/never", nil, admissionregistrationv1.Ignore)
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{circuit.Annotation: "{not a record"}},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{w},
	}
	require.NoError(t, env.Client.Create(ctx, mwc))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), mwc) })
	release := func() (string, error) {
		return releaseRun(ctx, bin, env.KubeconfigPath, "--all", "--scale-down", "--timeout", "2s", "--config", cfg, "-n", ns, "--deployment", "guard")
	}
	out, err := release()
	t.Logf("guard release, unreadable record:\n%s", out)
	require.Error(t, err)
	assert.Contains(t, out, "mutatingwebhookconfiguration/"+name+": cannot be released: annotation "+circuit.Annotation+" is not a circuit record")
	assert.Contains(t, out, "nothing was stopped or written")
	assert.NotContains(t, out, "scaled to 0")
	assert.Equal(t, int32(3), replicas(), "scaled down although nothing could be released")

	// Readable again: the release scales down, the leader stays past
	// --timeout, and the Deployment goes back to 3.
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(mwc), mwc))
	delete(mwc.Annotations, circuit.Annotation)
	require.NoError(t, env.Client.Update(ctx, mwc))
	out, err = release()
	t.Logf("guard release, a leader that stays:\n%s", out)
	require.Error(t, err)
	assert.Contains(t, out, "deployment/guard scaled to 0")
	assert.Contains(t, out, "deployment/guard scaled back to 3: the release failed, and the guard runs again")
	assert.Contains(t, out, holder+" still leads")
	assert.Equal(t, int32(3), replicas(), "left at 0 with nothing running the circuits")
}
