package partition

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// The numbers the issue asks for: a tenant sending about 90% of the
// traffic for 60 s, and a partition held for 3 minutes.
const (
	tenantFor     = 60 * time.Second
	partitionHeld = 3 * time.Minute
	// probeInterval and closeAfter are the world's configuration's.
	probeInterval = 200 * time.Millisecond
	closeAfter    = 3
	openAfter     = 3
	// applied is how long after the test sees the opening record a
	// request may still have been admitted under the old policy: the
	// apiserver's webhook dispatcher reads the configuration from its own
	// informer.
	applied = 500 * time.Millisecond
)

var modes = []string{"Ignore", "Bypass"}

// service is the world's webhook Service, as the path probe names it.
func (w *world) service() config.Service {
	return config.Service{Namespace: w.ns, Name: "hook", Port: w.wh.Port()}
}

// withRoad makes the apiserver's road to the world's webhook probeable:
// a pod behind its Service for kube-apiserver's service proxy
// (serviceProxyBackend), and the guard's RBAC for the path probe,
// rendered by internal/rbac. It waits until the service proxy reaches the
// webhook's server.
func (w *world) withRoad() {
	w.t.Helper()
	w.withRoadFor(w.id)
}

// withRoadFor is withRoad with the path probe's RBAC granted to id, the
// identity of a guard that probes several worlds' roads.
func (w *world) withRoadFor(id *harness.Identity) {
	w.t.Helper()
	w.wh.SetBehaviour(probePath, harness.Allow())
	w.podAddr = w.serviceProxyBackend()
	require.NoError(w.t, env.GrantPathProbe(context.Background(), id, w.service()))
	var last string
	if !assert.Eventually(w.t, func() bool {
		body, err := w.serviceProxyGet(serviceProxyHang)
		last = fmt.Sprintf("body %q, error %v", body, err)
		return err == nil && body == "ok"
	}, transition, 50*time.Millisecond) {
		w.t.Fatalf("the service proxy never reached the webhook within %s; the last GET: %s", transition, last)
	}
}

// cutRoad cuts the apiserver's road to the webhook: the ClusterIP its
// webhook calls dial and the pod address its service proxy dials, as a
// konnectivity outage cuts both.
func (w *world) cutRoad() {
	proxy.Cut(w.addr)
	if w.podAddr != "" {
		proxy.Cut(w.podAddr)
	}
}

func (w *world) healRoad() {
	if w.podAddr != "" {
		proxy.Heal(w.podAddr)
	}
	proxy.Heal(w.addr)
}

// watchWrites counts the writes to the world's configuration from now on.
func (w *world) watchWrites() *atomic.Int32 {
	w.t.Helper()
	watcher, err := env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Watch(context.Background(), metav1.ListOptions{
		FieldSelector: "metadata.name=" + w.name, ResourceVersion: w.get().ResourceVersion,
	})
	require.NoError(w.t, err)
	w.t.Cleanup(watcher.Stop)
	var writes atomic.Int32
	go func() {
		for ev := range watcher.ResultChan() {
			if ev.Type == watch.Modified {
				writes.Add(1)
			}
		}
	}()
	return &writes
}

// guardRow is what these tests read of the guard's /status.
type guardRow struct {
	Successes         int    `json:"consecutiveSuccesses"`
	APIServerFailures int    `json:"apiserverConsecutiveFailures"`
	APIServerLast     string `json:"apiserverLastResult"`
	PathLast          string `json:"pathProbeLastResult"`
	PathFailures      int    `json:"pathProbeConsecutiveFailures"`
	PathSuccesses     int    `json:"pathProbeConsecutiveSuccesses"`
}

