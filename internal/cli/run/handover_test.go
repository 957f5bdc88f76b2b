package run

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/leaderelection"
)

// writesLock is a resourcelock.Interface that counts the writes it is
// asked for, keeps the last record written, and calls written (when set)
// after each.
type writesLock struct {
	resourcelock.Interface
	creates, updates int
	last             resourcelock.LeaderElectionRecord
	written          func()
}

func (l *writesLock) Create(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.creates++
	l.wrote(ler)
	return nil
}

func (l *writesLock) Update(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.updates++
	l.wrote(ler)
	return nil
}

func (l *writesLock) wrote(ler resourcelock.LeaderElectionRecord) {
	l.last = ler
	if l.written != nil {
		l.written()
	}
}

var handoverNow = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func legacyLease(holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "guard", Name: "webhook-guard.webhook-guard.io"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: ptr.To(metav1.NewMicroTime(renewed)),
		},
	}
}

func TestHandoverLock_waitsForAnEarlierReleasesLeader(t *testing.T) {
	for name, tc := range map[string]struct {
		legacy []runtime.Object
		waits  bool
	}{
		"held and renewed 5 s ago: it waits":        {[]runtime.Object{legacyLease("old-pod_1", handoverNow.Add(-5*time.Second))}, true},
		"expired 45 s ago: it takes its own":        {[]runtime.Object{legacyLease("old-pod_1", handoverNow.Add(-time.Minute))}, false},
		"released (no holder): it takes its own":    {[]runtime.Object{legacyLease("", handoverNow.Add(-5*time.Second))}, false},
		"no legacy Lease (a new install): it takes": {nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			inner := &writesLock{}
			l := &handoverLock{Interface: inner, lease: client.ObjectKey{Namespace: "kube-system", Name: "webhook-guard.webhook-guard.io"}, home: "guard",
				cs: fake.NewClientset(tc.legacy...), now: func() time.Time { return handoverNow }}
			errCreate := l.Create(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "new-pod_2"})
			errUpdate := l.Update(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "new-pod_2"})
			if tc.waits {
				assert.ErrorContains(t, errCreate, "waiting to lead: Lease guard/webhook-guard.webhook-guard.io is held by old-pod_1, the leader of another revision")
				assert.Error(t, errUpdate)
				assert.Zero(t, inner.creates+inner.updates, "it wrote its Lease while the earlier leader leads")
				return
			}
			require.NoError(t, errCreate)
			require.NoError(t, errUpdate)
			assert.Equal(t, 1, inner.creates)
			assert.Equal(t, 1, inner.updates)
		})
	}
}

// Once it has taken its Lease, a renewal never waits on the legacy one, and
// reads nothing: a renewal must not wait on the apiserver more than it must.
func TestHandoverLock_renewsWithoutLooking(t *testing.T) {
	cs := fake.NewClientset()
	gets := 0
	cs.PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	inner := &writesLock{}
	l := &handoverLock{Interface: inner, lease: client.ObjectKey{Namespace: "kube-system", Name: "webhook-guard.webhook-guard.io"}, home: "guard", cs: cs, now: func() time.Time { return handoverNow }}
	require.NoError(t, l.Create(t.Context(), resourcelock.LeaderElectionRecord{}))
	require.NotZero(t, gets)
	taking := gets
	// An earlier release's leader appears (a rollback): this one leads
	// already and keeps its Lease.
	_, err := cs.CoordinationV1().Leases("guard").Create(t.Context(), legacyLease("old-pod_1", handoverNow), metav1.CreateOptions{})
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, l.Update(t.Context(), resourcelock.LeaderElectionRecord{}))
	}
	assert.Equal(t, taking, gets, "a renewal read the legacy Lease")
	assert.Equal(t, 3, inner.updates)
}

func TestNewLeaseLock_waitsWhereverTheLeaseIs(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	opts := leaderelection.Options{LeaderElection: true, LeaderElectionNamespace: "kube-system", LeaderElectionID: "webhook-guard.webhook-guard.io", RenewDeadline: 10 * time.Second}
	lock, stop, err := newLeaseLock(rc, fake.NewClientset(), "system:serviceaccount:guard:webhook-guard", opts, 6*time.Second)
	require.NoError(t, err)
	defer stop()
	h, ok := lock.(*handoverLock)
	require.True(t, ok, "a Lease in kube-system for a guard in namespace guard")
	assert.Equal(t, client.ObjectKey{Namespace: "kube-system", Name: "webhook-guard.webhook-guard.io"}, h.lease)
	assert.Equal(t, "guard", h.home)
	assert.Equal(t, "kube-system/webhook-guard.webhook-guard.io", lock.Describe())

	opts.LeaderElectionNamespace = "guard"
	lock, stop2, err := newLeaseLock(rc, fake.NewClientset(), "system:serviceaccount:guard:webhook-guard", opts, 6*time.Second)
	require.NoError(t, err)
	defer stop2()
	_, ok = lock.(*handoverLock)
	assert.True(t, ok, "the Lease in the guard's namespace: a rollback from kube-system waits too")

	opts.LeaderElectionNamespace = "kube-system"
	lock, stop3, err := newLeaseLock(rc, fake.NewClientset(), "alice@example.com", opts, 6*time.Second)
	require.NoError(t, err)
	defer stop3()
	_, ok = lock.(*handoverLock)
	assert.False(t, ok, "not a ServiceAccount: no namespace of its own")
}

