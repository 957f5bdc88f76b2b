package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// installMarking installs the circuit's marking policy and binding as an
// administrator does ("guard manifests marking"), and returns the policy.
func (s *breakerSetup) installMarking() *admissionregistrationv1.MutatingAdmissionPolicy {
	s.t.Helper()
	policy, binding := marking.Render(s.name, s.hook)
	for _, obj := range []client.Object{policy, binding} {
		if err := env.Client.Create(context.Background(), obj); !apierrors.IsAlreadyExists(err) {
			require.NoError(s.t, err)
		}
	}
	return s.markingPolicy()
}

// markingPolicy returns the circuit's marking policy, or nil.
func (s *breakerSetup) markingPolicy() *admissionregistrationv1.MutatingAdmissionPolicy {
	s.t.Helper()
	p := &admissionregistrationv1.MutatingAdmissionPolicy{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Name: marking.Name(s.name, s.hook)}, p)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(s.t, err)
	return p
}

func (s *breakerSetup) createCM(name string, labels map[string]string) *corev1.ConfigMap {
	s.t.Helper()
	// The webhook's JSON patch adds to existing labels.
	all := map[string]string{"app": "demo"}
	for k, v := range labels {
		all[k] = v
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name, Labels: all}}
	require.NoError(s.t, env.Client.Create(context.Background(), cm))
	return cm
}

