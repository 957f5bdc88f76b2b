package breaker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakermetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// When the apiserver refuses a write as invalid (the bypass marker would
// be one matchCondition too many, say), the breaker writes the
// configuration's transitions one by one: the others go through, the
// refused one gets a WriteRefused Event and is left as it is, and it is
// not tried again until the configuration changes.
func TestConfigurationReconciler_anInvalidWriteFallsBackToOneWebhookAtATime(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	var patches, refused int
	cl := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail), breakertest.Webhook(breakertest.WhB, breakertest.PolicyFail))).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			patches++
			data, err := patch.Data(obj)
			require.NoError(t, err)
			// The bypass marker on the second webhook is one
			// matchCondition too many.
			if strings.Contains(string(data), `"path":"/webhooks/1/matchConditions"`) {
				refused++
				return apierrors.NewInvalid(schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: "MutatingWebhookConfiguration"}, breakertest.ConfigName,
					field.ErrorList{field.TooMany(field.NewPath("webhooks").Index(1).Child("matchConditions"), 65, 64)})
			}
			return c.Patch(ctx, obj, patch, opts...)
		}}).Build()
	state := NewState()
	targets := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2), breakertest.Target(breakertest.WhB, config.ModeBypass, 3, 2)}
	for _, tgt := range targets {
		state.Register(tgt.Key())
		for range 3 {
			state.Observe(tgt.Key(), breakertest.FailedResult("timeout"), time.Now())
		}
	}
	rec := events.NewFakeRecorder(10)
	// No marking: the fallback is about the writes.
	r := &ConfigurationReconciler{Kind: circuit.KindMutating, Client: cl, Targets: targets, State: state, Recorder: rec, Metrics: breakermetrics.NewMetrics(), Signer: testIdentity}
	req := ctrl.Request{}
	req.Name = breakertest.ConfigName

	_, err := r.Reconcile(context.Background(), req)
	require.NoError(t, err, "a refused webhook does not fail the reconcile")
	assert.Equal(t, 3, patches, "both together, then each alone")
	assert.Equal(t, 2, refused)
	got := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Name: breakertest.ConfigName}, got))
	assert.True(t, isBypassed(got, breakertest.WhA), "the other webhook's opening went through")
	assert.Equal(t, admissionregistrationv1.Fail, *circuit.FindWebhook(got, breakertest.WhB).FailurePolicy, "the refused one is left as it is")
	rec0 := breakertest.MustRecord(t, got)
	assert.Contains(t, rec0, breakertest.WhA)
	assert.NotContains(t, rec0, breakertest.WhB)
	var reasons []string
	for len(rec.Events) > 0 {
		reasons = append(reasons, <-rec.Events)
	}
	assert.Len(t, reasons, 2)
	assert.Contains(t, strings.Join(reasons, "\n"), "WriteRefused")
	assert.Contains(t, strings.Join(reasons, "\n"), "the apiserver refused CircuitOpened for "+breakertest.WhB+" as invalid")

	// whB keeps failing; nothing is tried again at this generation.
	for range 3 {
		state.Observe(targets[1].Key(), breakertest.FailedResult("timeout"), time.Now())
	}
	_, err = r.Reconcile(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, 3, patches, "the refused transition is not retried until the configuration changes")
}

