// Package breakertest holds the fixtures the breaker's tests and its
// decision package's tests share: configurations, targets, probe
// results and counts. It is imported only by tests.
package breakertest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// The names of the fixtures' configuration, its webhooks and UIDs.
const (
	UID        types.UID = "11111111-2222-4333-8444-555555555555"
	OtherUID   types.UID = "99999999-8888-4777-8666-555555555555"
	ConfigName           = "pod-defaults"
	WhA                  = "a.pod-defaults.example.com"
	WhB                  = "b.pod-defaults.example.com"
	WhOther              = "other.pod-defaults.example.com"
	WhMissing            = "gone.pod-defaults.example.com"
)

// Now is deliberately not in UTC and not on a whole second.
var Now = time.Date(2025, 3, 4, 5, 6, 7, 890_000_000, time.FixedZone("CET", 3600))

// PolicyFail and PolicyIgnore are the two failure policies, to point to.
var (
	PolicyFail   = ptr.To(admissionregistrationv1.Fail)
	PolicyIgnore = ptr.To(admissionregistrationv1.Ignore)
)

// BypassMarker is the matchCondition Bypass mode adds.
func BypassMarker() admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{Name: circuit.BypassCondition, Expression: "false"}
}

// MC is an operator's own matchCondition, named name.
func MC(name string) admissionregistrationv1.MatchCondition {
	return admissionregistrationv1.MatchCondition{Name: name, Expression: "request.namespace != '" + name + "'"}
}

// Webhook returns a webhook with every field set that the breaker must
// not touch.
func Webhook(name string, policy *admissionregistrationv1.FailurePolicyType, conds ...admissionregistrationv1.MatchCondition) admissionregistrationv1.MutatingWebhook {
	if policy != nil {
		policy = ptr.To(*policy)
	}
	var mcs []admissionregistrationv1.MatchCondition
	if len(conds) > 0 {
		mcs = append(mcs, conds...)
	}
	return admissionregistrationv1.MutatingWebhook{
		Name: name,
		ClientConfig: admissionregistrationv1.WebhookClientConfig{
			Service:  &admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "svc", Path: ptr.To("/mutate"), Port: ptr.To[int32](8443)},
			CABundle: []byte("ca"),
		},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		}},
		FailurePolicy:           policy,
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"inject": "true"}},
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To[int32](7),
		AdmissionReviewVersions: []string{"v1"},
		ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		MatchConditions:         mcs,
	}
}

// Config is the configuration ConfigName, UID UID, holding webhooks.
func Config(webhooks ...admissionregistrationv1.MutatingWebhook) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{
			Name:            ConfigName,
			UID:             UID,
			ResourceVersion: "42",
			Generation:      3,
			Labels:          map[string]string{"app": "pod-defaults"},
			Annotations:     map[string]string{"keep": "me"},
		},
		Webhooks: webhooks,
	}
}

// Target is an approved target of ConfigName with a 1 s interval.
func Target(name string, mode config.Mode, openAfter, closeAfter int) config.Target {
	return config.Target{Kind: circuit.KindMutating, Configuration: ConfigName, Webhook: name, Mode: mode, OpenAfter: openAfter, CloseAfter: closeAfter}
}

// Failing is n failed probes in a row, for reason.
func Failing(n int, reason probe.FailureReason) decide.Counts {
	var c decide.Counts
	for i := 0; i < n; i++ {
		c.Observe(FailedResult(reason))
	}
	return c
}

// Healthy is n Healthy probes in a row.
func Healthy(n int) decide.Counts {
	var c decide.Counts
	for i := 0; i < n; i++ {
		c.Observe(HealthyResult())
	}
	return c
}

// WithEntries returns cfg with the record set and the breaker's changes
// applied as if it had opened each webhook.
func WithEntries(t *testing.T, cfg *admissionregistrationv1.MutatingWebhookConfiguration, rec circuit.Record) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	out := cfg.DeepCopy()
	for name, e := range rec {
		wh := circuit.FindWebhook(out, name)
		if wh == nil {
			continue
		}
		wh.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		if e.Mode == config.ModeBypass {
			wh.MatchConditions = append(wh.MatchConditions, BypassMarker())
		}
	}
	ann, err := circuit.Encode(out.Annotations, rec)
	require.NoError(t, err)
	out.Annotations = ann
	return out
}

