package partition

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// TestPartition_aCutOfOneServiceAmongManyIsProbedFirst: 40 service-backed
// webhooks, each behind its own Service, so at PathProbesPerSecond the
// road schedule comes back to each road every 20 s. One road is cut just
// after its probe, while requests call its webhook. kube-apiserver's own
// calls fail, the next read of its /metrics says so, and that road is
// probed next instead of in 20 s: the circuit opens within a few
// intervals of that read.
func TestPartition_aCutOfOneServiceAmongManyIsProbedFirst(t *testing.T) {
	const roads = 40
	ctx := context.Background()
	w := newWorld(t)
	w.withRoad()
	worlds := []*world{w}
	var services []config.Service
	for range roads - 1 {
		d := newWorld(t)
		d.wh.SetBehaviour(probePath, harness.Allow())
		d.podAddr = d.serviceProxyBackend()
		worlds = append(worlds, d)
		services = append(services, d.service())
	}
	// One guard, w's ServiceAccount, for every world's target and road.
	var names []string
	for _, x := range worlds {
		names = append(names, x.name)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "guard-many-" + w.ns}}
	for _, r := range harness.GuardRules(names) {
		role.Rules = append(role.Rules, r)
	}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Bind(ctx, role.Name, role.Name, w.ns, "webhook-guard"))
	require.NoError(t, env.GrantPathProbe(ctx, w.id, services...))
	for _, d := range worlds[1:] {
		require.Eventually(t, func() bool {
			body, err := d.serviceProxyGet(serviceProxyHang)
			return err == nil && body == "ok"
		}, transition, 50*time.Millisecond, "the service proxy never reached %s's webhook", d.name)
	}

	var b strings.Builder
	b.WriteString("apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\napiserverScrapeInterval: 1s\ntargets:\n")
	for _, x := range worlds {
		fmt.Fprintf(&b, `- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  mode: Bypass
  openAfter: 3
  probe: {interval: 500ms, timeout: 1s}
  apiserverSignal:
    enabled: true
    minRequests: 3
    pathProbe:
      service: {namespace: %s, name: hook, port: %d}
`, x.name, x.hook, x.ns, x.wh.Port())
	}
	env.StartGuardT(t, harness.GuardOptions{Name: "hurry", Kubeconfig: w.id.KubeconfigPath, Config: b.String(), WithoutMarking: true})
	// The schedule's GETs of w's road: the calls on its path that carry no
	// AdmissionReview (the direct probe POSTs one).
	roadProbes := func() int { return w.wh.Calls(path) - len(w.wh.Requests(path)) }
	sweep := time.Duration(roads/breaker.PathProbesPerSecond) * time.Second
	before := roadProbes()
	require.Eventually(t, func() bool { return roadProbes() > before }, 2*sweep, 20*time.Millisecond, "the schedule never probed the road")

	// Just after its probe: its next turn is a sweep away.
	cut := time.Now()
	w.cutRoad()
	startLoad(t, w.ns)
	entry := w.waitOpen()
	took := time.Since(cut)
	t.Logf("one road cut among %d (a sweep every %s): opened %s after the cut (signal %s), after %d probes of the road in all",
		roads, sweep, took.Round(10*time.Millisecond), entry.Signal, roadProbes())
	assert.Less(t, took, sweep*3/5, "the cut road waited for its turn in the sweep")
}