// TestPatch_transitionsAndArmingShareOneWritePath: a write of transitions
// and a write of arming entries alone fail, are reported and are counted
// the same way, because both go through patch: an error the reconcile
// cannot decide again is a WriteFailed Event and a write error, and a
// conflict (decided again by Reconcile) is neither.
func TestPatch_transitionsAndArmingShareOneWritePath(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	cur := breakertest.Config(breakertest.Webhook(breakertest.WhA, breakertest.PolicyFail))
	next := cur.DeepCopy()
	next.Annotations = map[string]string{circuit.ArmingAnnotation: "{}"}
	targets := []config.Target{breakertest.Target(breakertest.WhA, config.ModeBypass, 3, 2)}
	for _, tc := range []struct {
		err      error
		reported bool
	}{
		{apierrors.NewInternalError(errors.New("etcd is down")), true},
		{apierrors.NewConflict(schema.GroupResource{Resource: "mutatingwebhookconfigurations"}, breakertest.ConfigName, errors.New("stale")), false},
	} {
		for _, armingOnly := range []bool{false, true} {
			cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cur.DeepCopy()).
				WithInterceptorFuncs(interceptor.Funcs{Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
					return tc.err
				}}).Build()
			rec := events.NewFakeRecorder(10)
			metrics := breakermetrics.NewMetrics()
			r := &ConfigurationReconciler{Kind: circuit.KindMutating, Client: cl, Targets: targets, State: NewState(), Recorder: rec, Metrics: metrics, Signer: testIdentity}
			var err error
			if armingOnly {
				err = r.patch(context.Background(), cur, cur, decide.Step{Kind: decide.StepArm, Next: next}, targets)
			} else {
				err = r.write(context.Background(), cur, cur, decide.Step{Kind: decide.StepWrite, Next: next}, targets)
			}
			require.ErrorIs(t, err, tc.err, "arming only: %v", armingOnly)
			assert.Equal(t, boolGauge(tc.reported), testutil.ToFloat64(metrics.WriteErrors), "arming only: %v, error %v", armingOnly, tc.err)
			if !tc.reported {
				assert.Empty(t, rec.Events, "a conflict is decided again, not reported")
				continue
			}
			require.Len(t, rec.Events, 1)
			event := <-rec.Events
			assert.Contains(t, event, "WriteFailed")
			if armingOnly {
				assert.Contains(t, event, "could not write the arming entries")
			} else {
				assert.Contains(t, event, "could not write 0 change(s)")
			}
		}
	}
}

// The changes of one write give one Event per kind of change: a mass
// failure's openings of a configuration's webhooks are one Event that
// names each, not one Event each.
func TestChangeEvents_oneEventPerKindOfChange(t *testing.T) {
	opened := func(name string) decide.Change {
		return decide.Change{Webhook: name, Kind: decide.Opened, Message: "opened the circuit on " + name + " in Ignore mode after 3 failed probes in a row (timeout)"}
	}
	closed := decide.Change{Webhook: "d.example.com", Kind: decide.Closed, Message: "closed the circuit on d.example.com after 5 consecutive healthy probes"}
	events := changeEvents([]decide.Change{opened("a.example.com"), closed, opened("b.example.com"), opened("c.example.com")})
	require.Len(t, events, 2)
	assert.Equal(t, decide.Opened, events[0].kind)
	assert.True(t, strings.HasPrefix(events[0].note, "CircuitOpened for 3 webhooks in one write: a.example.com, b.example.com, c.example.com. "), events[0].note)
	for _, name := range []string{"a", "b", "c"} {
		assert.Contains(t, events[0].note, opened(name+".example.com").Message)
	}
	assert.Equal(t, changeEvent{kind: decide.Closed, note: closed.Message}, events[1], "a change alone: its own message")

	var many []decide.Change
	for i := range 10 {
		many = append(many, opened(fmt.Sprintf("w%d.bench-configuration-0.example.com", i)))
	}
	events = changeEvents(many)
	require.Len(t, events, 1)
	assert.LessOrEqual(t, len(events[0].note), circuit.EventNoteLimit)
	for _, c := range many {
		assert.Contains(t, events[0].note, c.Webhook, "every webhook named before the messages are cut")
	}

	long := opened("a.example.com")
	long.Message += " (last: timeout: Post \"https://" + strings.Repeat("a", 2000) + ".example.com/mutate\": context deadline exceeded)"
	events = changeEvents([]decide.Change{long})
	require.Len(t, events, 1)
	assert.LessOrEqual(t, len(events[0].note), circuit.EventNoteLimit, "kube-apiserver refuses a longer Event")
	assert.True(t, strings.HasPrefix(events[0].note, opened("a.example.com").Message))
}
