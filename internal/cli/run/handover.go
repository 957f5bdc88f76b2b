package run

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
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
// probe and write. Nor while such a Lease was released or expired less
// than settle ago: a follower of that revision which the rollout has not
// stopped yet takes it at its next try, and would then lead beside this
// one. After the write that takes its Lease it looks once more (take);
// once it has taken its Lease it no longer looks.
//
// It gives way when every such Lease is missing, cannot be read, or was
// given up more than settle ago, so the wait lasts as long as the other
// revision's pods renew or take their Lease, plus settle; that revision's
// leader opens and closes circuits meanwhile. Expiry is judged by the
// other Lease's renewTime on this clock: a skewed clock shortens or
// lengthens the wait by the skew.
type handoverLock struct {
	resourcelock.Interface
	// lease is this guard's Lease; home is its ServiceAccount's
	// namespace, where its pods and their ReplicaSets are.
	lease client.ObjectKey
	home  string
	cs    kubernetes.Interface
	// settle is how long a Lease elsewhere that was given up still
	// counts (settleTime).
	settle time.Duration
	now    func() time.Time
	// taken is set once this lock has taken its Lease; waiting is set
	// while it waits, so that the wait is logged once; unlisted once the
	// ReplicaSets could not be listed, so that is logged once.
	taken, waiting, unlisted atomic.Bool
}

// settleTime is the handoverLock's settle for leader election that tries
// every retryPeriod: client-go's candidates try every retryPeriod to 2.2
// retryPeriods (its JitterFactor, 1.2), so three leave a follower of the
// other revision its next try and the request it makes.
func settleTime(retryPeriod time.Duration) time.Duration { return 3 * retryPeriod }

// newHandoverLock returns inner, the lock of the Lease lease, wrapped in a
// handoverLock that waits settle after another revision's Lease is given
// up, when identity is a ServiceAccount; else inner itself: a guard run by
// hand as a person has no namespace of its own, nor ReplicaSets. A Lease
// without a namespace is in the ServiceAccount's, as controller-runtime
// puts it in the pod's.
func newHandoverLock(inner resourcelock.Interface, cs kubernetes.Interface, identity string, lease client.ObjectKey, settle time.Duration) resourcelock.Interface {
	home, ok := startcheck.ServiceAccountNamespace(identity)
	if !ok {
		return inner
	}
	if lease.Namespace == "" {
		lease.Namespace = home
	}
	return &handoverLock{Interface: inner, lease: lease, home: home, cs: cs, settle: settle, now: time.Now}
}

// Create takes the Lease when it does not exist yet, unless a Lease of
// its name elsewhere blocks it.
func (l *handoverLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.take(ctx, ler, func() error { return l.Interface.Create(ctx, ler) })
}

// Update takes or renews the Lease; taking waits for the Leases of its
// name elsewhere.
func (l *handoverLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.take(ctx, ler, func() error { return l.Interface.Update(ctx, ler) })
}

// take writes ler with write, first checking, until it has taken its
// Lease, that no Lease elsewhere blocks it. After the write that takes
// its Lease it looks again: a guard of the other revision may have looked
// at this one's Lease at the same moment and taken its own. Of two guards
// that each write and then read, at least one reads after the other's
// write, so at least one of them finds the other's Lease held; that one
// gives its own back (as leader election releases it) and leads later.
func (l *handoverLock) take(ctx context.Context, ler resourcelock.LeaderElectionRecord, write func() error) error {
	if l.taken.Load() {
		return write()
	}
	if other, why, blocked := l.blockedBy(ctx, l.settle); blocked {
		if !l.waiting.Swap(true) {
			logf.FromContext(ctx).Info("Waiting to lead: another revision keeps a Lease of this name", "lease", other.String(), "state", why)
		}
		return fmt.Errorf("waiting to lead: Lease %s %s", other, why)
	}
	if err := write(); err != nil {
		return err
	}
	if other, why, blocked := l.blockedBy(ctx, 0); blocked {
		now := metav1.NewTime(l.now())
		release := resourcelock.LeaderElectionRecord{LeaderTransitions: ler.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now}
		if err := l.Interface.Update(ctx, release); err != nil {
			return fmt.Errorf("giving back Lease %s, as Lease %s was taken at the same moment: %w", l.lease, other, err)
		}
		return fmt.Errorf("waiting to lead: Lease %s %s; it was taken at the same moment as this one", other, why)
	}
	l.taken.Store(true)
	return nil
}

// blockedBy returns the first Lease of this lock's name elsewhere that
// keeps it from taking its own, with settle, and why (blocks).
func (l *handoverLock) blockedBy(ctx context.Context, settle time.Duration) (client.ObjectKey, string, bool) {
	for _, ns := range l.elsewhere(ctx) {
		key := client.ObjectKey{Namespace: ns, Name: l.lease.Name}
		lease, err := l.cs.CoordinationV1().Leases(ns).Get(ctx, key.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if why, blocks := l.blocks(lease, settle); blocks {
			return key, why, true
		}
	}
	return client.ObjectKey{}, "", false
}

// blocks says whether lease, of this lock's name elsewhere, keeps it from
// taking its own, and why: it is held and not expired, or it was released
// or expired less than settle ago. A Lease without a renewTime, or held
// without a duration, does not: leader election writes both.
func (l *handoverLock) blocks(lease *coordinationv1.Lease, settle time.Duration) (string, bool) {
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if lease.Spec.RenewTime == nil || holder != "" && lease.Spec.LeaseDurationSeconds == nil {
		return "", false
	}
	now, free := l.now(), lease.Spec.RenewTime.Time // released when it was last written
	if holder != "" {
		free = free.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
		if now.Before(free) {
			return fmt.Sprintf("is held by %s, the leader of another revision, until it is released or expires", holder), true
		}
	}
	if until := free.Add(settle); now.Before(until) {
		return fmt.Sprintf("was given up at %s; a follower of its revision may still take it until %s",
			free.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339)), true
	}
	return "", false
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
// newHandoverLock with settle. stop ends the recorder of leader
// election's "became leader" Event.
func newLeaseLock(rc *rest.Config, cs kubernetes.Interface, identity string, o leaderelection.Options, settle time.Duration) (lock resourcelock.Interface, stop func(), err error) {
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
	lock = newHandoverLock(lock, cs, identity, client.ObjectKey{Namespace: o.LeaderElectionNamespace, Name: o.LeaderElectionID}, settle)
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
