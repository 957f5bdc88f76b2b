package release

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

const (
	conf   = "pod-defaults"
	hookA  = "a.pod-defaults.example.com"
	hookB  = "b.pod-defaults.example.com"
	mine   = "system:serviceaccount:guard:webhook-guard"
	theirs = "system:serviceaccount:other:webhook-guard"
	uid    = "uid-1"
	admin  = "kubernetes-admin"
)

var (
	opened = metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	// userCondition is a matchCondition of the webhook's own.
	userCondition = admissionregistrationv1.MatchCondition{Name: "not-kube-system", Expression: "request.namespace != 'kube-system'"}
	bypass        = admissionregistrationv1.MatchCondition{Name: circuit.BypassCondition, Expression: circuit.BypassExpression}
)

func entry(by string, original *admissionregistrationv1.FailurePolicyType) circuit.Entry {
	return circuit.Entry{UID: uid, Mode: circuit.ModeBypass, OpenedAt: opened, Reason: "timeout", Signal: "probe", OriginalFailurePolicy: original, By: by}
}

// handedOff is e handed off to an administrator's override.
func handedOff(e circuit.Entry) circuit.Entry {
	e.HandedOffAt = ptr.To(opened)
	return e
}

// staleHandedOff is a handed-off entry copied from another configuration.
func staleHandedOff(e circuit.Entry) circuit.Entry {
	e = handedOff(e)
	e.UID = "other"
	return e
}

// webhook is a webhook with failurePolicy policy (nil: unset) and
// conditions.
func webhook(name string, policy *admissionregistrationv1.FailurePolicyType, conditions ...admissionregistrationv1.MatchCondition) admissionregistrationv1.MutatingWebhook {
	return admissionregistrationv1.MutatingWebhook{
		Name: name, FailurePolicy: policy, MatchConditions: conditions,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://example.com/" + name)},
		SideEffects:  ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
	}
}

// object is conf with the record rec, the arming entries armed,
// the other annotations and the webhooks.
func object(t *testing.T, rec, armed circuit.Record, annotations map[string]string, hooks ...admissionregistrationv1.MutatingWebhook) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	ann := map[string]string{"team": "platform"}
	for k, v := range annotations {
		ann[k] = v
	}
	ann, err := circuit.Encode(ann, rec)
	require.NoError(t, err)
	ann, err = circuit.EncodeArming(ann, armed)
	require.NoError(t, err)
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: conf, UID: uid, ResourceVersion: "42", Annotations: ann},
		Webhooks:   hooks,
	}
}

var (
	fail   = ptr.To(admissionregistrationv1.Fail)
	ignore = ptr.To(admissionregistrationv1.Ignore)
)

