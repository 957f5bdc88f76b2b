package admission_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/admission/admissiontest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

const breaker = circuit.DefaultUsername

func caseName(i int) string { return fmt.Sprintf("guard-case-%02d", i) }

func options(c admissiontest.Case, name string) admission.Options {
	if c.ConfigKind() == circuit.KindValidating {
		return admission.Options{BreakerUsername: breaker, ManagedValidating: c.ManagedConfigs(name)}
	}
	return admission.Options{BreakerUsername: breaker, Managed: c.ManagedConfigs(name)}
}

func admin() authenticationv1.UserInfo { return admissiontest.UserInfo(admissiontest.Admin, breaker) }

func managedOpts(names ...string) admission.Options {
	m := map[string][]string{}
	for _, n := range names {
		m[n] = []string{admissiontest.ManagedWebhook}
	}
	return admission.Options{BreakerUsername: breaker, Managed: m}
}

func TestDecide_table(t *testing.T) {
	for i, c := range admissiontest.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			name := caseName(i)
			old, new := c.Build(name)
			d := admission.Decide(admission.Request{
				Kind:      c.Kind,
				Operation: admissionv1.Update,
				Old:       old,
				New:       new,
				User:      admissiontest.UserInfo(c.Actor, breaker),
			}, options(c, name))
			require.Equal(t, c.WantAllowed, d.Allowed, "reason %s, message %q", d.Reason, d.Message)
			assert.NotEmpty(t, d.Reason)
			if c.WantAllowed {
				assert.Empty(t, d.Message)
				return
			}
			for _, want := range c.WantMessage(name) {
				assert.Contains(t, d.Message, want)
			}
			assert.Contains(t, d.Message, fmt.Sprintf("%q", name))
			if c.Actor == admissiontest.Breaker {
				assert.Equal(t, admission.ReasonBreakerOutsideOwnedFields, d.Reason)
				assert.Contains(t, d.Message, "identity ("+breaker+")")
				return
			}
			if c.Actor == admissiontest.Releaser && slices.Contains(c.WantMessageContains, admissiontest.ReleaserOverreach) {
				assert.Equal(t, admission.ReasonReleaserOutsideOwnedFields, d.Reason)
				assert.Contains(t, d.Message, "identity ("+circuit.ReleaseUsername(breaker)+")")
				return
			}
			assert.Equal(t, admission.ReasonOwnedFieldChanged, d.Reason)
			assert.Contains(t, d.Message, "webhook-guard ("+breaker+")")
			assert.NotContains(t, d.Message, "\n", "the message is one paragraph")
		})
	}
}

func restoreFail(old *admissionregistrationv1.MutatingWebhookConfiguration) *admissionregistrationv1.MutatingWebhookConfiguration {
	n := old.DeepCopy()
	fail := admissionregistrationv1.Fail
	n.Webhooks[0].FailurePolicy = &fail
	return n
}

func TestDecide_messageNamesOpenCircuit(t *testing.T) {
	old := admissiontest.BypassOpen("cfg")
	d := admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: restoreFail(old), User: admin()}, managedOpts("cfg"))
	require.False(t, d.Allowed)
	assert.Contains(t, d.Message, "webhooks[name=slow.mutator.webhook-guard.io]: circuit open since 2026-11-30T10:00:00Z, original failurePolicy Fail, mode Bypass, reason timeout.")
	assert.Contains(t, d.Message, "webhooks[name=slow.mutator.webhook-guard.io].failurePolicy (Ignore -> Fail)")
	assert.Contains(t, d.Message, `user "kubernetes-admin"`)
	assert.Contains(t, d.Message, `kubectl annotate mutatingwebhookconfiguration cfg webhook-guard.io/override="<reason>" and retry`)
	assert.NotContains(t, d.Message, "--overwrite")
	t.Log(d.Message)
}

func TestDecide_messageOriginalPolicyNull(t *testing.T) {
	old := admissiontest.BypassOpen("cfg")
	old.Annotations[circuit.Annotation] = `{"slow.mutator.webhook-guard.io":{"uid":"u","mode":"Ignore","openedAt":"2026-11-30T10:00:00Z","reason":"timeout","originalFailurePolicy":null}}`
	d := admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: restoreFail(old), User: admin()}, managedOpts("cfg"))
	require.False(t, d.Allowed)
	assert.Contains(t, d.Message, "circuit open since 2026-11-30T10:00:00Z, original failurePolicy unset")
}