func guardStatus(g *harness.Guard) (guardRow, error) {
	resp, err := http.Get(g.StatusURL)
	if err != nil {
		return guardRow{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	var rows []guardRow
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil {
		return guardRow{}, err
	}
	if len(rows) != 1 {
		return guardRow{}, fmt.Errorf("%d rows", len(rows))
	}
	return rows[0], nil
}

// rejected counts the creates that failed.
func rejected(rs []result) int {
	n := 0
	for _, r := range rs {
		if r.err != nil {
			n++
		}
	}
	return n
}

func requireForbidden(t *testing.T, err error, msg string) {
	t.Helper()
	require.Error(t, err)
	require.True(t, apierrors.IsForbidden(err), "not Forbidden: %v", err)
	assert.Contains(t, err.Error(), msg)
	assert.Contains(t, err.Error(), `cannot get resource "services/proxy"`)
}

// A tenant whose requests make a healthy webhook time out sends about 90%
// of the traffic for 60 s. The apiserver's calls fail far beyond
// failureRatio the whole time, which alone opened the circuit before. The
// path probe through kube-apiserver's service proxy reaches the webhook's
// server, so nothing opens: every other user's create carries the
// mutation, and the tenant's own creates are refused as the webhook's
// failurePolicy says.
func TestPartition_aTenantsTimeoutsOpenNothing(t *testing.T) {
	t.Parallel() // with the long partition: make test waits for the longest
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			w.mode = mode
			w.withRoad()
			mutate := harness.PatchLabel("mutated", "yes")
			w.wh.SetBehaviour(path, harness.ByLabel("tenant", "noisy", harness.Delayed(3*time.Second, mutate), mutate))
			g := w.startGuard("tenant", true, 5*time.Second)
			waitHealthyProbes(t, g, 3)
			writes := w.watchWrites()

			start := time.Now()
			tenant := startLoadWith(t, w.ns, 9, map[string]string{"tenant": "noisy"})
			others := startLoadWith(t, w.ns, 1, map[string]string{"user": "other"})
			maxAPIServerFailures, maxPathFailures, pathHealthy, pathFailed := 0, 0, 0, 0
			tick := time.NewTicker(250 * time.Millisecond)
			for time.Since(start) < tenantFor {
				<-tick.C
				row, err := guardStatus(g)
				if err != nil {
					continue
				}
				maxAPIServerFailures = max(maxAPIServerFailures, row.APIServerFailures)
				maxPathFailures = max(maxPathFailures, row.PathFailures)
				switch {
				case strings.HasPrefix(row.PathLast, "Healthy"):
					pathHealthy++
				case strings.HasPrefix(row.PathLast, "Failed"):
					pathFailed++
				}
				_, open := w.entry()
				require.False(t, open, "the circuit opened %s into the tenant's load", time.Since(start).Round(time.Millisecond))
			}
			tick.Stop()
			tenant.Stop()
			others.Stop()

			theirs := others.done(start, time.Now())
			carried := 0
			for _, r := range theirs {
				if assert.NoError(t, r.err, "another user's create") && r.created.Labels["mutated"] == "yes" {
					carried++
				}
			}
			mine := tenant.done(start, time.Now())
			t.Logf("%s: %d s of load: the tenant sent %d creates (%d refused: the webhook timed out on them), others %d (%d carry the mutation); "+
				"the apiserver signal failed up to %d intervals in a row; status samples with the path probe healthy %d, failed %d (at most %d in a row); writes to the configuration %d",
				mode, int(tenantFor.Seconds()), len(mine), failedCalling(mine), len(theirs), carried, maxAPIServerFailures, pathHealthy, pathFailed, maxPathFailures, writes.Load())
			assert.Equal(t, len(theirs), carried, "every other create carries the mutation")
			assert.GreaterOrEqual(t, len(theirs), int(tenantFor.Seconds())*9/10)
			assert.Greater(t, len(mine), 8*len(theirs), "the tenant sends about 90% of the traffic")
			assert.GreaterOrEqual(t, maxAPIServerFailures, 2*openAfter, "the apiserver's calls failed for long enough to open the circuit on their own")
			assert.Positive(t, pathHealthy, "the path probe ran and found the road healthy")
			// A path probe may time out now and then on a loaded machine;
			// never openAfter of them in a row.
			assert.Less(t, maxPathFailures, openAfter, "the path probe failed %d times in a row on a healthy road", maxPathFailures)
			assert.Zero(t, writes.Load(), "the configuration was never written")
			assert.Empty(t, w.events(string(decide.Opened)))
			assert.Contains(t, w.waitEvent("SignalsDisagree"), "reaches the webhook's server, so the road works: the failing calls fail because of what they carry")
		})
	}
}

