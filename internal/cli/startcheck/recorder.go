package startcheck

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/reference"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
)

// startRecorder records Events synchronously, for the start checks: they
// run before the manager, whose recorder sends Events in the background.
// It implements controller-runtime's recorder.EventRecorder. Like every
// recorder it does not fail its caller: an Event it cannot write is
// logged.
type startRecorder struct {
	events   eventsv1client.EventsV1Interface
	instance string
	log      logr.Logger
}

var _ recorder.EventRecorder = (*startRecorder)(nil)

// eventTimeout bounds the write of one Event.
const eventTimeout = 10 * time.Second

func newStartRecorder(cs kubernetes.Interface, log logr.Logger) *startRecorder {
	hostname, _ := os.Hostname()
	return &startRecorder{events: cs.EventsV1(), instance: "webhook-guard-" + hostname, log: log}
}

// Eventf records an Event about regarding, as events.EventRecorder.
func (r *startRecorder) Eventf(regarding runtime.Object, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.record(regarding, nil, eventtype, reason, action, fmt.Sprintf(note, args...))
}

// AnnotatedEventf is Eventf with annotations on the Event.
func (r *startRecorder) AnnotatedEventf(regarding runtime.Object, _ runtime.Object, annotations map[string]string, eventtype, reason, action, note string, args ...any) {
	r.record(regarding, annotations, eventtype, reason, action, fmt.Sprintf(note, args...))
}

func (r *startRecorder) record(regarding runtime.Object, annotations map[string]string, eventtype, reason, action, note string) {
	ref, err := reference.GetReference(factory.Scheme, regarding)
	if err != nil {
		r.log.Info("Event not recorded", "reason", reason, "error", err.Error())
		return
	}
	ns := ref.Namespace
	if ns == "" {
		ns = circuit.EventsNamespace // as the service's recorder puts Events about cluster-scoped objects
	}
	now := time.Now()
	ev := &eventsv1.Event{
		// Named as client-go's recorders name Events.
		// An events.k8s.io Event, as the manager's are: outside the
		// marking policies.
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()), Namespace: ns, Annotations: annotations},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: circuit.ReportingController,
		ReportingInstance:   r.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Note:                note,
		Type:                eventtype,
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventTimeout)
	defer cancel()
	if _, err := r.events.Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		r.log.Info("Event not recorded", "reason", reason, "error", err.Error())
	}
}