func TestDecide_malformedRecord(t *testing.T) {
	for _, record := range []string{
		`{not json`,
		``,
		`null`,
		`[]`,
		`"a string"`,
		`{"slow.mutator.webhook-guard.io":"not an object"}`,
		`{"slow.mutator.webhook-guard.io":{"openedAt":42,"originalFailurePolicy":["x"]}}`,
		`{"slow.mutator.webhook-guard.io":null}`,
		"{\"slow.mutator.webhook-guard.io\":{\"openedAt\":\"line\\nbreak\",\"mode\":\"By\\rpass\"}}",
		"{\n  \"pretty\": \"printed\"\n}",
	} {
		t.Run(record, func(t *testing.T) {
			old := admissiontest.BypassOpen("cfg")
			old.Annotations[circuit.Annotation] = record
			var d admission.Decision
			require.NotPanics(t, func() {
				d = admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: restoreFail(old), User: admin()}, managedOpts("cfg"))
			})
			require.False(t, d.Allowed)
			assert.Contains(t, d.Message, "webhooks[name=slow.mutator.webhook-guard.io].failurePolicy")
			assert.NotContains(t, d.Message, "\n")
			// Timeout-only edits on a malformed record still pass.
			n := old.DeepCopy()
			n.Webhooks[0].TimeoutSeconds = nil
			require.NotPanics(t, func() {
				d = admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: n, User: admin()}, managedOpts("cfg"))
			})
			assert.True(t, d.Allowed)
		})
	}
	// What a hand-written record does not hold reads as unknown, never as a guess.
	old := admissiontest.BypassOpen("cfg")
	old.Annotations[circuit.Annotation] = `{"slow.mutator.webhook-guard.io":{"openedAt":42,"originalFailurePolicy":["x"]}}`
	d := admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: restoreFail(old), User: admin()}, managedOpts("cfg"))
	assert.Contains(t, d.Message, "circuit open since an unknown time, original failurePolicy unset, mode unknown, reason unknown")
}

func TestDecide_deleteAndConnectAllowed(t *testing.T) {
	old := admissiontest.BypassOpen("cfg")
	for _, op := range []admissionv1.Operation{admissionv1.Delete, admissionv1.Connect} {
		d := admission.Decide(admission.Request{Operation: op, Old: old, User: admin()}, managedOpts("cfg"))
		assert.True(t, d.Allowed, op)
		assert.Equal(t, admission.ReasonNotGuarded, d.Reason)
	}
}

func TestDecide_create(t *testing.T) {
	forged := admissiontest.Healthy("cfg")
	forged.Annotations = map[string]string{circuit.Annotation: admissiontest.CircuitRecord(circuit.ModeIgnore, admissiontest.OpenedAt)}
	d := admission.Decide(admission.Request{Operation: admissionv1.Create, New: forged, User: admissiontest.UserInfo(admissiontest.OtherSA, breaker)}, managedOpts("cfg"))
	require.False(t, d.Allowed, "a forged record on CREATE is denied")
	assert.Contains(t, d.Message, "metadata.annotations[webhook-guard.io/circuit] (added)")
	assert.Contains(t, d.Message, `kubectl annotate mutatingwebhookconfiguration cfg webhook-guard.io/override="<reason>"`)

	emptyRecord := admissiontest.Healthy("cfg")
	emptyRecord.Annotations = map[string]string{circuit.Annotation: ""}
	d = admission.Decide(admission.Request{Operation: admissionv1.Create, New: emptyRecord, User: admin()}, managedOpts("cfg"))
	assert.False(t, d.Allowed, "any value counts as adding")

	marked := admissiontest.BypassOpen("cfg")
	delete(marked.Annotations, circuit.Annotation)
	d = admission.Decide(admission.Request{Operation: admissionv1.Create, New: marked, User: admin()}, managedOpts("cfg"))
	require.False(t, d.Allowed, "a bypass marker on CREATE is denied")
	assert.Contains(t, d.Message, "matchConditions[name=webhook-guard.io/circuit-open] (added")
	assert.NotContains(t, d.Message, "failurePolicy", "a webhook present on one side only is no failurePolicy change")

	ignore := admissiontest.IgnoreOpen("cfg")
	delete(ignore.Annotations, circuit.Annotation)
	d = admission.Decide(admission.Request{Operation: admissionv1.Create, New: ignore, User: admin()}, managedOpts("cfg"))
	assert.True(t, d.Allowed, "creating with failurePolicy Ignore is not a change")

	d = admission.Decide(admission.Request{Operation: admissionv1.Create, New: forged, User: admissiontest.UserInfo(admissiontest.Breaker, breaker)}, managedOpts("cfg"))
	assert.True(t, d.Allowed)
	assert.Equal(t, admission.ReasonBreakerIdentity, d.Reason)

	// CREATE ignores a stray Old.
	d = admission.Decide(admission.Request{Operation: admissionv1.Create, Old: forged, New: forged, User: admin()}, managedOpts("cfg"))
	assert.False(t, d.Allowed)
}

