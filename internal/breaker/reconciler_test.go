package breaker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

const testIdentity = "system:serviceaccount:webhook-guard-system:webhook-guard"

// TestTargetReconciler_openingsWaitForTheirMarksTogetherWithoutHoldingTheWorker:
// ten webhooks of one configuration failing at once open in one write,
// after one Settle for all their marking policies, not one per policy;
// and the reconcile that puts the policies in place returns at once with
// a requeue, instead of holding one of the workers for the wait.
// Reconciles meanwhile keep the decision time the policies carry.
func TestTargetReconciler_openingsWaitForTheirMarksTogetherWithoutHoldingTheWorker(t *testing.T) {
	const settle = 300 * time.Millisecond
	var hooks []admissionregistrationv1.MutatingWebhook
	var targets []config.Target
	for i := range 10 {
		name := fmt.Sprintf("w%d.pod-defaults.example.com", i)
		hooks = append(hooks, newWebhook(name, policyFail))
		targets = append(targets, target(name, config.ModeIgnore, 3, 2))
	}
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(newConfig(hooks...)).Build()
	state := NewState()
	for _, tgt := range targets {
		state.Register(tgt.Key())
		for range 3 {
			state.Observe(tgt.Key(), failedResult("timeout"), time.Now())
		}
	}
	r := &TargetReconciler{
		Kind: circuit.KindMutating, Client: c, APIReader: c, Targets: targets, State: state,
		Recorder: events.NewFakeRecorder(100), Metrics: NewMetrics(), Identity: testIdentity,
		Marker: &marking.Keeper{Client: c, Breaker: testIdentity, Settle: settle},
	}
	ctx := context.Background()
	req := ctrl.Request{}
	req.Name = cfgName

	res, err := r.Reconcile(ctx, req)
	require.NoError(t, err)
	assert.Greater(t, res.RequeueAfter, time.Duration(0), "the opening waits for its marks")
	assert.LessOrEqual(t, res.RequeueAfter, settle, "one Settle for all ten policies")
	assert.Equal(t, 0, openCount(t, c), "nothing opens before the marks take effect")
	policies := &admissionregistrationv1.MutatingAdmissionPolicyList{}
	require.NoError(t, c.List(ctx, policies))
	require.Len(t, policies.Items, 10)
	versions := map[string]string{}
	for _, p := range policies.Items {
		versions[p.Name] = p.ResourceVersion
	}

	// A reconcile meanwhile (a probe's wake-up) changes no policy: it
	// decides with the held decision time, and waits for the rest.
	res, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	assert.Greater(t, res.RequeueAfter, time.Duration(0))
	require.NoError(t, c.List(ctx, policies))
	for _, p := range policies.Items {
		assert.Equal(t, versions[p.Name], p.ResourceVersion, "policy %s was rewritten", p.Name)
	}

	time.Sleep(res.RequeueAfter)
	res, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	assert.Zero(t, res.RequeueAfter)
	assert.Equal(t, 10, openCount(t, c), "all ten open in the write after the wait")
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: cfgName}, mwc))
	rec, err := circuit.Decode(mwc.Annotations)
	require.NoError(t, err)
	require.NoError(t, c.List(ctx, policies))
	for _, p := range policies.Items {
		assert.Equal(t, versions[p.Name], p.ResourceVersion, "policy %s was rewritten", p.Name)
	}
	for name, e := range rec {
		policy, _ := marking.Render(cfgName, *findHook(mwc, name), e.OpenedAt.Time, testIdentity)
		live := &admissionregistrationv1.MutatingAdmissionPolicy{}
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(policy), live))
		assert.Equal(t, policy.Spec, live.Spec, "the record's openedAt is the one the policy of %s carries", name)
	}
}

// TestKeeper_Ensure_readiness: a policy written now takes effect Settle
// later; one already in place, after a restart (nothing remembered),
// Settle after its managedFields time rounded up to the next second.
func TestKeeper_Ensure_readiness(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	wh := newWebhook(whA, policyIgnore)
	o := marking.Open{Webhook: wh, OpenedAt: testNow}
	k := &marking.Keeper{Client: c, Breaker: testIdentity, Settle: time.Second}
	before := time.Now()
	ready, err := k.Ensure(context.Background(), cfgName, o)
	require.NoError(t, err)
	assert.WithinRange(t, ready, before.Add(time.Second), time.Now().Add(time.Second))
	again, err := k.Ensure(context.Background(), cfgName, o)
	require.NoError(t, err)
	assert.Equal(t, ready, again, "unchanged policies keep their readiness")

	// A new process knows only what the apiserver recorded.
	written := time.Now().Add(-10 * time.Second).Truncate(time.Second)
	policy, binding := marking.Render(cfgName, wh, testNow, testIdentity)
	for _, obj := range []client.Object{policy, binding} {
		obj.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: circuit.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "admissionregistration.k8s.io/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}, Time: &metav1.Time{Time: written}}})
	}
	restarted := &marking.Keeper{Client: fake.NewClientBuilder().WithScheme(scheme).WithReturnManagedFields().WithObjects(policy, binding).Build(), Breaker: testIdentity, Settle: time.Second}
	ready, err = restarted.Ensure(context.Background(), cfgName, o)
	require.NoError(t, err)
	assert.Equal(t, written.Add(2*time.Second), ready)

	// A webhook that matches no CREATE or UPDATE has nothing to mark.
	del := newWebhook(whB, policyFail)
	del.Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Delete}
	ready, err = k.Ensure(context.Background(), cfgName, marking.Open{Webhook: del, OpenedAt: testNow})
	require.NoError(t, err)
	assert.True(t, ready.IsZero())
}

func openCount(t *testing.T, c client.Client) int {
	t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: cfgName}, mwc))
	n := 0
	for _, w := range mwc.Webhooks {
		if *w.FailurePolicy == admissionregistrationv1.Ignore {
			n++
		}
	}
	return n
}

func findHook(mwc *admissionregistrationv1.MutatingWebhookConfiguration, name string) *admissionregistrationv1.MutatingWebhook {
	for i := range mwc.Webhooks {
		if mwc.Webhooks[i].Name == name {
			return &mwc.Webhooks[i]
		}
	}
	return nil
}
