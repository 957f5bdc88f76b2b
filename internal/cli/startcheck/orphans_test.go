package startcheck

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// The printed remedy for an orphaned open circuit, applied as kube-apiserver
// applies a JSON patch: each original is back, the marker and the entries
// are gone, under the override annotation (the printed command's second
// part removes it), and another installation's entry and every other field
// stay. The
// e2e test (TestHardening_removedTargetWithoutRBACRefusesToStart) runs the
// printed command itself.
func TestRestorePatch_closesTheOrphansAsTheBreakerWould(t *testing.T) {
	const me, other = "system:serviceaccount:old:webhook-guard", "system:serviceaccount:elsewhere:webhook-guard"
	opened := metav1.NewTime(metav1.Now().Rfc3339Copy().Time)
	hook := func(name string, p *admissionregistrationv1.FailurePolicyType, conditions ...admissionregistrationv1.MatchCondition) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{Name: name, FailurePolicy: p, MatchConditions: conditions,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1/" + name)}}
	}
	keep := admissionregistrationv1.MatchCondition{Name: "keep", Expression: "true"}
	marker := admissionregistrationv1.MatchCondition{Name: circuit.BypassCondition, Expression: circuit.BypassExpression}
	cur := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "gone", UID: "uid-1", ResourceVersion: "7", Annotations: map[string]string{"keep": "me"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			hook("a.example.com", ptr.To(admissionregistrationv1.Ignore), keep, marker),
			hook("b.example.com", ptr.To(admissionregistrationv1.Ignore)),
			hook("c.example.com", ptr.To(admissionregistrationv1.Ignore)),
		},
	}
	entry := func(mode circuit.Mode, original *admissionregistrationv1.FailurePolicyType, by string) circuit.Entry {
		return circuit.Entry{UID: "uid-1", Mode: mode, OpenedAt: opened, Reason: "timeout", OriginalFailurePolicy: original, By: by}
	}
	var err error
	cur.Annotations, err = circuit.Encode(cur.Annotations, circuit.Record{
		"a.example.com": entry(circuit.ModeBypass, ptr.To(admissionregistrationv1.Fail), me),
		"b.example.com": entry(circuit.ModeIgnore, nil, me),
		"c.example.com": entry(circuit.ModeIgnore, ptr.To(admissionregistrationv1.Fail), other),
	})
	require.NoError(t, err)

	patch, err := restorePatch(cur, []string{"a.example.com", "b.example.com"}, me)
	require.NoError(t, err)
	doc, err := json.Marshal(cur)
	require.NoError(t, err)
	patched, err := mustDecodePatch(t, patch).Apply(doc)
	require.NoError(t, err)
	got := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, json.Unmarshal(patched, got))

	want := cur.DeepCopy()
	want.Webhooks[0] = hook("a.example.com", ptr.To(admissionregistrationv1.Fail), keep)
	want.Webhooks[1] = hook("b.example.com", nil)
	want.Annotations, err = circuit.Encode(map[string]string{"keep": "me", circuit.OverrideAnnotation: RemedyOverride},
		circuit.Record{"c.example.com": entry(circuit.ModeIgnore, ptr.To(admissionregistrationv1.Fail), other)})
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Contains(t, string(patch), `"path":"/metadata/resourceVersion","value":"7"`, "it fails if the configuration changed since it was printed")
}

func mustDecodePatch(t *testing.T, patch []byte) jsonpatch.Patch {
	t.Helper()
	p, err := jsonpatch.DecodePatch(patch)
	require.NoError(t, err)
	return p
}

// The quoted patch reaches kubectl as one argument, whatever it holds.
func TestShellQuote_isOneWordInAShell(t *testing.T) {
	for _, s := range []string{`{"a":"b"}`, `it's`, `'`, `$(rm -rf /) "x" \ ;`} {
		out, err := exec.Command("sh", "-c", "printf %s "+shellQuote(s)).Output()
		require.NoError(t, err)
		assert.Equal(t, s, string(out))
	}
}