// EntryFor is the record entry of a circuit opened in mode from original.
func EntryFor(mode config.Mode, original *admissionregistrationv1.FailurePolicyType) circuit.Entry {
	return circuit.Entry{
		UID:                   UID,
		Mode:                  mode,
		OpenedAt:              metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)),
		Reason:                string(probe.ReasonRefused),
		OriginalFailurePolicy: original,
	}
}

// MustRecord decodes mwc's record, failing t if it cannot.
func MustRecord(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration) circuit.Record {
	t.Helper()
	rec, err := circuit.Decode(mwc.Annotations)
	require.NoError(t, err)
	return rec
}

// WithoutCircuit returns a copy of mwc without the circuit annotation, to
// compare everything else.
func WithoutCircuit(mwc *admissionregistrationv1.MutatingWebhookConfiguration) *admissionregistrationv1.MutatingWebhookConfiguration {
	out := mwc.DeepCopy()
	delete(out.Annotations, circuit.Annotation)
	return out
}

// Kinds maps each change's webhook to its kind.
func Kinds(changes []decide.Change) map[string]decide.ChangeKind {
	out := map[string]decide.ChangeKind{}
	for _, c := range changes {
		out[c.Webhook] = c.Kind
	}
	return out
}

// Plan runs decide.Plan at Now unless in sets a time, failing t on an
// error or a nil result.
func Plan(t *testing.T, cur *admissionregistrationv1.MutatingWebhookConfiguration, in decide.Inputs) (*admissionregistrationv1.MutatingWebhookConfiguration, []decide.Change) {
	t.Helper()
	if in.Now.IsZero() {
		in.Now = Now
	}
	next, changes, err := decide.Plan(cur, in)
	require.NoError(t, err)
	require.NotNil(t, next)
	return next, changes
}

// HealthyResult is one Healthy probe result.
func HealthyResult() probe.Result {
	return probe.Result{Outcome: probe.OutcomeHealthy, HTTPStatus: 200}
}

// FailedResult is one failed probe result, for reason.
func FailedResult(reason probe.FailureReason) probe.Result {
	return probe.Result{Outcome: probe.OutcomeFailed, Reason: reason, Err: errors.New("probe failed: " + string(reason))}
}

// UnknownResult is one probe that could not run.
func UnknownResult() probe.Result {
	return probe.Result{Outcome: probe.OutcomeUnknown, Err: errors.New("guard could not probe")}
}

func WithSignal(t config.Target) config.Target {
	t.APIServerSignal = config.APIServerSignal{Enabled: true, MinRequests: 3, FailureRatio: 0.5}
	return t
}

// APIServerFailing is n apiserver observations in a row of failing calls.
func APIServerFailing(n int) decide.Counts {
	var c decide.Counts
	for range n {
		c.Observe(probe.Result{Outcome: probe.OutcomeFailed, Reason: decide.ReasonAPIServerCalls, Err: errors.New("apiserver: 37 of 40 calls failed (calling_webhook_error or fail-open) in the last 1s")})
	}
	return c
}

// PathFailing is n failed path probes in a row: kube-apiserver's service
// proxy could not reach the webhook's server.
func PathFailing(n int) decide.Path {
	p := decide.Path{Road: decide.RoadService}
	for range n {
		p.Observe(probe.Result{Outcome: probe.OutcomeFailed, Reason: probe.ReasonTimeout, Err: errors.New("no answer from kube-apiserver's service proxy within 1s")})
	}
	return p
}

// PathHealthy is n Healthy path probes in a row: the road works.
func PathHealthy(n int) decide.Path {
	p := decide.Path{Road: decide.RoadService}
	for range n {
		p.Observe(HealthyResult())
	}
	return p
}

// DefaultTarget is a Target with the defaults a user gets: a probe every
// second, open after 3, close after 5.
func DefaultTarget(mode config.Mode) config.Target {
	tgt := Target(WhA, mode, config.DefaultOpenAfter, config.DefaultCloseAfter)
	tgt.Probe.Interval = config.DefaultProbeInterval
	tgt.DampFlapping = true
	return tgt
}

// Probed is the evidence of targets whose only evidence is their direct
// probe's counts.
func Probed(counts map[string]decide.Counts) map[string]decide.Evidence {
	out := make(map[string]decide.Evidence, len(counts))
	for hook, c := range counts {
		out[hook] = decide.Evidence{Probe: c}
	}
	return out
}