// The webhook's mutation adds the label mutated=yes. While its circuit is
// open in Bypass mode, what the apiserver admits without it carries the
// mark; what it mutated before and after does not, and neither does what
// the webhook would never have seen in another namespace. What its own
// matchConditions would have excluded is marked too: the marking policy
// cannot evaluate them (marks are hints). No object escapes both the
// mutation and the mark, even while the circuit opens under a stream of
// creates. The marking policy is the one installed with everything else,
// unchanged by the service.
func TestMarking_bypassMarksWhatWasAdmittedWithoutTheMutation(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	mutate := harness.PatchLabel("mutated", "yes")
	s.wh.SetBehaviour(webhookPath, mutate)
	g := s.startGuard("marks")
	waitHealthyProbes(t, g, 2)
	before := s.createCM("before", nil)
	assert.Equal(t, "yes", before.Labels["mutated"])

	// A stream of creates across the opening.
	var mu sync.Mutex
	var streamed []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := fmt.Sprintf("stream-%d", i)
			if err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name, Labels: map[string]string{"app": "demo"}}}); err == nil {
				mu.Lock()
				streamed = append(streamed, name)
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, mutate))
	installed := s.markingPolicy()
	require.NotNil(t, installed, "installed with the guard")
	_, open := s.waitOpen()
	entry := mustRecord(t, open)[s.hook]
	policy := s.markingPolicy()
	require.NotNil(t, policy)
	assert.Equal(t, installed.ResourceVersion, policy.ResourceVersion, "the service never writes the marking policy")

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(streamed) >= 5
	}, transition, 20*time.Millisecond, "the stream of creates never got through the open circuit")

	// Bypassed creates carry the mark, and not the mutation.
	var during *corev1.ConfigMap
	require.Eventually(t, func() bool {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, GenerateName: "during-", Labels: map[string]string{"app": "demo"}}}
		if env.Client.Create(ctx, cm) != nil {
			return false
		}
		during = cm
		_, ok := marked(cm)
		return ok && cm.Labels["mutated"] == ""
	}, transition, 50*time.Millisecond, "a bypassed create never carried the mark")
	id, _ := marked(during)
	assert.Equal(t, marking.ID(s.name, s.hook), id)
	assert.Equal(t, marking.Note(s.name, s.hook, entry.OpenedAt.Time), during.Annotations[circuit.UnmutatedAnnotation])
	skipped := s.createCM("skipped", map[string]string{"skip-slow": "true"})
	_, ok := marked(skipped)
	assert.True(t, ok, "outside the webhook's own matchConditions: marked all the same (a hint, not proof)")
	otherNS := uniqueName(t, "unwatched")
	require.NoError(t, env.EnsureNamespace(ctx, otherNS))
	outside := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: otherNS, Name: "outside", Labels: map[string]string{"app": "demo"}}}
	require.NoError(t, env.Client.Create(ctx, outside))
	_, ok = marked(outside)
	assert.False(t, ok, "outside the webhook's namespaceSelector: not marked")

	// Close: the breaker disarms the policy a moment after the closing
	// write; after that, nothing is marked, and the policy stays
	// installed, dormant.
	s.wh.SetBehaviour(webhookPath, mutate)
	s.waitRestored()
	close(stop)
	wg.Wait()
	var after *corev1.ConfigMap
	require.Eventually(t, func() bool {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, GenerateName: "after-", Labels: map[string]string{"app": "demo"}}}
		if env.Client.Create(ctx, cm) != nil {
			return false
		}
		after = cm
		_, ok := marked(cm)
		return !ok
	}, transition, 50*time.Millisecond, "creates stayed marked after the close")
	assert.Equal(t, "yes", after.Labels["mutated"])
	require.NotNil(t, s.markingPolicy())
	assert.Equal(t, installed.ResourceVersion, s.markingPolicy().ResourceVersion)

	// No unmarked escape across the whole run.
	mu.Lock()
	defer mu.Unlock()
	escaped, markedCount := 0, 0
	for _, name := range streamed {
		cm := &corev1.ConfigMap{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, cm))
		_, isMarked := marked(cm)
		if isMarked {
			markedCount++
		}
		if !isMarked && cm.Labels["mutated"] != "yes" {
			escaped++
		}
	}
	t.Logf("%d streamed creates across open and close: %d marked, %d escaped both the mutation and the mark", len(streamed), markedCount, escaped)
	closing := eventNotes(t, circuit.KindMutating, s.name)[string(decide.Closed)]
	t.Logf("CircuitClosed: %s", closing)
	assert.Contains(t, closing, "objects were marked "+circuit.UnmutatedLabel+"="+marking.ID(s.name, s.hook)+" (guard unmutated lists them)",
		"the apiserver's count of the marking policy's applications")
	assert.Zero(t, escaped)
	assert.Positive(t, markedCount)

	// The admitted count is one per request: each mark makes kube-apiserver
	// reinvoke the webhooks and exclude the request a second time, which
	// must not count twice (before, 28 were counted for 14 marks, more
	// than the objects admitted without the mutation).
	m := regexp.MustCompile(`admitted (\d+) requests without the mutation.*; (\d+) objects were marked`).FindStringSubmatch(closing)
	require.Len(t, m, 3, "the closing Event gives both counts: %s", closing)
	admittedCount, _ := strconv.Atoi(m[1])
	markedInEvent, _ := strconv.Atoi(m[2])
	all := &corev1.ConfigMapList{}
	require.NoError(t, env.Client.List(ctx, all, client.InNamespace(s.ns), client.HasLabels{circuit.UnmutatedLabel}))
	without := 0
	for _, cm := range all.Items {
		if cm.Labels["mutated"] != "yes" {
			without++
		}
	}
	t.Logf("admitted without the mutation: %d; marked, by the apiserver's count: %d; marked objects in the namespace: %d, %d of them without the mutation", admittedCount, markedInEvent, len(all.Items), without)
	assert.Positive(t, admittedCount)
	// The counts come from scrapes while the record says open: requests in
	// the scrape interval after the opening write and before the closing
	// one are not counted, and near both writes a request can be both
	// mutated and marked. None is counted twice: never more than the
	// objects admitted without the mutation, and the one "skipped" by the
	// webhook's own matchCondition (the apiserver counts that exclusion).
	assert.LessOrEqual(t, admittedCount, without+1, "counted at most once each")
}

