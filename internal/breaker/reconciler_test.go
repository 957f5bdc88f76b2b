package breaker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
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

// canary answers the marking canary: not loaded for the first notYet
// calls, then loaded for every circuit in the configuration.
type canary struct {
	notYet, calls int
	circuits      []marking.Circuit
}

func (c *canary) Create(_ context.Context, e *eventsv1.Event, _ metav1.CreateOptions) (*eventsv1.Event, error) {
	c.calls++
	out := e.DeepCopy()
	if c.calls > c.notYet {
		out.Annotations = map[string]string{}
		for _, cc := range c.circuits {
			out.Annotations[marking.LoadedAnnotation(cc.Configuration, cc.Webhook)] = marking.Digest(cc.Configuration, cc.Webhook)
		}
	}
	return out, nil
}

// TestTargetReconciler_openingsWaitForTheirMarksTogetherWithoutHoldingTheWorker:
// ten webhooks of one configuration failing at once open in one write,
// after one canary for all their marking policies, not one per policy;
// the reconcile that finds them not loaded yet returns at once with a
// requeue, instead of holding one of the workers. The service writes no
// policy.
func TestTargetReconciler_openingsWaitForTheirMarksTogetherWithoutHoldingTheWorker(t *testing.T) {
	var hooks []admissionregistrationv1.MutatingWebhook
	var targets []config.Target
	var objs []client.Object
	c := &canary{notYet: 1}
	for i := range 10 {
		name := fmt.Sprintf("w%d.pod-defaults.example.com", i)
		hooks = append(hooks, newWebhook(name, policyFail))
		targets = append(targets, target(name, config.ModeIgnore, 3, 2))
		policy, binding := marking.Render(cfgName, name)
		objs = append(objs, policy, binding)
		c.circuits = append(c.circuits, marking.Circuit{Configuration: cfgName, Webhook: name})
	}
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(append(objs, newConfig(hooks...))...).Build()
	state := NewState()
	for _, tgt := range targets {
		state.Register(tgt.Key())
		for range 3 {
			state.Observe(tgt.Key(), failedResult("timeout"), time.Now())
		}
	}
	r := &TargetReconciler{
		Kind: circuit.KindMutating, Client: cl, APIReader: cl, Targets: targets, State: state,
		Recorder: events.NewFakeRecorder(100), Metrics: NewMetrics(), Identity: testIdentity,
		Marker: &marking.Keeper{Reader: cl, Canary: c},
	}
	ctx := context.Background()
	req := ctrl.Request{}
	req.Name = cfgName

	res, err := r.Reconcile(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, markingPoll, res.RequeueAfter, "the opening waits for kube-apiserver to load the policies")
	assert.Equal(t, 0, openCount(t, cl), "nothing opens before the policies are loaded")
	assert.Equal(t, 1, c.calls, "one canary for all ten policies")

	res, err = r.Reconcile(ctx, req)
	require.NoError(t, err)
	assert.Zero(t, res.RequeueAfter)
	assert.Equal(t, 10, openCount(t, cl), "all ten open in the write after the canary saw them loaded")
	assert.Equal(t, 2, c.calls)
	policies := &admissionregistrationv1.MutatingAdmissionPolicyList{}
	require.NoError(t, cl.List(ctx, policies))
	for _, p := range policies.Items {
		assert.Equal(t, "999", p.ResourceVersion, "policy %s was written by the service", p.Name)
	}
}

// A marking policy that is missing refuses the opening: an error (retried
// with backoff) and a MarkingFailed Event naming the command that
// installs it; nothing is written.
func TestTargetReconciler_aMissingMarkingPolicyRefusesTheOpening(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(newConfig(newWebhook(whA, policyFail))).Build()
	tgt := target(whA, config.ModeBypass, 3, 2)
	state := NewState()
	state.Register(tgt.Key())
	for range 3 {
		state.Observe(tgt.Key(), failedResult("timeout"), time.Now())
	}
	rec := events.NewFakeRecorder(10)
	c := &canary{}
	r := &TargetReconciler{
		Kind: circuit.KindMutating, Client: cl, APIReader: cl, Targets: []config.Target{tgt}, State: state,
		Recorder: rec, Metrics: NewMetrics(), Identity: testIdentity,
		Marker: &marking.Keeper{Reader: cl, Canary: c},
	}
	req := ctrl.Request{}
	req.Name = cfgName
	_, err := r.Reconcile(context.Background(), req)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not installed")
	assert.Equal(t, 0, openCount(t, cl))
	assert.Zero(t, c.calls, "no canary for a policy that is not there")
	require.Len(t, rec.Events, 1)
	event := <-rec.Events
	assert.Contains(t, event, "MarkingFailed")
	assert.Contains(t, event, "guard manifests marking")
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