func TestPlanRelease(t *testing.T) {
	for name, tc := range map[string]struct {
		cur      *admissionregistrationv1.MutatingWebhookConfiguration
		webhooks []string
		// want is the configuration handed back; nil: nothing to write.
		want  *admissionregistrationv1.MutatingWebhookConfiguration
		lines []string
		// disarm are the webhooks disarmed in the later write.
		disarm []string
	}{
		"a Bypass circuit goes back to Fail, and keeps the webhook's own matchCondition": {
			cur:    object(t, circuit.Record{hookA: entry(mine, fail)}, nil, nil, webhook(hookA, ignore, userCondition, bypass), webhook(hookB, fail)),
			want:   object(t, nil, circuit.Record{hookA: entry(mine, fail)}, nil, webhook(hookA, fail, userCondition), webhook(hookB, fail)),
			lines:  []string{"mutatingwebhookconfiguration/pod-defaults a.pod-defaults.example.com: released (failurePolicy Ignore -> Fail, bypass matchCondition removed, record entry removed, arming entry removed 2s later)"},
			disarm: []string{hookA},
		},
		"an unset original is removed, and the bypass matchCondition with it": {
			cur:    object(t, circuit.Record{hookA: entry(mine, nil)}, nil, nil, webhook(hookA, ignore, bypass)),
			want:   object(t, nil, circuit.Record{hookA: entry(mine, nil)}, nil, webhook(hookA, nil)),
			lines:  []string{"mutatingwebhookconfiguration/pod-defaults a.pod-defaults.example.com: released (failurePolicy Ignore -> unset, bypass matchCondition removed, record entry removed, arming entry removed 2s later)"},
			disarm: []string{hookA},
		},
		"the record entry moves to the arming entries, which all go in the later write": {
			cur:  object(t, circuit.Record{hookA: entry(mine, fail)}, circuit.Record{hookB: entry(mine, fail)}, nil, webhook(hookA, ignore), webhook(hookB, fail)),
			want: object(t, nil, circuit.Record{hookA: entry(mine, fail), hookB: entry(mine, fail)}, nil, webhook(hookA, fail), webhook(hookB, fail)),
			lines: []string{
				"mutatingwebhookconfiguration/pod-defaults a.pod-defaults.example.com: released (failurePolicy Ignore -> Fail, record entry removed, arming entry removed 2s later)",
				"mutatingwebhookconfiguration/pod-defaults b.pod-defaults.example.com: released (arming entry removed 2s later)",
			},
			disarm: []string{hookA, hookB},
		},
		"another installation's circuit and arming entry are left alone": {
			cur:      object(t, circuit.Record{hookA: entry(theirs, fail)}, circuit.Record{hookA: entry(theirs, fail)}, nil, webhook(hookA, ignore, bypass)),
			webhooks: []string{hookA},
			lines:    []string{"mutatingwebhookconfiguration/pod-defaults a.pod-defaults.example.com: nothing to release (its circuit was opened by another installation, " + theirs + ")"},
		},
		"beside another installation's entry, only this one's goes": {
			cur: object(t, circuit.Record{hookA: entry(mine, fail), hookB: entry(theirs, fail)}, nil, nil, webhook(hookA, ignore, bypass), webhook(hookB, ignore, bypass)),
			want: object(t, circuit.Record{hookB: entry(theirs, fail)}, circuit.Record{hookA: entry(mine, fail)}, nil,
				webhook(hookA, fail), webhook(hookB, ignore, bypass)),
			lines:  []string{"mutatingwebhookconfiguration/pod-defaults a.pod-defaults.example.com: released (failurePolicy Ignore -> Fail, bypass matchCondition removed, record entry removed, arming entry removed 2s later)"},
			disarm: []string{hookA},
		},
		"an entry without a signature is this installation's": {
			cur:    object(t, circuit.Record{hookA: entry("", fail)}, nil, nil, webhook(hookA, ignore)),
			want:   object(t, nil, circuit.Record{hookA: entry("", fail)}, nil, webhook(hookA, fail)),
			lines:  []string{"mutatingwebhookconfiguration/pod-defaults a.pod-defaults.example.com: released (failurePolicy Ignore -> Fail, record entry removed, arming entry removed 2s later)"},
			disarm: []string{hookA},
		},
		"a closed circuit has nothing to release": {
			cur:      object(t, nil, nil, nil, webhook(hookA, fail)),
			webhooks: []string{hookA},
			lines:    []string{"mutatingwebhookconfiguration/pod-defaults a.pod-defaults.example.com: nothing to release (circuit closed)"},
		},
		"a stale entry goes, and the fields stay": {
			cur: func() *admissionregistrationv1.MutatingWebhookConfiguration {
				c := object(t, circuit.Record{hookA: entry(mine, fail)}, nil, nil, webhook(hookA, ignore, bypass))
				c.UID = "uid-2"
				return c
			}(),
			want: func() *admissionregistrationv1.MutatingWebhookConfiguration {
				c := object(t, nil, nil, nil, webhook(hookA, ignore, bypass))
				c.UID = "uid-2"
				return c
			}(),
			lines: []string{"mutatingwebhookconfiguration/pod-defaults a.pod-defaults.example.com: released (stale record entry removed) (the entry was copied from a configuration with UID uid-1: the fields were not changed by this installation here)"},
		},
		"on a handed-off configuration each kept original is restored": {
			cur:  object(t, circuit.Record{hookA: handedOff(entry(mine, fail))}, nil, map[string]string{circuit.OverrideAnnotation: "INC-1"}, webhook(hookA, ignore)),
			want: object(t, nil, circuit.Record{hookA: handedOff(entry(mine, fail))}, map[string]string{circuit.OverrideAnnotation: "INC-1"}, webhook(hookA, fail)),
			lines: []string{`mutatingwebhookconfiguration/pod-defaults a.pod-defaults.example.com: released (failurePolicy Ignore -> Fail, record entry removed, arming entry removed 2s later) ` +
				`(handed off, override "INC-1": the original the record kept is restored)`},
			disarm: []string{hookA},
		},
		"on a configuration handed off but not yet released by the breaker the original is restored": {
			cur:  object(t, circuit.Record{hookA: entry(mine, fail)}, nil, map[string]string{circuit.OverrideAnnotation: "INC-1"}, webhook(hookA, ignore, bypass)),
			want: object(t, nil, circuit.Record{hookA: entry(mine, fail)}, map[string]string{circuit.OverrideAnnotation: "INC-1"}, webhook(hookA, fail)),
			lines: []string{`mutatingwebhookconfiguration/pod-defaults a.pod-defaults.example.com: released (failurePolicy Ignore -> Fail, bypass matchCondition removed, record entry removed, arming entry removed 2s later) ` +
				`(handed off, override "INC-1": the original the record kept is restored)`},
			disarm: []string{hookA},
		},
		"a handed-off entry copied from another configuration stays": {
			cur: object(t, circuit.Record{hookA: staleHandedOff(entry(mine, fail))}, nil, nil, webhook(hookA, ignore)),
			lines: []string{`mutatingwebhookconfiguration/pod-defaults a.pod-defaults.example.com: nothing to release ` +
				`(a handed-off entry copied from a configuration with UID other: only an administrator may remove it, see docs/operating.md)`},
		},
		"an entry of a webhook that is gone is removed": {
			cur:   object(t, circuit.Record{hookB: entry(mine, fail)}, nil, nil, webhook(hookA, fail)),
			want:  object(t, nil, nil, nil, webhook(hookA, fail)),
			lines: []string{"mutatingwebhookconfiguration/pod-defaults b.pod-defaults.example.com: released (record entry removed) (the webhook is no longer in the configuration)"},
		},
		"only the webhook asked for is released": {
			cur:      object(t, circuit.Record{hookA: entry(mine, fail), hookB: entry(mine, fail)}, nil, nil, webhook(hookA, ignore), webhook(hookB, ignore)),
			webhooks: []string{hookB},
			want:     object(t, circuit.Record{hookA: entry(mine, fail)}, circuit.Record{hookB: entry(mine, fail)}, nil, webhook(hookA, ignore), webhook(hookB, fail)),
			lines:    []string{"mutatingwebhookconfiguration/pod-defaults b.pod-defaults.example.com: released (failurePolicy Ignore -> Fail, record entry removed, arming entry removed 2s later)"},
			disarm:   []string{hookB},
		},
	} {
		t.Run(name, func(t *testing.T) {
			before := tc.cur.DeepCopy()
			plan, err := PlanRelease(circuit.KindMutating, tc.cur, mine, tc.webhooks)
			require.NoError(t, err)
			assert.Equal(t, before, tc.cur, "PlanRelease changes nothing")
			var lines []string
			for _, l := range plan.Lines {
				lines = append(lines, l.String())
			}
			assert.Equal(t, tc.lines, lines)
			assert.Equal(t, tc.want, plan.Next)
			assert.Equal(t, tc.disarm, plan.Disarm)
			assert.Empty(t, plan.Notes)
			if plan.Next == nil {
				return
			}
			disarmed, err := PlanDisarm(plan.Next, mine, plan.Disarm)
			require.NoError(t, err)
			if len(plan.Disarm) == 0 {
				assert.Nil(t, disarmed, "nothing to disarm: no later write")
				return
			}
			require.NotNil(t, disarmed)
			armed, err := circuit.DecodeArming(disarmed.Annotations)
			require.NoError(t, err)
			for hook, e := range armed {
				assert.False(t, e.Mine(mine), "%s: disarmed in the later write", hook)
			}
			rest := disarmed.DeepCopy()
			rest.Annotations = plan.Next.Annotations
			assert.Equal(t, plan.Next, rest, "the later write changes the arming entries alone")
		})
	}
}

