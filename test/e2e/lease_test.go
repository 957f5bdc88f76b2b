package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/status"
)

// An upgrade from a release that kept its Lease in the guard's namespace
// to one that keeps it in kube-system (issue 31) is a rollout in which
// both run for a while, each on its own Lease. The new guard does not lead
// while the earlier release's leader holds the Lease in the guard's
// namespace: two leaders would both probe and write. It leads once that
// one stops and releases its Lease.
func TestLease_anUpgradeLeadsOnlyAfterTheEarlierReleasesLeaderStops(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	instance := "handover-" + strings.TrimPrefix(s.name, "breaker-")
	grantInstancePolicy(t, s, instance)
	cfg := s.config("instance: " + instance + "\n")
	name := status.LeaseName(instance)
	timings := []string{"--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms"}
	holder := func(namespace string) string {
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, l); err != nil {
			require.True(t, apierrors.IsNotFound(err), "%v", err)
			return ""
		}
		return ptr.Deref(l.Spec.HolderIdentity, "")
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name}})
	})

	earlier := s.startGuardWith("earlier-release", cfg, timings...)
	var earlierHolder string
	require.Eventually(t, func() bool { earlierHolder = holder(s.ns); return earlierHolder != "" }, transition, 50*time.Millisecond,
		"the earlier release never took its Lease in %s", s.ns)

	this := s.startGuardWith("this-release", cfg, append(timings, "--leader-election-namespace", metav1.NamespaceSystem)...)
	require.Eventually(t, func() bool {
		return strings.Contains(this.Logs(), "Waiting to lead: another revision's leader holds a Lease of this name")
	}, transition, 50*time.Millisecond, "this release never tried to take its Lease, or took it")
	assert.Empty(t, holder(metav1.NamespaceSystem), "this release took its Lease while the earlier release's leader led")
	assert.Equal(t, earlierHolder, holder(s.ns), "the earlier release's leader lost its Lease")
	assert.Contains(t, this.Logs(), s.ns+"/"+name)

	earlier.Stop()
	var thisHolder string
	require.Eventually(t, func() bool { thisHolder = holder(metav1.NamespaceSystem); return thisHolder != "" }, transition, 50*time.Millisecond,
		"this release never led after the earlier release's leader stopped")
	assert.NotEqual(t, earlierHolder, thisHolder)
	assert.Empty(t, holder(s.ns), "the earlier release's Lease was not released")
	exited, _ := this.Exited()
	assert.False(t, exited, "this release exited")
}