func TestDecide_reasons(t *testing.T) {
	old := admissiontest.BypassOpen("cfg")
	n := restoreFail(old)
	upd := func(user authenticationv1.UserInfo, n *admissionregistrationv1.MutatingWebhookConfiguration, opts admission.Options) admission.Decision {
		return admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: n, User: user}, opts)
	}
	assert.Equal(t, admission.ReasonUnmanaged, upd(admin(), n, managedOpts("other")).Reason)
	assert.Equal(t, admission.ReasonBreakerIdentity, upd(admissiontest.UserInfo(admissiontest.Breaker, breaker), n, managedOpts("cfg")).Reason)
	assert.Equal(t, admission.ReasonOwnedFieldChanged, upd(admin(), n, managedOpts("cfg")).Reason)
	assert.Equal(t, admission.ReasonAllowed, upd(admin(), old.DeepCopy(), managedOpts("cfg")).Reason)
	over := n.DeepCopy()
	over.Annotations[circuit.OverrideAnnotation] = "x"
	assert.Equal(t, admission.ReasonOverride, upd(admin(), over, managedOpts("cfg")).Reason)

	d := admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, User: admin()}, managedOpts("cfg"))
	assert.False(t, d.Allowed)
	assert.Equal(t, admission.ReasonInvalidRequest, d.Reason)
}

func TestDecide_breakerUsername(t *testing.T) {
	old := admissiontest.BypassOpen("cfg")
	n := restoreFail(old)
	custom := "system:serviceaccount:guard:breaker"
	opts := admission.Options{BreakerUsername: custom, Managed: map[string][]string{"cfg": {admissiontest.ManagedWebhook}}}
	req := admission.Request{Operation: admissionv1.Update, Old: old, New: n, User: authenticationv1.UserInfo{Username: custom}}
	assert.True(t, admission.Decide(req, opts).Allowed)
	req.User.Username = circuit.DefaultUsername
	d := admission.Decide(req, opts)
	assert.False(t, d.Allowed, "only the configured identity is the breaker")
	assert.Contains(t, d.Message, "webhook-guard ("+custom+")")

	opts.BreakerUsername = ""
	assert.True(t, admission.Decide(req, opts).Allowed, "empty BreakerUsername means the default service account")
	req.User.Username = ""
	assert.False(t, admission.Decide(req, opts).Allowed, "an empty username is never the breaker")
}

func TestDecide_nilAndFailDiffer(t *testing.T) {
	old := admissiontest.Healthy("cfg")
	old.Webhooks[0].FailurePolicy = nil
	d := admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: restoreFail(old), User: admin()}, managedOpts("cfg"))
	require.False(t, d.Allowed)
	assert.Contains(t, d.Message, "(unset -> Fail)")
}

func TestDecide_managedWithoutWebhooks(t *testing.T) {
	old := admissiontest.Healthy("cfg")
	opts := admission.Options{Managed: map[string][]string{"cfg": nil}}
	n := old.DeepCopy()
	ignore := admissionregistrationv1.Ignore
	n.Webhooks[0].FailurePolicy = &ignore
	assert.True(t, admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: n, User: admin()}, opts).Allowed)
	n.Annotations = map[string]string{circuit.Annotation: "{}"}
	assert.False(t, admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: n, User: admin()}, opts).Allowed,
		"the circuit annotation of a managed configuration is owned even with no managed webhook")
}