// Unreadable arming entries are no arming, as the breaker reads them: the
// release removes them rather than failing, which would leave the
// circuits open with nothing running.
func TestPlanRelease_unreadableArmingEntriesGo(t *testing.T) {
	cur := object(t, circuit.Record{hookA: entry(mine, fail)}, nil, nil, webhook(hookA, ignore, bypass))
	cur.Annotations[circuit.ArmingAnnotation] = "not json"
	plan, err := PlanRelease(circuit.KindMutating, cur, mine, nil)
	require.NoError(t, err)
	require.NotNil(t, plan.Next)
	assert.Equal(t, []string{hookA}, plan.Disarm)
	require.Len(t, plan.Notes, 1)
	assert.Contains(t, plan.Notes[0], "mutatingwebhookconfiguration/pod-defaults: unreadable arming entries removed")
	armed, err := circuit.DecodeArming(plan.Next.Annotations)
	require.NoError(t, err, "readable again")
	assert.Equal(t, []string{hookA}, armed.Webhooks(), "the record entry moved, nothing else")
	assert.True(t, armed[hookA].Mine(mine))

	// Nothing open: the unreadable entries go all the same.
	closed := object(t, nil, nil, nil, webhook(hookA, fail))
	closed.Annotations[circuit.ArmingAnnotation] = "{"
	plan, err = PlanRelease(circuit.KindMutating, closed, mine, nil)
	require.NoError(t, err)
	require.NotNil(t, plan.Next)
	assert.NotContains(t, plan.Next.Annotations, circuit.ArmingAnnotation)
	disarmed, err := PlanDisarm(closed, mine, nil)
	require.NoError(t, err)
	assert.NotContains(t, disarmed.Annotations, circuit.ArmingAnnotation)
}

