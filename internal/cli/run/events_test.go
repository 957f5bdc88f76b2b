package run

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// namespaces records the namespace of each Event it is asked to write.
type namespaces struct{ creates, updates, patches []string }

func (n *namespaces) Create(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	n.creates = append(n.creates, ev.Namespace)
	return ev, nil
}

func (n *namespaces) Update(_ context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	n.updates = append(n.updates, ev.Namespace)
	return ev, nil
}

func (n *namespaces) Patch(_ context.Context, ev *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	n.patches = append(n.patches, ev.Namespace)
	return ev, nil
}

var _ events.EventSink = clusterEventsSink{}

func TestClusterEventsSink_putsEventsAboutClusterScopedObjectsInKubeSystem(t *testing.T) {
	rec := &namespaces{}
	sink := clusterEventsSink{rec}
	// What client-go's recorder makes of an Event about a webhook
	// configuration: namespace default.
	cluster := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "slow.1"},
		Regarding: corev1.ObjectReference{Kind: "MutatingWebhookConfiguration", Name: "slow"}}
	namespaced := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "cm.1"},
		Regarding: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "team", Name: "cm"}}
	for _, ev := range []*eventsv1.Event{cluster, namespaced} {
		_, err := sink.Create(t.Context(), ev)
		require.NoError(t, err)
		_, err = sink.Update(t.Context(), ev)
		require.NoError(t, err)
		_, err = sink.Patch(t.Context(), ev, nil)
		require.NoError(t, err)
	}
	want := []string{circuit.EventsNamespace, "team"}
	assert.Equal(t, want, rec.creates)
	assert.Equal(t, want, rec.updates)
	assert.Equal(t, want, rec.patches, "a series' patch goes where its Event was created")
	assert.Equal(t, metav1.NamespaceDefault, cluster.Namespace, "the recorder's own Event is not changed under it")
}