// leaseIn is the Lease of the default instance in namespace ns, held by
// holder (none: "") and renewed at renewed, for 15 s.
func leaseIn(ns, holder string, renewed time.Time) *coordinationv1.Lease {
	l := legacyLease(holder, renewed)
	l.Namespace = ns
	return l
}

// guardReplicaSet is a ReplicaSet in ns whose pods run the guard with
// their Lease in leaseNamespace, as a Deployment's rollout leaves one for
// each revision.
func guardReplicaSet(ns, name, leaseNamespace string) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "manager", Args: []string{"run", "--leader-elect", "--leader-election-namespace=" + leaseNamespace},
		}}}}},
	}
}

// Every move of the Lease between two namespaces that a rollout (an
// upgrade, a rollback, a changed leaseNamespace) can make: the guard of
// the new revision does not take its Lease while the other revision's
// leader holds the other one. Its ServiceAccount is in namespace guard.
func TestHandoverLock_waitsWhicheverWayTheLeaseMoves(t *testing.T) {
	const sa = "system:serviceaccount:guard:webhook-guard"
	held := handoverNow.Add(-5 * time.Second)
	for name, tc := range map[string]struct {
		own   string // this guard's Lease namespace
		objs  []runtime.Object
		waits bool
	}{
		"from the guard's namespace to kube-system (an upgrade from a release before the move)": {
			"kube-system", []runtime.Object{leaseIn("guard", "old-pod_1", held)}, true},
		"from kube-system back to the guard's namespace (a rollback, or leaseNamespace \"\")": {
			"guard", []runtime.Object{leaseIn("kube-system", "old-pod_1", held)}, true},
		"from kube-system to a custom namespace": {
			"leases", []runtime.Object{leaseIn("kube-system", "old-pod_1", held)}, true},
		"from a custom namespace to kube-system, named by the earlier revision's ReplicaSet": {
			"kube-system", []runtime.Object{leaseIn("leases", "old-pod_1", held),
				guardReplicaSet("guard", "webhook-guard-1", "leases"), guardReplicaSet("guard", "webhook-guard-2", "kube-system")}, true},
		"from a custom namespace to the guard's namespace": {
			"guard", []runtime.Object{leaseIn("leases", "old-pod_1", held), guardReplicaSet("guard", "webhook-guard-1", "leases")}, true},
		"from one custom namespace to another": {
			"leases-b", []runtime.Object{leaseIn("leases-a", "old-pod_1", held), guardReplicaSet("guard", "webhook-guard-1", "leases-a")}, true},
		"its own Lease held by a peer is leader election's to judge, not the handover's": {
			"kube-system", []runtime.Object{leaseIn("kube-system", "peer-pod_1", held)}, false},
		"a Lease of its name elsewhere that is released": {
			"guard", []runtime.Object{leaseIn("kube-system", "", handoverNow.Add(-time.Hour))}, false},
	} {
		t.Run(name, func(t *testing.T) {
			inner := &writesLock{}
			l := newHandoverLock(inner, fake.NewClientset(tc.objs...), sa, client.ObjectKey{Namespace: tc.own, Name: "webhook-guard.webhook-guard.io"}, 6*time.Second)
			if h, ok := l.(*handoverLock); ok {
				h.now = func() time.Time { return handoverNow }
			}
			err := l.Create(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "new-pod_2"})
			if tc.waits {
				assert.ErrorContains(t, err, "waiting to lead")
				assert.Zero(t, inner.creates, "it took its Lease while the other revision's leader leads")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 1, inner.creates)
		})
	}
}

