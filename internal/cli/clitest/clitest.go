// Package clitest holds the fixtures that the unit tests of the command
// packages share: a fake client with the Event field indexes, and webhook
// configurations carrying a circuit record. Only tests import it. The
// fake client serves narrow helpers; the e2e tests run the same paths
// against kube-apiserver.
package clitest

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
)

// Names the fixtures use.
const (
	// SAMain and SAOther are the breaker identities of two installations.
	SAMain  = "system:serviceaccount:main:webhook-guard"
	SAOther = "system:serviceaccount:other:webhook-guard"
	// Conf is the configuration OpenConfiguration returns, Hook its webhook.
	Conf = "pod-defaults"
	Hook = "a.pod-defaults.example.com"
)

// Clock is the tests' now.
var Clock = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// FakeReader is a fake client holding objs, with the field indexes on
// Events that "guard status" lists HandedOff Events by.
func FakeReader(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(factory.Scheme).WithObjects(objs...).
		WithIndex(&corev1.Event{}, "involvedObject.kind", func(o client.Object) []string { return []string{o.(*corev1.Event).InvolvedObject.Kind} }).
		WithIndex(&corev1.Event{}, "involvedObject.name", func(o client.Object) []string { return []string{o.(*corev1.Event).InvolvedObject.Name} }).
		WithIndex(&corev1.Event{}, "reason", func(o client.Object) []string { return []string{o.(*corev1.Event).Reason} }).
		Build()
}

// OpenConfiguration is the MutatingWebhookConfiguration Conf, UID uid-1,
// with webhook Hook, annotations and, when rec is not nil, rec encoded in
// them.
func OpenConfiguration(t *testing.T, rec circuit.Record, annotations map[string]string) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	ann := maps.Clone(annotations)
	if rec != nil {
		var err error
		ann, err = circuit.Encode(ann, rec)
		require.NoError(t, err)
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: Conf, UID: "uid-1", Annotations: ann},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: Hook, FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://example.com")},
			SideEffects:  ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// Entry is an open circuit's entry on OpenConfiguration, signed by by and
// opened an hour before Clock.
func Entry(by string) circuit.Entry {
	return circuit.Entry{UID: "uid-1", Mode: circuit.ModeIgnore, OpenedAt: metav1.NewTime(Clock.Add(-time.Hour)), OriginalFailurePolicy: ptr.To(admissionregistrationv1.Fail), By: by}
}