// The service's token cannot write a mutating admission policy: kube-
// apiserver does not run admission on writes to policy objects, so RBAC is
// the only limit, and the installed RBAC grants no create, update, patch
// or delete on them. Every attempt with the token to create a policy that
// mutates something else, to change or delete an installed marking
// policy, or to bind one anew is refused. kubectl auth can-i agrees.
func TestMarking_theServiceTokenCannotWriteAdmissionPolicies(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	installed := s.installMarking()
	token := s.guardID.Client

	for _, verb := range []string{"create", "update", "patch", "delete", "deletecollection"} {
		for _, resource := range []string{"mutatingadmissionpolicies", "mutatingadmissionpolicybindings"} {
			r := env.Kubectl(ctx, s.guardID.KubeconfigPath, nil, "auth", "can-i", verb, resource+".admissionregistration.k8s.io")
			assert.Equal(t, "no", strings.TrimSpace(r.Stdout), "kubectl auth can-i %s %s as the service", verb, resource)
			r = env.Kubectl(ctx, s.guardID.KubeconfigPath, nil, "auth", "can-i", verb, resource+".admissionregistration.k8s.io/"+installed.Name)
			assert.Equal(t, "no", strings.TrimSpace(r.Stdout), "kubectl auth can-i %s %s/%s as the service", verb, resource, installed.Name)
		}
	}

	// A policy that adds a subject to every RoleBinding, under the marking
	// policies' own name prefix, and a binding for it.
	evil := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: circuit.MarkingPolicyPrefix + "0123456789"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"rbac.authorization.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"rolebindings"}},
			}}}},
			Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{
				Expression: `[JSONPatch{op: "add", path: "/subjects/-", value: {"kind": "User", "name": "mallory", "apiGroup": "rbac.authorization.k8s.io"}}]`}}},
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
	err := token.Create(ctx, evil)
	assert.True(t, apierrors.IsForbidden(err), "creating a mutating policy with the token: %v", err)
	evilBinding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: evil.Name}, Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: installed.Name}}
	err = token.Create(ctx, evilBinding)
	assert.True(t, apierrors.IsForbidden(err), "creating a binding with the token: %v", err)

	// The installed marking policy: rewritten to mutate RoleBindings,
	// patched, deleted.
	changed := installed.DeepCopy()
	changed.Spec = evil.Spec
	err = token.Update(ctx, changed)
	assert.True(t, apierrors.IsForbidden(err), "updating the marking policy with the token: %v", err)
	err = token.Patch(ctx, installed.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"failurePolicy":"Fail"}}`)))
	assert.True(t, apierrors.IsForbidden(err), "patching the marking policy with the token: %v", err)
	err = token.Delete(ctx, installed.DeepCopy())
	assert.True(t, apierrors.IsForbidden(err), "deleting the marking policy with the token: %v", err)
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: installed.Name}, binding))
	binding.Spec.PolicyName = evil.Name
	err = token.Update(ctx, binding)
	assert.True(t, apierrors.IsForbidden(err), "re-pointing the marking binding with the token: %v", err)

	after := s.markingPolicy()
	require.NotNil(t, after)
	assert.Equal(t, installed.ResourceVersion, after.ResourceVersion, "the installed policy is unchanged")
}

// A marking policy that is missing or not what the release renders: the
// service refuses to start, naming it and the command that installs it;
// one edited while the service runs refuses the opening (MarkingFailed)
// until it is put back, and then the circuit opens.
func TestMarking_aMissingOrEditedMarkingPolicyRefusesToOpen(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	require.Nil(t, s.markingPolicy())

	g, err := env.StartGuard(harness.GuardOptions{Name: "no-marking", Kubeconfig: s.guardID.KubeconfigPath, Config: s.config(""), WithoutMarking: true})
	require.NoError(t, err)
	t.Cleanup(g.Stop)
	code, err := g.Wait(transition)
	require.NoError(t, err, "the guard started without its marking policy")
	assert.NotZero(t, code)
	assert.Contains(t, g.Logs(), "the marking policy of "+s.name+"/"+s.hook+" is not installed")
	assert.Contains(t, g.Logs(), "guard manifests marking --config")

	// Installed, the guard starts; then someone edits the policy.
	policy, _ := marking.Render(s.name, s.hook)
	s.installMarking()
	waitHealthyProbes(t, s.startGuard("edited"), 1)
	edited := s.markingPolicy()
	edited.Spec.MatchConditions[0].Expression = "false"
	require.NoError(t, env.Client.Update(ctx, edited))
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	require.Eventually(t, func() bool {
		return strings.Contains(eventNotes(t, circuit.KindMutating, s.name)["MarkingFailed"], "differs from what this release renders")
	}, transition, 50*time.Millisecond, "no MarkingFailed Event")
	_, open := mustRecord(t, s.get())[s.hook]
	assert.False(t, open, "opened without its marking policy in place")

	// Put back as rendered: the circuit opens.
	current := s.markingPolicy()
	current.Spec = policy.Spec
	require.NoError(t, env.Client.Update(ctx, current))
	s.waitOpen()
}

// guard unmutated lists exactly what was marked, grouped by the workload
// that owns it with the command that repairs it, and --clear removes the
// marks. Deployments, ReplicaSets and Pods are created directly: no
// controller or kubelet is needed to create the objects.
func TestMarking_guardUnmutatedListsGroupsAndClears(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	mwc := s.get()
	mwc.Webhooks[0].Rules = []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"", "apps"}, APIVersions: []string{"v1"},
			Resources: []string{"configmaps", "pods", "replicasets", "deployments"}},
	}}
	mwc.Webhooks[0].MatchConditions = nil
	require.NoError(t, env.Client.Update(ctx, mwc))
	s.original = *mwc.Webhooks[0].DeepCopy()
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "default"}}))
	s.createCM("before", nil)

	s.startGuard("unmutated")
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	s.waitOpen()
	labels := map[string]string{"app": "web"}
	var deploy *appsv1.Deployment
	require.Eventually(t, func() bool {
		deploy = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, GenerateName: "web-"}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web"}}}},
		}}
		if env.Client.Create(ctx, deploy) != nil {
			return false
		}
		if _, ok := marked(deploy); ok {
			return true
		}
		_ = env.Client.Delete(ctx, deploy) // created before the apiserver applied the bypass
		return false
	}, transition, 50*time.Millisecond)
	controller := true
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: deploy.Name + "-7d4b9", Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: deploy.Name, UID: deploy.UID, Controller: &controller}}},
		Spec: appsv1.ReplicaSetSpec{Selector: deploy.Spec.Selector, Template: deploy.Spec.Template}}
	require.NoError(t, env.Client.Create(ctx, rs))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: rs.Name + "-x2k4p", Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &controller}}},
		Spec: deploy.Spec.Template.Spec}
	require.NoError(t, env.Client.Create(ctx, pod))
	settings := s.createCM("settings", nil)
	for _, o := range []client.Object{rs, pod, settings} {
		_, ok := marked(o)
		require.True(t, ok, "%s was admitted without the mark", o.GetName())
	}
	s.wh.SetBehaviour(webhookPath, harness.Allow())
	s.waitRestored()
	// The breaker disarms the policy a moment after the closing write:
	// creates made after that are not marked.
	require.Eventually(t, func() bool {
		after := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, GenerateName: "after-"}}
		if env.Client.Create(ctx, after) != nil {
			return false
		}
		if _, ok := marked(after); ok {
			_ = env.Client.Delete(ctx, after)
			return false
		}
		return true
	}, transition, 50*time.Millisecond, "creates stayed marked after the close")

	bin, err := env.BuildGuard()
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "guard.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(s.config("")), 0o600))
	unmutated := func(args ...string) string {
		out, err := exec.Command(bin, append([]string{"unmutated", "--config", cfg, "--kubeconfig", env.KubeconfigPath}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	out := unmutated()
	t.Logf("$ guard unmutated\n%s", out)
	assert.Contains(t, out, "4 objects were admitted without a webhook's mutation")
	assert.Contains(t, out, "Deployment "+s.ns+"/"+deploy.Name+"\n  repair: kubectl rollout restart deployment/"+deploy.Name+" -n "+s.ns)
	for _, line := range []string{"Deployment " + s.ns + "/" + deploy.Name + "  skipped ", "ReplicaSet " + s.ns + "/" + rs.Name + "  skipped ", "Pod " + s.ns + "/" + pod.Name + "  skipped ", "ConfigMap " + s.ns + "/settings  skipped " + s.name + "/" + s.hook + " since "} {
		assert.Contains(t, out, line)
	}
	assert.NotContains(t, out, "/before")
	assert.NotContains(t, out, "/after")
	deployGroup, _, _ := strings.Cut(out[strings.Index(out, "Deployment "+s.ns+"/"+deploy.Name+"\n"):], "\n\n")
	assert.Contains(t, deployGroup, "Pod "+s.ns+"/"+pod.Name, "the Pod is grouped under its Deployment")
	assert.Contains(t, deployGroup, "ReplicaSet "+s.ns+"/"+rs.Name, "the ReplicaSet is grouped under its Deployment")

	assert.Contains(t, unmutated("--clear"), "Cleared the marks of 4 objects.")
	assert.Contains(t, unmutated(), "No object carries the mark")
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	_, ok := marked(pod)
	assert.False(t, ok)
	assert.NotContains(t, pod.Annotations, circuit.UnmutatedAnnotation)
}

// Each request admitted without the mutation counts once. The mark makes
// kube-apiserver reinvoke the mutating webhooks, which excludes the
// request a second time (counted twice before: 2N for N creates).
func TestMarking_eachAdmittedRequestCountsOnce(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	mutate := harness.PatchLabel("mutated", "yes")
	s.wh.SetBehaviour(webhookPath, mutate)
	metricsAddr := freeAddr(t)
	s.startGuard("guard", "--metrics-bind-address", metricsAddr)
	reader := metricsReader(t, s.ns)
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, mutate))
	s.waitOpen()

	create := func(prefix string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, GenerateName: prefix, Labels: map[string]string{"app": "demo"}}}
		require.NoError(t, env.Client.Create(ctx, cm))
		return cm
	}
	bypassed := func(cm *corev1.ConfigMap) bool {
		_, ok := marked(cm)
		return ok && cm.Labels["mutated"] == ""
	}
	// The apiserver bypasses the webhook and marks what it admits.
	require.Eventually(t, func() bool { return bypassed(create("settle-")) }, transition, 50*time.Millisecond)

	// counters reads the admitted count and the number of apiserver
	// observations of this target.
	counters := func() (admitted, observations float64) {
		body, err := scrape(metricsAddr, reader)
		require.NoError(t, err)
		for _, line := range strings.Split(body, "\n") {
			if !strings.Contains(line, `configuration="`+s.name+`"`) || !strings.Contains(line, `webhook="`+s.hook+`"`) {
				continue
			}
			fields := strings.Fields(line)
			v, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
			switch {
			case strings.HasPrefix(line, "webhook_guard_admitted_without_webhook_total{"):
				admitted += v
			case strings.HasPrefix(line, "webhook_guard_apiserver_observations_total{"):
				observations += v
			}
		}
		return admitted, observations
	}
	// settled returns the admitted count once two more observations have
	// come in: every request made before is counted by then.
	settled := func() float64 {
		_, from := counters()
		var admitted float64
		require.Eventually(t, func() bool {
			var n float64
			admitted, n = counters()
			return n >= from+2
		}, transition, 50*time.Millisecond, "the apiserver signal stopped observing")
		return admitted
	}
	before := settled()
	const creates = 10
	for range creates {
		require.True(t, bypassed(create("counted-")), "a create while the circuit is open was not bypassed and marked")
	}
	after := settled()
	t.Logf("admitted without the mutation: %.0f before, %.0f after %d creates", before, after, creates)
	assert.Equal(t, float64(creates), after-before, "each request admitted without the mutation counts once")
	assert.True(t, isOpen(s.get(), s.hook, s.mode), "the circuit stayed open throughout")
}

// Across 20 openings and closings under a stream of about 10 creates a
// second, no object is admitted without both the mutation and the mark,
// at any moment, the transitions included: marking is armed before the
// write that opens a circuit (and kube-apiserver shows it armed), and
// stays armed for a while after the write that closes it
// (docs/how-it-works.md, "Ordering"). Each escape is reported with
// whether it overlapped a transition, which is where the ordering matters.
func TestMarking_twentyOpeningsUnderAStream(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	mutate := harness.PatchLabel("mutated", "yes")
	s.wh.SetBehaviour(webhookPath, mutate)
	// The probe alone judges, so that each circuit closes as soon as the
	// webhook answers again (no minOpen); and without flap damping, which
	// would keep each of these back-to-back re-openings open longer.
	g := env.StartGuardT(t, harness.GuardOptions{Name: "twenty", Kubeconfig: s.guardID.KubeconfigPath,
		Config: s.config("  dampFlapping: false\n  apiserverSignal:\n    enabled: false\n")})
	waitHealthyProbes(t, g, 2)

	// About 10 creates a second, each on its own: one waiting for the
	// webhook's timeout holds back no other.
	var mu sync.Mutex
	var streamed []string
	spans := map[string][2]time.Time{} // each admitted create: sent, answered
	plain := 0                         // creates answered mutated and unmarked
	admitted := func() (all, mutatedOnly int) {
		mu.Lock()
		defer mu.Unlock()
		return len(streamed), plain
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			name := fmt.Sprintf("stream-%d", i)
			wg.Go(func() {
				sent := time.Now()
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name, Labels: map[string]string{"app": "demo"}}}
				if err := env.Client.Create(ctx, cm); err == nil {
					_, isMarked := marked(cm)
					mu.Lock()
					streamed = append(streamed, name)
					spans[name] = [2]time.Time{sent, time.Now()}
					if !isMarked && cm.Labels["mutated"] == "yes" {
						plain++
					}
					mu.Unlock()
				}
			})
		}
	})
	// Each phase lasts until creates got through it: while open, any
	// three; once closed, three that the webhook mutated and the policy,
	// disarmed again, did not mark.
	waitAdmitted := func(n int, phase string) {
		before, _ := admitted()
		require.Eventually(t, func() bool { all, _ := admitted(); return all >= before+n }, transition, 20*time.Millisecond, "no create got through while %s", phase)
	}
	waitMutated := func(n int) {
		_, before := admitted()
		require.Eventually(t, func() bool { _, m := admitted(); return m >= before+n }, transition, 20*time.Millisecond, "no create was mutated and unmarked after the close")
	}
	start := time.Now()
	// transitions are the windows from the webhook's failure or recovery
	// until the write was seen, and a second after it.
	var transitions [][2]time.Time
	const openings = 20
	for i := range openings {
		failing := time.Now()
		s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, mutate))
		_, open := s.waitOpen()
		transitions = append(transitions, [2]time.Time{failing, time.Now().Add(time.Second)})
		require.Contains(t, mustRecord(t, open), s.hook, "opening %d", i+1)
		waitAdmitted(3, "open")
		healthy := time.Now()
		s.wh.SetBehaviour(webhookPath, mutate)
		s.waitRestored()
		transitions = append(transitions, [2]time.Time{healthy, time.Now().Add(time.Second)})
		waitMutated(3)
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)

	mu.Lock()
	defer mu.Unlock()
	duringTransition := func(name string) bool {
		for _, w := range transitions {
			if spans[name][0].Before(w[1]) && spans[name][1].After(w[0]) {
				return true
			}
		}
		return false
	}
	escaped, markedCount, mutated := 0, 0, 0
	for _, name := range streamed {
		cm := &corev1.ConfigMap{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, cm))
		_, isMarked := marked(cm)
		switch {
		case isMarked:
			markedCount++
		case cm.Labels["mutated"] == "yes":
			mutated++
		default:
			escaped++
			t.Errorf("%s was admitted without the mutation and without the mark (overlapping a transition: %v)", name, duringTransition(name))
		}
	}
	t.Logf("%d openings in %v; %d creates admitted (%.1f/s): %d mutated, %d marked, %d escaped both",
		openings, elapsed.Round(time.Second), len(streamed), float64(len(streamed))/elapsed.Seconds(), mutated, markedCount, escaped)
	assert.Zero(t, escaped)
	assert.GreaterOrEqual(t, markedCount, openings, "creates admitted while circuits were open")
	assert.GreaterOrEqual(t, mutated, 3*openings, "creates admitted while circuits were closed")
}
