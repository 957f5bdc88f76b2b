package breaker

import (
	"context"
	"strings"
	"testing"
	"time"

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

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
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
	r := &ConfigurationReconciler{Kind: circuit.KindMutating, Client: cl, Targets: targets, State: state, Recorder: rec, Metrics: NewMetrics(), Signer: testIdentity}
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