func TestPlanRelease_unreadableRecordIsAnError(t *testing.T) {
	cur := object(t, nil, nil, nil, webhook(hookA, ignore))
	cur.Annotations[circuit.Annotation] = "{"
	_, err := PlanRelease(circuit.KindMutating, cur, mine, nil)
	require.ErrorContains(t, err, "is not a circuit record")
}

// apply applies a JSON patch to obj as kube-apiserver does, without the
// resourceVersion precondition (which it checks and does not store).
func apply(t *testing.T, obj *admissionregistrationv1.MutatingWebhookConfiguration, patch []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	doc, err := json.Marshal(obj)
	require.NoError(t, err)
	p, err := jsonpatch.DecodePatch(patch)
	require.NoError(t, err)
	out, err := p.Apply(doc)
	require.NoError(t, err)
	next := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, json.Unmarshal(out, next))
	return next
}

// The two patches, as an administrator sends them, are each admitted by
// the ownership rule (admission.Decide, which the guard policy's CEL
// renders), and together hand back exactly the plan.
func TestPlanPatches_admittedForAnAdministrator(t *testing.T) {
	opts := admission.Options{BreakerUsername: mine, Managed: map[string][]string{conf: {hookA}}}
	user := authenticationv1.UserInfo{Username: admin}
	cur := object(t, circuit.Record{hookA: entry(mine, fail)}, circuit.Record{hookA: entry(mine, fail)}, nil, webhook(hookA, ignore, userCondition, bypass), webhook(hookB, ignore))
	plan, err := PlanRelease(circuit.KindMutating, cur, mine, nil)
	require.NoError(t, err)
	patches, err := PlanPatches(cur, plan.Next)
	require.NoError(t, err)
	require.NotNil(t, patches.RemoveOverride)

	// Sent as one write, without the override, the rule refuses it.
	direct, err := circuit.Patch(cur, plan.Next)
	require.NoError(t, err)
	refused := admission.Decide(admission.Request{Operation: admissionv1.Update, Old: cur, New: apply(t, cur, direct), User: user}, opts)
	assert.False(t, refused.Allowed, "without the override, an administrator may not restore the owned fields")

	mid := apply(t, cur, patches.Restore)
	assert.Equal(t, OverrideReason, mid.Annotations[circuit.OverrideAnnotation])
	d := admission.Decide(admission.Request{Operation: admissionv1.Update, Old: cur, New: mid, User: user}, opts)
	assert.True(t, d.Allowed, "%s: %s", d.Reason, d.Message)
	assert.Equal(t, admission.ReasonOverride, d.Reason)

	final := apply(t, mid, patches.RemoveOverride("43"))
	d = admission.Decide(admission.Request{Operation: admissionv1.Update, Old: mid, New: final, User: user}, opts)
	assert.True(t, d.Allowed, "%s: %s", d.Reason, d.Message)
	assert.Equal(t, admission.ReasonAllowed, d.Reason)

	want := plan.Next.DeepCopy()
	want.ResourceVersion = "43"
	assert.Equal(t, want, final)
	assert.Equal(t, object(t, nil, nil, nil, webhook(hookA, fail, userCondition), webhook(hookB, ignore)).Webhooks, final.Webhooks)
}