// The limit: a Lease of its name in a namespace that is neither its
// ServiceAccount's, nor kube-system, nor named by a ReplicaSet in its
// namespace is not looked at. A guard whose pods no ReplicaSet there
// describes (started by hand) can therefore lead beside a leader in such
// a namespace; so can one whose token may not list the ReplicaSets, which
// still looks in the other two.
func TestHandoverLock_looksOnlyWhereARolloutCanHaveLeftTheLease(t *testing.T) {
	const sa = "system:serviceaccount:guard:webhook-guard"
	held := handoverNow.Add(-5 * time.Second)
	own := client.ObjectKey{Namespace: "kube-system", Name: "webhook-guard.webhook-guard.io"}

	inner := &writesLock{}
	l := newHandoverLock(inner, fake.NewClientset(leaseIn("leases", "other-pod_1", held)), sa, own, 6*time.Second)
	require.NoError(t, l.Create(t.Context(), resourcelock.LeaderElectionRecord{}), "no ReplicaSet names namespace leases")

	cs := fake.NewClientset(leaseIn("guard", "old-pod_1", held), leaseIn("leases", "old-pod_1", held), guardReplicaSet("guard", "webhook-guard-1", "leases"))
	cs.PrependReactor("list", "replicasets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(appsv1.Resource("replicasets"), "", errors.New("no RBAC"))
	})
	inner = &writesLock{}
	l = newHandoverLock(inner, cs, sa, own, 6*time.Second)
	l.(*handoverLock).now = func() time.Time { return handoverNow }
	assert.ErrorContains(t, l.Create(t.Context(), resourcelock.LeaderElectionRecord{}), "Lease guard/webhook-guard.webhook-guard.io is held by old-pod_1",
		"the ReplicaSets cannot be listed: it still looks in its ServiceAccount's namespace")
	assert.Zero(t, inner.creates)
}

// A Lease elsewhere that its leader released, or let expire, a moment ago
// may be taken by another pod of that revision at its next try (a
// follower of the old release, while the rollout has not stopped it yet):
// the guard waits settle for that before it leads beside it.
func TestHandoverLock_waitsForAFollowerOfTheOtherRevision(t *testing.T) {
	for name, tc := range map[string]struct {
		lease *coordinationv1.Lease
		waits bool
	}{
		"released 1 s ago: a follower may still take it":          {leaseIn("guard", "", handoverNow.Add(-time.Second)), true},
		"expired 2 s ago: a follower may still take it":           {leaseIn("guard", "old-pod_1", handoverNow.Add(-17*time.Second)), true},
		"released 7 s ago: no follower took it, it takes its own": {leaseIn("guard", "", handoverNow.Add(-7*time.Second)), false},
		"expired 7 s ago: no follower took it, it takes its own":  {leaseIn("guard", "old-pod_1", handoverNow.Add(-22*time.Second)), false},
	} {
		t.Run(name, func(t *testing.T) {
			inner := &writesLock{}
			l := &handoverLock{Interface: inner, lease: client.ObjectKey{Namespace: "kube-system", Name: "webhook-guard.webhook-guard.io"}, home: "guard",
				cs: fake.NewClientset(tc.lease), now: func() time.Time { return handoverNow }}
			l.settle = 6 * time.Second
			err := l.Create(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "new-pod_2"})
			if tc.waits {
				assert.ErrorContains(t, err, "waiting to lead: Lease guard/webhook-guard.webhook-guard.io")
				assert.Zero(t, inner.creates, "it took its Lease while a follower of the other revision could take the other")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 1, inner.creates)
		})
	}
}

// Two guards of two revisions may each look at the other's Lease at the
// same moment, find it free, and take their own. Each looks again after
// its write; of two such reads, at least one follows the other guard's
// write, and that guard gives its Lease back before it leads.
func TestHandoverLock_givesItsLeaseBackWhenTheOtherRevisionTookItsAtTheSameMoment(t *testing.T) {
	cs := fake.NewClientset()
	inner := &writesLock{}
	inner.written = func() {
		inner.written = nil
		_, err := cs.CoordinationV1().Leases("guard").Create(t.Context(), leaseIn("guard", "old-pod_2", handoverNow), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	l := &handoverLock{Interface: inner, lease: client.ObjectKey{Namespace: "kube-system", Name: "webhook-guard.webhook-guard.io"}, home: "guard",
		cs: cs, settle: 6 * time.Second, now: func() time.Time { return handoverNow }}
	err := l.Create(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "new-pod_1", LeaderTransitions: 3})
	assert.ErrorContains(t, err, "waiting to lead: Lease guard/webhook-guard.webhook-guard.io is held by old-pod_2")
	assert.Equal(t, 1, inner.creates)
	require.Equal(t, 1, inner.updates, "it did not give its Lease back")
	assert.Empty(t, inner.last.HolderIdentity, "it gave its Lease back with a holder")
	assert.Equal(t, 3, inner.last.LeaderTransitions)
	assert.Equal(t, 1, inner.last.LeaseDurationSeconds)
	assert.False(t, l.taken.Load())

	// The other one leads; this one keeps waiting without writing.
	assert.Error(t, l.Update(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "new-pod_1"}))
	assert.Equal(t, 1, inner.updates)
}
