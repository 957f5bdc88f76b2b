package admission_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/admission/admissiontest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// TestDecide_everyMetadataFieldIsDecided: every field of ObjectMeta is
// either one the breaker may not change (labels, annotations but its
// record, admission.BreakerMetadata) or one kube-apiserver keeps on an
// UPDATE (admission.APIServerMetadata). A field a new Kubernetes adds
// fails here until someone decides which it is.
func TestDecide_everyMetadataFieldIsDecided(t *testing.T) {
	guarded := append([]string{"labels", "annotations"}, admission.BreakerMetadata()...)
	decided := map[string]string{}
	for _, f := range guarded {
		decided[f] = "guarded"
	}
	for _, f := range admission.APIServerMetadata {
		require.NotContains(t, decided, f, "%s is both guarded and kept by kube-apiserver", f)
		decided[f] = "kept"
	}
	meta := reflect.TypeOf(metav1.ObjectMeta{})
	for i := range meta.NumField() {
		name, _, _ := strings.Cut(meta.Field(i).Tag.Get("json"), ",")
		assert.Contains(t, decided, name, "metadata.%s: neither guarded from the breaker nor kept by kube-apiserver", name)
		delete(decided, name)
	}
	assert.Empty(t, decided, "fields that ObjectMeta does not have")
}

// TestDecide_breakerKeepsWhatTheAPIServerKeeps: the breaker's record
// update, as kube-apiserver hands it to admission (a new managedFields
// entry time, the resourceVersion sent, a generation), is allowed by the
// Go rule and the policy alike; the same update that also adds an owner
// reference is denied by both, with the same words.
func TestDecide_breakerKeepsWhatTheAPIServerKeeps(t *testing.T) {
	hooks := map[string][]string{"cfg": {admissiontest.ManagedWebhook}}
	opts := admission.Options{BreakerUsername: breaker, Managed: hooks, ManagedValidating: hooks}
	p := compile(t, opts)
	user := admissiontest.UserInfo(admissiontest.Breaker, breaker)
	old := admissiontest.BypassOpen("cfg")
	old.ResourceVersion = "41"
	old.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: circuit.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: time.Unix(1, 0)}}}
	closed := old.DeepCopy()
	closed.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
	closed.Webhooks[0].MatchConditions = nil
	delete(closed.Annotations, circuit.Annotation)
	closed.ResourceVersion = "42"
	closed.Generation = 3
	closed.ManagedFields[0].Time = &metav1.Time{Time: time.Unix(2, 0)}
	for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
		d := admission.Decide(admission.Request{Kind: kind, Operation: admissionv1.Update, Old: old, New: closed, User: user}, opts)
		require.True(t, d.Allowed, d.Message)
		allowed, message := p.decide(t, kind, admissionv1.Update, old, closed, user)
		require.True(t, allowed, message)

		owned := closed.DeepCopy()
		owned.OwnerReferences = []metav1.OwnerReference{admissiontest.Owner}
		d = admission.Decide(admission.Request{Kind: kind, Operation: admissionv1.Update, Old: old, New: owned, User: user}, opts)
		require.False(t, d.Allowed)
		assert.Equal(t, admission.ReasonBreakerOutsideOwnedFields, d.Reason)
		assert.Equal(t, kind.Singular()+` "cfg": webhook-guard's own identity (`+breaker+`) may change only the fields it owns: `+
			`the failurePolicy and the bypass matchCondition of managed webhooks (its approved targets), and no metadata but its record (metadata.annotations[webhook-guard.io/circuit]); `+
			`this request also changes metadata.ownerReferences (the garbage collector deletes a configuration whose owners are gone).`, d.Message)
		allowed, message = p.decide(t, kind, admissionv1.Update, old, owned, user)
		require.False(t, allowed)
		assert.Equal(t, d.Message, message)
	}
}
