package circuit

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestPatch_touchesOnlyOwnedFields applies the patch, as the apiserver
// would, to a stored object that carries a field this client's types do
// not know (as from a newer apiserver): the field survives, the owned
// fields become next's, and the resourceVersion read is the precondition.
func TestPatch_touchesOnlyOwnedFields(t *testing.T) {
	cur := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "cfg", ResourceVersion: "42", Annotations: map[string]string{"keep": "me"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "a.example.com", FailurePolicy: ptr.To(admissionregistrationv1.Fail), MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "x", Expression: "true"}}},
			{Name: "b.example.com"},
		},
	}
	next := cur.DeepCopy()
	next.Annotations[Annotation] = `{"a.example.com":{}}`
	next.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	next.Webhooks[0].MatchConditions = append(next.Webhooks[0].MatchConditions, admissionregistrationv1.MatchCondition{Name: BypassCondition, Expression: BypassExpression})
	next.Webhooks[1].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)

	stored := map[string]any{}
	raw, err := json.Marshal(cur)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &stored))
	stored["futureField"] = map[string]any{"set": "by a newer apiserver"}
	stored["webhooks"].([]any)[0].(map[string]any)["futureWebhookField"] = true
	stored["metadata"].(map[string]any)["resourceVersion"] = "43" // what the server holds after someone else's write
	raw, err = json.Marshal(stored)
	require.NoError(t, err)

	patchJSON, err := Patch(cur, next)
	require.NoError(t, err)
	patch, err := jsonpatch.DecodePatch(patchJSON)
	require.NoError(t, err)
	out, err := patch.Apply(raw)
	require.NoError(t, err)

	var got map[string]any
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, map[string]any{"set": "by a newer apiserver"}, got["futureField"])
	assert.Equal(t, true, got["webhooks"].([]any)[0].(map[string]any)["futureWebhookField"])
	assert.Equal(t, "42", got["metadata"].(map[string]any)["resourceVersion"], "the resourceVersion read is sent, so a changed object conflicts")

	var typed admissionregistrationv1.MutatingWebhookConfiguration
	require.NoError(t, json.Unmarshal(out, &typed))
	assert.Equal(t, next.Annotations, typed.Annotations)
	assert.Equal(t, next.Webhooks, typed.Webhooks)

	// Closing: an unset policy and no matchCondition are removed, not nulled.
	closed, err := Patch(next, cur)
	require.NoError(t, err)
	back, err := jsonpatch.DecodePatch(closed)
	require.NoError(t, err)
	nextRaw, err := json.Marshal(next)
	require.NoError(t, err)
	out, err = back.Apply(nextRaw)
	require.NoError(t, err)
	typed = admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, json.Unmarshal(out, &typed))
	assert.Equal(t, cur.Webhooks, typed.Webhooks)
	assert.Equal(t, cur.Annotations, typed.Annotations)

	// A change that reorders or drops webhooks is refused.
	next.Webhooks = next.Webhooks[:1]
	_, err = Patch(cur, next)
	assert.Error(t, err)
}