// The release identity's patches are admitted by the ownership rule too,
// beside another installation's entry: the record the plan writes holds
// that entry byte for byte as stored, which is all the rule lets the
// release identity keep of a record.
func TestPlanPatches_admittedForTheReleaseIdentity(t *testing.T) {
	opts := admission.Options{BreakerUsername: mine, Managed: map[string][]string{conf: {hookA}}}
	user := authenticationv1.UserInfo{Username: opts.Releaser()}
	cur := object(t, circuit.Record{hookA: entry(mine, fail), hookB: entry(theirs, fail)}, nil, nil, webhook(hookA, ignore, bypass), webhook(hookB, ignore, bypass))
	plan, err := PlanRelease(circuit.KindMutating, cur, mine, []string{hookA})
	require.NoError(t, err)
	patches, err := PlanPatches(cur, plan.Next)
	require.NoError(t, err)
	mid := apply(t, cur, patches.Restore)
	require.Contains(t, mid.Annotations[circuit.Annotation], hookB, "the other installation's entry stays")
	d := admission.Decide(admission.Request{Operation: admissionv1.Update, Old: cur, New: mid, User: user}, opts)
	assert.True(t, d.Allowed, "%s: %s", d.Reason, d.Message)
	final := apply(t, mid, patches.RemoveOverride("43"))
	d = admission.Decide(admission.Request{Operation: admissionv1.Update, Old: mid, New: final, User: user}, opts)
	assert.True(t, d.Allowed, "%s: %s", d.Reason, d.Message)

	// The same write with the kept entry's original changed is refused.
	forged := mid.DeepCopy()
	forged.Annotations, err = circuit.Encode(forged.Annotations, circuit.Record{hookB: entry(theirs, ignore)})
	require.NoError(t, err)
	d = admission.Decide(admission.Request{Operation: admissionv1.Update, Old: cur, New: forged, User: user}, opts)
	assert.False(t, d.Allowed)
	assert.Equal(t, admission.ReasonReleaserOutsideOwnedFields, d.Reason)
}

func TestPlanPatches_preconditions(t *testing.T) {
	cur := object(t, circuit.Record{hookA: entry(mine, fail)}, nil, nil, webhook(hookA, ignore))
	plan, err := PlanRelease(circuit.KindMutating, cur, mine, nil)
	require.NoError(t, err)
	patches, err := PlanPatches(cur, plan.Next)
	require.NoError(t, err)
	assert.Contains(t, string(patches.Restore), `{"op":"replace","path":"/metadata/resourceVersion","value":"42"}`)
	assert.JSONEq(t, `[{"op":"replace","path":"/metadata/resourceVersion","value":"7"},{"op":"remove","path":"/metadata/annotations/webhook-guard.io~1override"}]`,
		string(patches.RemoveOverride("7")))
}

func TestPlanPatches_handedOffKeepsItsOverride(t *testing.T) {
	cur := object(t, circuit.Record{hookA: entry(mine, fail)}, nil, map[string]string{circuit.OverrideAnnotation: "INC-1"}, webhook(hookA, ignore))
	plan, err := PlanRelease(circuit.KindMutating, cur, mine, nil)
	require.NoError(t, err)
	patches, err := PlanPatches(cur, plan.Next)
	require.NoError(t, err)
	assert.Nil(t, patches.RemoveOverride)
	assert.Equal(t, "INC-1", apply(t, cur, patches.Restore).Annotations[circuit.OverrideAnnotation])
}
