package run

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
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

// handoverLock is the leader-election lock of a guard whose Lease is not
// in its ServiceAccount's namespace (the shipped manifests keep it in
// kube-system; earlier releases kept it in the guard's namespace). It does
// not take its Lease while the Lease of the same name in the
// ServiceAccount's namespace (legacy) is held and not expired: during a
// rollout from such a release the old leader still leads, and two leaders
// would both probe and write. Once it has taken its Lease it no longer
// looks.
//
// It gives way at once when the legacy Lease is missing, released,
// expired, or cannot be read, so the wait lasts only as long as an earlier
// release's leader renews, and that leader opens and closes circuits
// meanwhile. Expiry is judged by the legacy Lease's renewTime on this
// clock: a skewed clock shortens or lengthens the wait by the skew.
type handoverLock struct {
	resourcelock.Interface
	legacy client.ObjectKey
	leases coordinationv1client.LeasesGetter
	now    func() time.Time
	// taken is set once this lock has taken its Lease; waiting is set
	// while it waits, so that the wait is logged once.
	taken, waiting atomic.Bool
}

// newHandoverLock returns inner, the lock of the Lease lease, wrapped in a
// handoverLock when identity is a ServiceAccount whose namespace is not
// the Lease's; else inner itself.
func newHandoverLock(inner resourcelock.Interface, cs kubernetes.Interface, identity string, lease client.ObjectKey) resourcelock.Interface {
	ns, ok := startcheck.ServiceAccountNamespace(identity)
	if !ok || ns == lease.Namespace {
		return inner
	}
	return &handoverLock{Interface: inner, legacy: client.ObjectKey{Namespace: ns, Name: lease.Name}, leases: cs.CoordinationV1(), now: time.Now}
}

// Create takes the Lease when it does not exist yet, unless the legacy
// Lease is still held.
func (l *handoverLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.take(ctx, func() error { return l.Interface.Create(ctx, ler) })
}

// Update takes or renews the Lease; taking waits for the legacy Lease.
func (l *handoverLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.take(ctx, func() error { return l.Interface.Update(ctx, ler) })
}

func (l *handoverLock) take(ctx context.Context, write func() error) error {
	if !l.taken.Load() {
		if holder, held := l.legacyHolder(ctx); held {
			if !l.waiting.Swap(true) {
				logf.FromContext(ctx).Info("Waiting to lead: an earlier release's leader still holds its Lease", "lease", l.legacy.String(), "holder", holder)
			}
			return fmt.Errorf("waiting to lead: Lease %s is held by %s, the leader of an earlier release, until it is released or expires", l.legacy, holder)
		}
	}
	if err := write(); err != nil {
		return err
	}
	l.taken.Store(true)
	return nil
}

// legacyHolder returns the holder of the legacy Lease and whether it still
// holds it.
func (l *handoverLock) legacyHolder(ctx context.Context) (string, bool) {
	lease, err := l.leases.Leases(l.legacy.Namespace).Get(ctx, l.legacy.Name, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder == "" || lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return holder, false
	}
	expires := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	return holder, l.now().Before(expires)
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