// The road is cut for 3 minutes under about 10 creates a second. The
// circuit opens once, on the apiserver's calls confirmed by the path
// probe, and then no trial puts Fail back: no create is refused after the
// opening, and the configuration is written exactly twice. Once the road
// heals, the path probe closes the circuit within closeAfter intervals
// plus one scrape, with no minOpen (set to 5 s here) to wait out.
func TestPartition_aLongPartitionRefusesNothingAfterTheFirstOpening(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			w.mode = mode
			w.withRoad()
			g := w.startGuard("long", true, 5*time.Second)
			waitHealthyProbes(t, g, 3)
			writes := w.watchWrites()
			l := startLoad(t, w.ns)
			require.Eventually(t, func() bool { return len(l.done(time.Time{}, time.Now())) >= 5 }, transition, 50*time.Millisecond)

			cut := time.Now()
			w.cutRoad()
			entry := w.waitOpen()
			opened := time.Now()
			// The continuous path probe sees the cut before the
			// apiserver's counters have openAfter reads.
			assert.Equal(t, decide.SignalRoad, entry.Signal)

			// Held for partitionHeld: the circuit stays open the whole time.
			assert.Never(t, func() bool {
				_, open := w.entry()
				return !open
			}, partitionHeld, time.Second, "the circuit closed while the road was cut")
			row, err := guardStatus(g)
			require.NoError(t, err)
			assert.Positive(t, row.PathFailures, "the path probe still fails: %s", row.PathLast)

			healed := time.Now()
			w.healRoad()
			// When the road carries a request again, as the test sees it
			// through the same service proxy: at the heal, every dial the
			// apiserver held in the egress while the road was cut completes
			// at once (in Ignore mode one per create, a webhook call with
			// its TLS handshake), and that backlog, not the guard, sets the
			// pace for a moment.
			roadBack := make(chan time.Time, 1)
			go func() {
				for {
					if body, err := w.serviceProxyGet(serviceProxyHang); err == nil && body == "ok" {
						roadBack <- time.Now()
						return
					}
				}
			}()
			w.waitClosed()
			closed := time.Now()
			back := <-roadBack
			require.Eventually(t, func() bool { return len(l.done(closed, time.Now())) >= 10 }, transition, 50*time.Millisecond)
			l.Stop()

			before := l.done(cut, opened)
			settling := l.done(opened, opened.Add(applied))
			after := l.done(opened.Add(applied), time.Now())
			toClose := closed.Sub(back)
			bound := closeAfter*probeInterval + breaker.MinScrapeInterval
			t.Logf("%s: opened %s after the cut; road cut for %s under %d creates/s: refused before the opening %d of %d, in the %s the apiserver took to apply it %d of %d, after it %d of %d; "+
				"writes to the configuration %d; after the heal the road carried a request again in %s, and the circuit closed %s later (%s after the heal; closeAfter intervals plus one scrape: %s)",
				mode, opened.Sub(cut).Round(10*time.Millisecond), healed.Sub(cut).Round(time.Second), rate, rejected(before), len(before), applied, rejected(settling), len(settling),
				rejected(after), len(after), writes.Load(), back.Sub(healed).Round(10*time.Millisecond), toClose.Round(10*time.Millisecond), closed.Sub(healed).Round(10*time.Millisecond), bound)
			assert.Zero(t, rejected(after), "a create was refused after the first opening")
			assert.Greater(t, len(after), int(partitionHeld.Seconds())*rate*9/10)
			assert.Equal(t, int32(2), writes.Load(), "one write to open, one to close: no trial")
			assert.Len(t, w.events(string(decide.Opened)), 1)
			// The test sees the close up to one poll (20 ms) late, and a
			// loaded machine runs the guard's timers late too; in Ignore
			// mode the apiserver is still draining the dials it held when
			// the test's first request gets through, and a path probe may
			// wait behind them. The slack is 2 s (2.95 s against a 2.6 s
			// bound was seen with every e2e package on 2 cores): this
			// catches a close that waits for minOpen or a trial, not a
			// slow machine.
			assert.LessOrEqual(t, toClose, bound+2*time.Second, "closing took longer than closeAfter intervals plus one scrape")
			assert.Contains(t, w.waitEvent(string(decide.Closed)), "through kube-apiserver's service proxy: its road to the webhook works again")
		})
	}
}

// Another configuration, which the guard does not manage, has a webhook
// of the target's name (as each Istio revision does) whose every call
// fails. kube-apiserver counts both under one name, so the target looks
// failing in its metrics for as long as the test runs. The path probe
// reaches the target's server: nothing opens.
func TestPartition_aSameNamedWebhookElsewhereOpensNothing(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			w := newWorld(t)
			w.mode = mode
			w.withRoad()
			dead, err := harness.FreeLoopbackAddr() // nothing listens there
			require.NoError(t, err)
			deadURL := "https://" + dead + path
			rev := &admissionregistrationv1.MutatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: w.name + "-rev"},
				Webhooks: []admissionregistrationv1.MutatingWebhook{{
					Name:                    w.hook,
					ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &deadURL, CABundle: w.wh.CA.CertPEM},
					Rules:                   w.original.Rules,
					NamespaceSelector:       w.original.NamespaceSelector,
					FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
					SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
					TimeoutSeconds:          ptr.To[int32](1),
					AdmissionReviewVersions: []string{"v1"},
				}},
			}
			require.NoError(t, env.Client.Create(ctx, rev))
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), rev) })

			g := w.startGuard("same-name", true, 5*time.Second)
			waitHealthyProbes(t, g, 3)
			writes := w.watchWrites()
			start := time.Now()
			l := startLoad(t, w.ns)
			var row guardRow
			require.Eventually(t, func() bool {
				row, err = guardStatus(g)
				return err == nil && row.APIServerFailures >= 2*openAfter
			}, 2*transition, 100*time.Millisecond, "the apiserver's counters never showed the target failing")
			l.Stop()
			rs := l.done(start, time.Now())
			t.Logf("%s: %d creates, %d refused; the apiserver signal failing for %d intervals in a row (%s); path probe: %s (%d healthy in a row); writes to the configuration %d",
				mode, len(rs), rejected(rs), row.APIServerFailures, row.APIServerLast, row.PathLast, row.PathSuccesses, writes.Load())
			_, open := w.entry()
			assert.False(t, open)
			assert.Zero(t, writes.Load(), "the configuration was never written")
			assert.Zero(t, rejected(rs))
			assert.Positive(t, row.PathSuccesses)
			disagree := w.waitEvent("SignalsDisagree")
			assert.Contains(t, disagree, "the road works")
			assert.Contains(t, disagree, "MutatingWebhookConfiguration "+rev.Name)
		})
	}
}
