package run

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/cli/startcheck"
)

// handoverLock is the leader-election lock of a guard that runs as a
// ServiceAccount. Before it first leads, it does not take its Lease while
// a Lease of the same name in another namespace where a rollout can have
// left it (elsewhere) is held and not expired: a rollout that moves the
// Lease (an upgrade from a release before the move to kube-system, a
// rollback, a changed leaseNamespace) runs the pods of both revisions for
// a while, each revision on its own Lease, and two leaders would both
// probe and write. Once it has taken its Lease it no longer looks.
//
// It gives way at once when every such Lease is missing, released,
// expired, or cannot be read, so the wait lasts only as long as the other
// revision's leader renews, and that leader opens and closes circuits
// meanwhile. Expiry is judged by the other Lease's renewTime on this
// clock: a skewed clock shortens or lengthens the wait by the skew.
type handoverLock struct {
	resourcelock.Interface
	// lease is this guard's Lease; home is its ServiceAccount's
	// namespace, where its pods and their ReplicaSets are.
	lease client.ObjectKey
	home  string
	cs    kubernetes.Interface
	now   func() time.Time
	// taken is set once this lock has taken its Lease; waiting is set
	// while it waits, so that the wait is logged once; unlisted once the
	// ReplicaSets could not be listed, so that is logged once.
	taken, waiting, unlisted atomic.Bool
}

// newHandoverLock returns inner, the lock of the Lease lease, wrapped in a
// handoverLock when identity is a ServiceAccount; else inner itself: a
// guard run by hand as a person has no namespace of its own, nor
// ReplicaSets. A Lease without a namespace is in the ServiceAccount's, as
// controller-runtime puts it in the pod's.
func newHandoverLock(inner resourcelock.Interface, cs kubernetes.Interface, identity string, lease client.ObjectKey) resourcelock.Interface {
	home, ok := startcheck.ServiceAccountNamespace(identity)
	if !ok {
		return inner
	}
	if lease.Namespace == "" {
		lease.Namespace = home
	}
	return &handoverLock{Interface: inner, lease: lease, home: home, cs: cs, now: time.Now}
}

// Create takes the Lease when it does not exist yet, unless a Lease of
// its name elsewhere is held.
func (l *handoverLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.take(ctx, func() error { return l.Interface.Create(ctx, ler) })
}

// Update takes or renews the Lease; taking waits for the Leases of its
// name elsewhere.
func (l *handoverLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.take(ctx, func() error { return l.Interface.Update(ctx, ler) })
}

func (l *handoverLock) take(ctx context.Context, write func() error) error {
	if !l.taken.Load() {
		if other, holder, held := l.heldElsewhere(ctx); held {
			if !l.waiting.Swap(true) {
				logf.FromContext(ctx).Info("Waiting to lead: another revision's leader holds a Lease of this name", "lease", other.String(), "holder", holder)
			}
			return fmt.Errorf("waiting to lead: Lease %s is held by %s, the leader of another revision, until it is released or expires", other, holder)
		}
	}
	if err := write(); err != nil {
		return err
	}
	l.taken.Store(true)
	return nil
}

// heldElsewhere returns the first Lease of this lock's name elsewhere that
// is held and not expired, and its holder.
func (l *handoverLock) heldElsewhere(ctx context.Context) (client.ObjectKey, string, bool) {
	for _, ns := range l.elsewhere(ctx) {
		key := client.ObjectKey{Namespace: ns, Name: l.lease.Name}
		lease, err := l.cs.CoordinationV1().Leases(ns).Get(ctx, key.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		if holder == "" || lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
			continue
		}
		expires := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
		if l.now().Before(expires) {
			return key, holder, true
		}
	}
	return client.ObjectKey{}, "", false
}

// elsewhere returns the namespaces, other than its own Lease's, where a
// rollout can have left a Lease of this lock's name: its ServiceAccount's
// namespace (releases before the move to kube-system, and the chart's
// leaseNamespace ""), kube-system (the shipped manifests), and the
// --leader-election-namespace of every ReplicaSet's pods in its
// ServiceAccount's namespace. A Deployment keeps the ReplicaSet of each
// recent revision, and the one of the revision a rollout replaces until
// its pods are gone, so a custom leaseNamespace on either side of an
// upgrade or a rollback is found there. When the ReplicaSets cannot be
// listed it says so once and looks in the first two.
func (l *handoverLock) elsewhere(ctx context.Context) []string {
	namespaces := []string{l.home, metav1.NamespaceSystem}
	sets, err := l.cs.AppsV1().ReplicaSets(l.home).List(ctx, metav1.ListOptions{})
	switch {
	case err != nil:
		if !l.unlisted.Swap(true) {
			logf.FromContext(ctx).Info("Cannot list the ReplicaSets in its namespace: before it leads, it waits only for a Lease of its name there and in kube-system",
				"namespace", l.home, "error", err.Error())
		}
	default:
		for _, rs := range sets.Items {
			if ns, ok := factory.LeaseNamespaceOfTemplate(rs.Namespace, &rs.Spec.Template); ok {
				namespaces = append(namespaces, ns)
			}
		}
	}
	slices.Sort(namespaces)
	return slices.DeleteFunc(slices.Compact(namespaces), func(ns string) bool { return ns == l.lease.Namespace })
}

// newLeaseLock builds the leader-election lock controller-runtime would
// build (on rc, the Lease's own connection: leaseConfig), wrapped by
// newHandoverLock. stop ends the recorder of leader election's "became leader"
// Event.
func newLeaseLock(rc *rest.Config, cs kubernetes.Interface, identity string, o leaderelection.Options) (lock resourcelock.Interface, stop func(), err error) {
	events, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.Events("")})
	lock, err = leaderelection.NewResourceLock(rc, leaseEvents{broadcaster}, o)
	if err != nil {
		broadcaster.Shutdown()
		return nil, nil, err
	}
	lock = newHandoverLock(lock, cs, identity, client.ObjectKey{Namespace: o.LeaderElectionNamespace, Name: o.LeaderElectionID})
	return lock, broadcaster.Shutdown, nil
}

// leaseEvents records leader election's core/v1 Events, as
// controller-runtime's manager does for the lock it builds.
type leaseEvents struct{ broadcaster record.EventBroadcaster }

func (p leaseEvents) GetEventRecorderFor(name string) record.EventRecorder {
	return p.broadcaster.NewRecorder(factory.Scheme, corev1.EventSource{Component: name})
}

// GetEventRecorder is not used by leader election.
func (p leaseEvents) GetEventRecorder(string) recorder.EventRecorder { return nil }
