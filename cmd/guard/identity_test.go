package main

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// The fake client serves these narrow helpers; the e2e tests
// (test/e2e/identity_test.go) run the same paths against kube-apiserver.

const (
	saMain   = "system:serviceaccount:main:webhook-guard"
	saOther  = "system:serviceaccount:other:webhook-guard"
	testConf = "pod-defaults"
	testHook = "a.pod-defaults.example.com"
)

var testClock = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func fakeReader(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Event{}, "involvedObject.kind", func(o client.Object) []string { return []string{o.(*corev1.Event).InvolvedObject.Kind} }).
		WithIndex(&corev1.Event{}, "involvedObject.name", func(o client.Object) []string { return []string{o.(*corev1.Event).InvolvedObject.Name} }).
		WithIndex(&corev1.Event{}, "reason", func(o client.Object) []string { return []string{o.(*corev1.Event).Reason} }).
		Build()
}

// lease is the leader-election Lease of the default instance in
// namespace, held by holder ("" when released) and renewed at renewed.
func lease(namespace, holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: LeaderElectionID},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: ptr.To(metav1.NewMicroTime(renewed)),
		},
	}
}

func guardPolicy(breakerUsername, instance string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p, _ := admission.RenderPolicy(admission.Options{BreakerUsername: breakerUsername, Instance: instance, Managed: map[string][]string{testConf: {testHook}}})
	return p
}

func TestPolicyBreaker_readsTheIdentityRenderPolicyWrites(t *testing.T) {
	for _, identity := range []string{saMain, "alice@example.com", `o'brien "the admin" \ root`, "oidc:https://issuer.example/ü/√"} {
		t.Run(identity, func(t *testing.T) {
			got, ok := policyBreaker(guardPolicy(identity, ""))
			require.True(t, ok)
			assert.Equal(t, identity, got)
			// A policy written before the rule-inputs annotation: its
			// isBreaker variable.
			old := guardPolicy(identity, "")
			delete(old.Annotations, admission.PolicyInputsAnnotation)
			got, ok = policyBreaker(old)
			require.True(t, ok)
			assert.Equal(t, identity, got)
		})
	}
	_, ok := policyBreaker(&admissionregistrationv1.ValidatingAdmissionPolicy{})
	assert.False(t, ok, "a policy without the isBreaker variable names no breaker")
}

func TestInstallationLiveness_readsTheLease(t *testing.T) {
	for name, tc := range map[string]struct {
		identity string
		objs     []client.Object
		want     liveness
		says     string
	}{
		"a Lease renewed within its duration is alive": {saOther, []client.Object{lease("other", "pod-1_x", testClock.Add(-5*time.Second))}, alive, "held by pod-1_x"},
		"a released Lease is gone":                     {saOther, []client.Object{lease("other", "", testClock.Add(-5*time.Second))}, gone, "was released"},
		"an expired Lease is gone":                     {saOther, []client.Object{lease("other", "pod-1_x", testClock.Add(-time.Minute))}, gone, "expired at"},
		"no Lease is gone":                             {saOther, nil, gone, "holds no Lease other/" + LeaderElectionID},
		"a user has no Lease one can find":             {"alice@example.com", nil, unknown, "not a ServiceAccount"},
	} {
		t.Run(name, func(t *testing.T) {
			got, says := installationLiveness(context.Background(), fakeReader(tc.objs...), tc.identity, "", testClock)
			assert.Equal(t, tc.want, got)
			assert.Contains(t, says, tc.says)
		})
	}
}

func TestCheckPolicyOwner_refusesAnotherRunningOwner(t *testing.T) {
	mine := admission.Options{BreakerUsername: saMain}
	for name, tc := range map[string]struct {
		objs    []client.Object
		refused bool
	}{
		"no policy yet":                                 {nil, false},
		"its own policy":                                {[]client.Object{guardPolicy(saMain, "")}, false},
		"another identity that runs":                    {[]client.Object{guardPolicy(saOther, ""), lease("other", "pod-1_x", testClock)}, true},
		"another identity whose Lease was released":     {[]client.Object{guardPolicy(saOther, ""), lease("other", "", testClock)}, false},
		"another identity that holds no Lease":          {[]client.Object{guardPolicy(saOther, "")}, false},
		"another identity whose Lease cannot be found":  {[]client.Object{guardPolicy("alice@example.com", "")}, true},
		"another ServiceAccount of the same namespace":  {[]client.Object{guardPolicy("system:serviceaccount:main:old-name", ""), lease("main", "pod-1_x", testClock)}, false},
		"another identity's policy of another instance": {[]client.Object{guardPolicy(saOther, "canary"), lease("other", "pod-1_x", testClock)}, false},
	} {
		t.Run(name, func(t *testing.T) {
			err := checkPolicyOwner(context.Background(), fakeReader(tc.objs...), mine, testClock)
			if !tc.refused {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy webhook-guard belongs to another webhook-guard installation, ")
			assert.Contains(t, err.Error(), "instance: <name> in its configuration")
			assert.Contains(t, err.Error(), "kubectl delete validatingadmissionpolicy,validatingadmissionpolicybinding webhook-guard")
		})
	}
}

// eventLog is a recorder.EventRecorder that keeps what it is given.
type eventLog struct{ events []string }

func (l *eventLog) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, _ string, note string, args ...any) {
	l.events = append(l.events, eventtype+" "+reason+" "+fmt.Sprintf(note, args...))
}

