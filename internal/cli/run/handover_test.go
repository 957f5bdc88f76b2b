package run

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
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
// asked for.
type writesLock struct {
	resourcelock.Interface
	creates, updates int
}

func (l *writesLock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	l.creates++
	return nil
}

func (l *writesLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	l.updates++
	return nil
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
			l := &handoverLock{Interface: inner, legacy: client.ObjectKey{Namespace: "guard", Name: "webhook-guard.webhook-guard.io"},
				leases: fake.NewClientset(tc.legacy...).CoordinationV1(), now: func() time.Time { return handoverNow }}
			errCreate := l.Create(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "new-pod_2"})
			errUpdate := l.Update(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: "new-pod_2"})
			if tc.waits {
				assert.ErrorContains(t, errCreate, "waiting to lead: Lease guard/webhook-guard.webhook-guard.io is held by old-pod_1, the leader of an earlier release")
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
	l := &handoverLock{Interface: inner, legacy: client.ObjectKey{Namespace: "guard", Name: "l"}, leases: cs.CoordinationV1(), now: func() time.Time { return handoverNow }}
	require.NoError(t, l.Create(t.Context(), resourcelock.LeaderElectionRecord{}))
	require.Equal(t, 1, gets)
	// An earlier release's leader appears (a rollback): this one leads
	// already and keeps its Lease.
	_, err := cs.CoordinationV1().Leases("guard").Create(t.Context(), legacyLease("old-pod_1", handoverNow), metav1.CreateOptions{})
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, l.Update(t.Context(), resourcelock.LeaderElectionRecord{}))
	}
	assert.Equal(t, 1, gets, "a renewal read the legacy Lease")
	assert.Equal(t, 3, inner.updates)
}

func TestNewLeaseLock_waitsOnlyWhenTheLeaseMoved(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	opts := leaderelection.Options{LeaderElection: true, LeaderElectionNamespace: "kube-system", LeaderElectionID: "webhook-guard.webhook-guard.io", RenewDeadline: 10 * time.Second}
	lock, stop, err := newLeaseLock(rc, fake.NewClientset(), "system:serviceaccount:guard:webhook-guard", opts)
	require.NoError(t, err)
	defer stop()
	h, ok := lock.(*handoverLock)
	require.True(t, ok, "a Lease in kube-system for a guard in namespace guard")
	assert.Equal(t, client.ObjectKey{Namespace: "guard", Name: "webhook-guard.webhook-guard.io"}, h.legacy)
	assert.Equal(t, "kube-system/webhook-guard.webhook-guard.io", lock.Describe())

	opts.LeaderElectionNamespace = "guard"
	lock, stop2, err := newLeaseLock(rc, fake.NewClientset(), "system:serviceaccount:guard:webhook-guard", opts)
	require.NoError(t, err)
	defer stop2()
	_, ok = lock.(*handoverLock)
	assert.False(t, ok, "the Lease where earlier releases kept it: nothing to wait for")

	opts.LeaderElectionNamespace = "kube-system"
	lock, stop3, err := newLeaseLock(rc, fake.NewClientset(), "alice@example.com", opts)
	require.NoError(t, err)
	defer stop3()
	_, ok = lock.(*handoverLock)
	assert.False(t, ok, "not a ServiceAccount: no namespace of its own")
}