// TestDecide_releaser: the release identity is the breaker's ServiceAccount
// name plus "-release" unless configured; it may create no managed
// configuration; the breaker's own username is never held to its rule.
func TestDecide_releaser(t *testing.T) {
	opts := managedOpts("cfg")
	releaser := admissiontest.UserInfo(admissiontest.Releaser, breaker)
	assert.Equal(t, "system:serviceaccount:webhook-guard-system:webhook-guard-release", opts.Releaser())
	assert.Equal(t, opts.Releaser(), releaser.Username)

	d := admission.Decide(admission.Request{Operation: admissionv1.Create, New: admissiontest.Healthy("cfg"), User: releaser}, opts)
	require.False(t, d.Allowed, "the release identity creates no managed configuration, even one without owned fields")
	assert.Equal(t, admission.ReasonReleaserOutsideOwnedFields, d.Reason)
	assert.Equal(t, `mutatingwebhookconfiguration "cfg": webhook-guard's release identity (`+opts.Releaser()+`) may change only what a release restores: `+
		`the failurePolicy of managed webhooks, only back to the originalFailurePolicy of their circuit record entry, the bypass matchCondition of managed webhooks, `+
		`and no metadata but the circuit record (metadata.annotations[webhook-guard.io/circuit]), only removing entries, the arming annotation (metadata.annotations[webhook-guard.io/marking-armed]) `+
		`and the override annotation (metadata.annotations[webhook-guard.io/override]); it creates no configuration.`, d.Message)
	d = admission.Decide(admission.Request{Operation: admissionv1.Create, New: admissiontest.Healthy("other"), User: releaser}, opts)
	assert.True(t, d.Allowed, "an unmanaged configuration is not the guard's")

	// A configured release identity replaces the derived one.
	old := admissiontest.Healthy("cfg")
	relabelled := old.DeepCopy()
	relabelled.Labels["team"] = "x"
	custom := opts
	custom.ReleaserUsername = "system:serviceaccount:ops:uninstaller"
	assert.True(t, admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: relabelled, User: releaser}, custom).Allowed)
	d = admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: relabelled, User: authenticationv1.UserInfo{Username: custom.ReleaserUsername}}, custom)
	assert.Equal(t, admission.ReasonReleaserOutsideOwnedFields, d.Reason)

	// The breaker stays the breaker when both names are the same.
	same := opts
	same.ReleaserUsername = breaker
	open := old.DeepCopy()
	open.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	open.Annotations = map[string]string{circuit.Annotation: admissiontest.CircuitRecord(circuit.ModeIgnore, admissiontest.OpenedAt)}
	d = admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: open, User: admissiontest.UserInfo(admissiontest.Breaker, breaker)}, same)
	assert.True(t, d.Allowed, d.Message)
	assert.Equal(t, admission.ReasonBreakerIdentity, d.Reason)
}

// TestDecide_releaserRestoresOnlyTheOriginal: a managed failurePolicy the
// release identity changes must become the original its record entry
// holds; where that is unset, "guard release" removes the field and
// kube-apiserver stores Fail, so both are the original.
func TestDecide_releaserRestoresOnlyTheOriginal(t *testing.T) {
	releaser := admissiontest.UserInfo(admissiontest.Releaser, breaker)
	for name, tc := range map[string]struct {
		original string
		to       *admissionregistrationv1.FailurePolicyType
		want     bool
	}{
		"back to Fail, the original":            {`"Fail"`, ptr.To(admissionregistrationv1.Fail), true},
		"to unset where the original is Fail":   {`"Fail"`, nil, false},
		"to Fail where the original is Ignore":  {`"Ignore"`, ptr.To(admissionregistrationv1.Fail), false},
		"to Fail where the original is unset":   {`null`, ptr.To(admissionregistrationv1.Fail), true},
		"to unset where the original is unset":  {`null`, nil, true},
		"to Fail where the entry has no policy": {``, ptr.To(admissionregistrationv1.Fail), true},
	} {
		t.Run(name, func(t *testing.T) {
			old := admissiontest.IgnoreOpen("cfg")
			entry := `"mode":"Ignore"`
			if tc.original != "" {
				entry += `,"originalFailurePolicy":` + tc.original
			}
			old.Annotations[circuit.Annotation] = `{"` + admissiontest.ManagedWebhook + `":{` + entry + `}}`
			n := old.DeepCopy()
			n.Webhooks[0].FailurePolicy = tc.to
			delete(n.Annotations, circuit.Annotation)
			n.Annotations[circuit.OverrideAnnotation] = "guard release"
			d := admission.Decide(admission.Request{Operation: admissionv1.Update, Old: old, New: n, User: releaser}, managedOpts("cfg"))
			require.Equal(t, tc.want, d.Allowed, d.Message)
			if !tc.want {
				assert.Equal(t, admission.ReasonReleaserOutsideOwnedFields, d.Reason)
				assert.Contains(t, d.Message, "not back to the originalFailurePolicy of its circuit record entry")
			}
		})
	}
}