func (l *eventLog) AnnotatedEventf(regarding runtime.Object, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	l.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func openConfiguration(t *testing.T, rec circuit.Record, annotations map[string]string) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	ann := maps.Clone(annotations)
	if rec != nil {
		var err error
		ann, err = circuit.Encode(ann, rec)
		require.NoError(t, err)
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: testConf, UID: "uid-1", Annotations: ann},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: testHook, FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://example.com")},
			SideEffects:  ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

func entry(by string) circuit.Entry {
	return circuit.Entry{UID: "uid-1", Mode: circuit.ModeIgnore, OpenedAt: metav1.NewTime(testClock.Add(-time.Hour)), OriginalFailurePolicy: ptr.To(admissionregistrationv1.Fail), By: by}
}

func TestTakeOverRetired_resignsOnlyWhatNoRunningBreakerOwns(t *testing.T) {
	cfg := &config.Configuration{Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: testConf, Webhook: testHook}}}
	mine := admission.Options{BreakerUsername: saMain, Instance: "blue", Managed: cfg.Managed(circuit.KindMutating)}
	for name, tc := range map[string]struct {
		objs     []client.Object
		takeOver bool
	}{
		"the default instance of the same ServiceAccount, stopped": {[]client.Object{lease("main", "", testClock)}, true},
		"the default instance of the same ServiceAccount, running": {[]client.Object{lease("main", "pod-1_x", testClock)}, false},
	} {
		t.Run(name, func(t *testing.T) {
			c := fakeReader(append(tc.objs, openConfiguration(t, circuit.Record{testHook: entry(saMain)}, nil))...)
			events := &eventLog{}
			require.NoError(t, takeOverRetired(context.Background(), c, events, cfg, mine, testClock))
			got := &admissionregistrationv1.MutatingWebhookConfiguration{}
			require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: testConf}, got))
			rec, err := circuit.Decode(got.Annotations)
			require.NoError(t, err)
			if !tc.takeOver {
				assert.Equal(t, saMain, rec[testHook].By)
				assert.Empty(t, events.events)
				return
			}
			assert.Equal(t, saMain+"/blue", rec[testHook].By)
			want := entry(saMain + "/blue")
			want.OpenedAt = rec[testHook].OpenedAt // as the record encodes it
			assert.Equal(t, want, rec[testHook], "only the signature changes")
			require.Len(t, events.events, 1)
			assert.Contains(t, events.events[0], "Normal CircuitTakenOver webhook-guard "+saMain+"/blue took over the open circuit on "+testHook+" from "+saMain+
				", which no longer runs (its Lease main/"+LeaderElectionID+" was released)")
		})
	}
}

func TestObjectRow_showsTheOwnerAndTheHandedOffOriginal(t *testing.T) {
	target := config.Target{Kind: circuit.KindMutating, Configuration: testConf, Webhook: testHook}
	override := map[string]string{circuit.OverrideAnnotation: "INC-7"}
	const original = "original failurePolicy Fail, mode Ignore, opened at 2026-12-01T11:00:00Z by " + saOther
	handedOff := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "default", Name: testConf + ".1", CreationTimestamp: metav1.NewTime(testClock)},
		InvolvedObject: corev1.ObjectReference{Kind: "MutatingWebhookConfiguration", Name: testConf, UID: "uid-1"},
		Reason:         string(breaker.HandedOff),
		Message:        "administrator override: webhook-guard released " + testHook + " (" + original + ") and keeps its hands off this configuration; …",
	}
	for name, tc := range map[string]struct {
		obj       client.Object
		events    []client.Object
		state     string
		owner     string
		originals string
	}{
		"an open circuit names its owner": {openConfiguration(t, circuit.Record{testHook: entry(saOther)}, nil), nil, "Open", saOther, ""},
		"a handed-off circuit the breaker has not released yet, from its entry": {
			openConfiguration(t, circuit.Record{testHook: entry(saOther)}, override), nil, "HandedOff", saOther, original},
		"a released one, from its HandedOff Event": {
			openConfiguration(t, nil, override), []client.Object{handedOff}, "HandedOff", "", original + " (HandedOff Event of 2026-12-01T12:00:00Z)"},
	} {
		t.Run(name, func(t *testing.T) {
			row := objectRow(context.Background(), fakeReader(append(tc.events, tc.obj)...), target)
			assert.Equal(t, tc.state, row.State)
			assert.Equal(t, tc.owner, row.Owner)
			assert.Equal(t, tc.originals, row.Original)
			if tc.originals != "" {
				assert.Contains(t, row.Problem, tc.originals, "the table prints it")
			}
		})
	}

	var out strings.Builder
	require.NoError(t, printStatus(&out, &strings.Builder{}, statusReport{Targets: []targetStatus{
		objectRow(context.Background(), fakeReader(openConfiguration(t, circuit.Record{testHook: entry(saOther)}, nil)), target),
	}}))
	assert.Contains(t, out.String(), "OWNER")
	assert.Contains(t, out.String(), saOther)
}

func TestRefuseClearWhileOpen(t *testing.T) {
	cfg := &config.Configuration{Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: testConf, Webhook: testHook}}}
	for name, tc := range map[string]struct {
		objs []client.Object
		want string
	}{
		"no configuration":             {nil, ""},
		"a closed circuit":             {[]client.Object{openConfiguration(t, nil, nil)}, ""},
		"another webhook's circuit":    {[]client.Object{openConfiguration(t, circuit.Record{"other.example.com": entry(saMain)}, nil)}, ""},
		"an open circuit, by anyone":   {[]client.Object{openConfiguration(t, circuit.Record{testHook: entry(saOther)}, nil)}, "webhook " + testHook + " (open since 2026-12-01T11:00:00Z)"},
		"a record that cannot be read": {[]client.Object{openConfiguration(t, nil, map[string]string{circuit.Annotation: "{"})}, "its circuit record cannot be read"},
	} {
		t.Run(name, func(t *testing.T) {
			err := refuseClearWhileOpen(context.Background(), fakeReader(tc.objs...), cfg)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "refused, nothing was changed")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
