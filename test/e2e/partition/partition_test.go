package partition

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const (
	path = "/mutate"
	// timeoutSeconds of the webhook: a call on a cut route fails after it.
	timeoutSeconds = 2
	// transition bounds every wait for the breaker.
	transition = 30 * time.Second
	// rate is the create load, per second.
	rate = 10
)

var seq atomic.Uint32

// world is one test's namespace, service-backed webhook, its
// MutatingWebhookConfiguration (failurePolicy Fail, configmaps in the
// namespace) and the guard's ServiceAccount.
type world struct {
	t              *testing.T
	ns, name, hook string
	wh             *harness.Webhook
	// addr is the ClusterIP:port the apiserver dials through the proxy.
	addr string
	// podAddr is the pod address the service proxy dials through the
	// proxy, once withRoad put a pod behind the Service.
	podAddr  string
	id       *harness.Identity
	original admissionregistrationv1.MutatingWebhook
	// mode is the target's mode; Bypass unless a test says otherwise.
	mode string
}

func newWorld(t *testing.T, withoutRBAC ...string) *world {
	t.Helper()
	ctx := context.Background()
	n := seq.Add(1)
	w := &world{t: t, ns: fmt.Sprintf("partition-%d", n), name: fmt.Sprintf("partition-%d", n), mode: "Bypass"}
	w.hook = "slow." + w.name + ".webhook-guard.io"
	require.NoError(t, env.EnsureNamespace(ctx, w.ns))
	ip := harness.NextServiceIP()
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: ip, DNSNames: []string{"hook." + w.ns + ".svc"}})
	require.NoError(t, err)
	t.Cleanup(wh.Close)
	w.wh = wh
	wh.SetBehaviour(path, harness.Allow())
	w.addr = net.JoinHostPort(ip, strconv.Itoa(int(wh.Port())))
	require.NoError(t, env.ServiceFor(ctx, w.ns, "hook", ip, wh.Port()))
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: w.name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: w.hook,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: w.ns, Name: "hook", Path: ptr.To(path), Port: ptr.To(wh.Port())},
				CABundle: wh.CA.CertPEM,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": w.ns}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To[int32](timeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	require.NoError(t, env.Client.Create(ctx, mwc))
	w.original = mwc.Webhooks[0]
	w.id, err = env.ServiceAccount(ctx, w.ns, "webhook-guard")
	require.NoError(t, err)
	require.NoError(t, env.GrantGuard(ctx, w.ns, w.id, []string{w.name}, withoutRBAC...))
	t.Cleanup(func() { proxy.Heal(w.addr) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("events:\n%s", strings.Join(w.events(""), "\n"))
		}
	})
	return w
}

// config is the world's GuardConfiguration. It names the webhook's
// Service for the path probe; the probe can reach it once withRoad put a
// pod behind the Service and granted the RBAC.
func (w *world) config(signal bool, minOpen time.Duration) string {
	return fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
apiserverScrapeInterval: 1s
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  mode: %s
  openAfter: 3
  closeAfter: 3
  probe:
    interval: 200ms
    timeout: 1s
  apiserverSignal:
    enabled: %t
    minRequests: 3
    minOpen: %s
    pathProbe:
      service: {namespace: %s, name: hook, port: %d}
`, w.name, w.hook, w.mode, signal, minOpen, w.ns, w.wh.Port())
}

// startGuard runs the real guard binary on this world's target, with or
// without the apiserver signal.
func (w *world) startGuard(name string, signal bool, minOpen time.Duration, args ...string) *harness.Guard {
	w.t.Helper()
	// This apiserver serves no MutatingAdmissionPolicy: nothing to install.
	g, err := env.StartGuard(harness.GuardOptions{Name: name, Kubeconfig: w.id.KubeconfigPath, Config: w.config(signal, minOpen), Args: args, WithoutMarking: true})
	require.NoError(w.t, err)
	w.t.Cleanup(func() {
		g.Stop()
		if w.t.Failed() {
			w.t.Logf("guard %s logs:\n%s", g.Name, g.Logs())
		}
	})
	return g
}

type statusRow struct {
	Successes int `json:"consecutiveSuccesses"`
}

// waitHealthyProbes waits until the guard has seen n healthy probes in a
// row: the direct path to the webhook works.
func waitHealthyProbes(t *testing.T, g *harness.Guard, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get(g.StatusURL)
		if err != nil {
			return false
		}
		defer func() { _ = resp.Body.Close() }()
		var rows []statusRow
		return json.NewDecoder(resp.Body).Decode(&rows) == nil && len(rows) == 1 && rows[0].Successes >= n
	}, transition, 20*time.Millisecond, "the guard never reported %d healthy probes", n)
}

func (w *world) get() *admissionregistrationv1.MutatingWebhookConfiguration {
	w.t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(w.t, env.Client.Get(context.Background(), client.ObjectKey{Name: w.name}, mwc))
	return mwc
}

// entry returns the breaker's record entry for the webhook, if open.
func (w *world) entry() (circuit.Entry, bool) {
	w.t.Helper()
	rec, err := circuit.Decode(w.get().Annotations)
	require.NoError(w.t, err)
	e, ok := rec[w.hook]
	return e, ok
}

func (w *world) waitOpen() circuit.Entry {
	w.t.Helper()
	var e circuit.Entry
	require.Eventually(w.t, func() bool {
		var ok bool
		e, ok = w.entry()
		return ok
	}, transition, 20*time.Millisecond, "the circuit never opened")
	return e
}

func (w *world) waitClosed() {
	w.t.Helper()
	require.Eventually(w.t, func() bool {
		mwc := w.get()
		_, open := mwc.Annotations[circuit.Annotation]
		wh := mwc.Webhooks[0]
		return !open && *wh.FailurePolicy == admissionregistrationv1.Fail && len(wh.MatchConditions) == 0
	}, transition, 20*time.Millisecond, "the circuit never closed, restoring failurePolicy Fail")
}

// events returns "Reason: note" for the Events on the configuration,
// with reason if given.
func (w *world) events(reason string) []string {
	w.t.Helper()
	list := &eventsv1.EventList{}
	require.NoError(w.t, env.Client.List(context.Background(), list, client.InNamespace(circuit.EventsNamespace)))
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == w.name && (reason == "" || e.Reason == reason) {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

func (w *world) waitEvent(reason string) string {
	w.t.Helper()
	var got []string
	require.Eventually(w.t, func() bool {
		got = w.events(reason)
		return len(got) > 0
	}, transition, 50*time.Millisecond, "no %s Event", reason)
	return got[0]
}

// result is one create of the load.
type result struct {
	start   time.Time
	latency time.Duration
	err     error
	// created is what the apiserver stored, when it did.
	created *corev1.ConfigMap
}

// load creates ConfigMaps in ns at rate per second, each in its own
// goroutine, until stopped.
type load struct {
	mu      sync.Mutex
	results []result
	stop    chan struct{}
	wg      sync.WaitGroup
}

func startLoad(t *testing.T, ns string) *load {
	t.Helper()
	return startLoadWith(t, ns, rate, nil)
}

// startLoadWith is startLoad at perSecond creates a second, of ConfigMaps
// carrying labels (and always some label, so that a JSONPatch can add
// one).
func startLoadWith(t *testing.T, ns string, perSecond int, labels map[string]string) *load {
	t.Helper()
	if labels == nil {
		labels = map[string]string{"load": "yes"}
	}
	l := &load{stop: make(chan struct{})}
	l.wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			l.wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				start := time.Now()
				created, err := env.Clientset.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "load-", Labels: labels}}, metav1.CreateOptions{})
				l.mu.Lock()
				l.results = append(l.results, result{start: start, latency: time.Since(start), err: err, created: created})
				l.mu.Unlock()
			})
		}
	})
	t.Cleanup(l.Stop)
	return l
}

// Stop ends the load and waits for every create in flight.
func (l *load) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// done returns the finished creates that started in [from, to).
func (l *load) done(from, to time.Time) []result {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []result
	for _, r := range l.results {
		if !r.start.Before(from) && r.start.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

func failedCalling(rs []result) int {
	n := 0
	for _, r := range rs {
		if r.err != nil && strings.Contains(r.err.Error(), "failed calling webhook") {
			n++
		}
	}
	return n
}

// excluded reads the apiserver's own count of calls to the webhook that a
// matchCondition skipped.
func (w *world) excluded() float64 {
	w.t.Helper()
	wh := apimetrics.Webhook{Name: w.hook, Type: apimetrics.Mutating}
	s, err := (&apimetrics.Scraper{Client: env.Clientset.Discovery().RESTClient()}).Scrape(context.Background(), map[apimetrics.Webhook]bool{wh: true})
	require.NoError(w.t, err)
	return s.Webhooks[wh].Excluded
}

// The konnectivity failure, reproduced: the apiserver's route to a healthy
// webhook is cut, while the guard reaches it directly.
func TestPartition_apiserverSignalOpensWhatTheProbeCannotSee(t *testing.T) {
	w := newWorld(t)
	w.withRoad()
	ctx := context.Background()

	// Control: the probe alone. Creates fail, the probe stays healthy, and
	// the circuit never opens. This is the gap.
	control := w.startGuard("control", false, time.Second)
	waitHealthyProbes(t, control, 3)
	cut := time.Now()
	w.cutRoad()
	l := startLoad(t, w.ns)
	require.Eventually(t, func() bool { return failedCalling(l.done(cut, time.Now())) >= 15 }, transition, 50*time.Millisecond,
		"creates never failed on the cut route")
	waitHealthyProbes(t, control, 15)
	_, open := w.entry()
	assert.False(t, open, "without the apiserver signal nothing can see the cut route")
	rs := l.done(cut, time.Now())
	t.Logf("control: %d of %d creates failed calling the webhook; the direct probe stayed healthy; the circuit stayed closed", failedCalling(rs), len(rs))
	control.Stop()

	// With the apiserver signal, the same cut opens the circuit.
	started := time.Now()
	w.startGuard("signal", true, 5*time.Second)
	entry := w.waitOpen()
	opened := time.Now()
	t.Logf("time to open with the apiserver signal: %s after the guard started, under %d creates/s", opened.Sub(started).Round(10*time.Millisecond), rate)
	excludedAtOpen := w.excluded()
	// The continuous path probe sees the cut road before the
	// apiserver's counters reach openAfter reads: the road opens it.
	assert.Equal(t, decide.SignalRoad, entry.Signal)
	assert.Equal(t, decide.SignalRoad, entry.Reason)
	assert.Equal(t, admissionregistrationv1.Fail, *entry.OriginalFailurePolicy)
	msg := w.waitEvent(string(decide.Opened))
	assert.Contains(t, msg, "kube-apiserver cannot reach the webhook's server")
	assert.Contains(t, msg, "while the direct probe from the guard's pod is healthy")
	assert.Contains(t, msg, "probes in a row through kube-apiserver's service proxy")
	assert.Contains(t, w.waitEvent("SignalsDisagree"), "the direct probe is healthy but the apiserver's own calls fail")

	// Bypass: creates no longer wait for the webhook's timeout. (The
	// apiserver applies the change from its informer, within moments.)
	bypassed := opened.Add(500 * time.Millisecond)
	require.Eventually(t, func() bool { return len(l.done(bypassed, time.Now())) >= 10 }, transition, 50*time.Millisecond)
	for _, r := range l.done(bypassed, time.Now()) {
		require.NoError(t, r.err)
		assert.Less(t, r.latency, timeoutSeconds*time.Second, "a bypassed create waited for the webhook")
	}
	_, open = w.entry()
	require.True(t, open, "the circuit must still be open while the creates above ran: the path probe still fails")

	// The route heals: the circuit closes, and the webhook is called again.
	w.healRoad()
	callsBefore := w.wh.APIServerCalls(path)
	w.waitClosed()
	closed := time.Now()
	excludedAtClose := w.excluded()
	l.Stop()
	require.Eventually(t, func() bool {
		_, err := env.Clientset.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "after-"}}, metav1.CreateOptions{})
		return err == nil && w.wh.APIServerCalls(path) > callsBefore
	}, transition, 100*time.Millisecond, "after closing, the apiserver never called the webhook again")

	// What was admitted without the webhook, against the apiserver's own
	// accounting and against what the test sent.
	closing := w.waitEvent(string(decide.Closed))
	t.Logf("events:\n%s", strings.Join(w.events(""), "\n"))
	assert.Contains(t, closing, "consecutive healthy probes through kube-apiserver's service proxy: its road to the webhook works again")
	assert.NotContains(t, closing, "opens again", "closed on the road's evidence, not as a trial")
	var admitted int
	_, err := fmt.Sscanf(closing[strings.Index(closing, "the apiserver admitted "):], "the apiserver admitted %d requests without the mutation", &admitted)
	require.NoError(t, err, closing)
	sent := 0
	for _, r := range l.done(opened, closed) {
		if r.err == nil {
			sent++
		}
	}
	apiserverCount := excludedAtClose - excludedAtOpen
	t.Logf("admitted without the webhook while open: guard %d, apiserver's exclusions %.0f, creates the test sent that succeeded while open %d", admitted, apiserverCount, sent)
	// The guard counts from the first scrape after its cache shows the
	// circuit open to the last one before the close, so it may miss a
	// scrape interval (breaker.MinScrapeInterval) of creates at each end.
	slack := 2 * float64(rate) * breaker.MinScrapeInterval.Seconds()
	assert.InDelta(t, apiserverCount, float64(admitted), slack)
	assert.InDelta(t, float64(sent), float64(admitted), 2*slack)
	assert.Positive(t, admitted)
}

// A dead webhook is seen by both signals: one opening, one write. While
// bypassed no call reaches it, so the apiserver signal has nothing to say
// and the probe closes the circuit once it is back.
func TestPartition_outageBothSignalsSeeOpensOnceAndTheProbeCloses(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	g := w.startGuard("both", true, time.Second)
	waitHealthyProbes(t, g, 3)
	mwc := w.get()
	watcher, err := env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + w.name, ResourceVersion: mwc.ResourceVersion,
	})
	require.NoError(t, err)
	defer watcher.Stop()
	var writes atomic.Int32
	go func() {
		for ev := range watcher.ResultChan() {
			if ev.Type == watch.Modified {
				writes.Add(1)
			}
		}
	}()

	l := startLoad(t, w.ns)
	w.wh.SetBehaviour(path, harness.Drop())
	entry := w.waitOpen()
	t.Logf("opened by %q", entry.Signal)
	assert.Contains(t, []string{decide.SignalProbe, decide.SignalAPIServer, decide.SignalBoth}, entry.Signal)

	// No call reaches the webhook while it is bypassed, even once healthy.
	// A create that succeeds against the dropping webhook shows the
	// apiserver applies the bypass.
	require.Eventually(t, func() bool {
		_, err := env.Clientset.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "bypassed-"}}, metav1.CreateOptions{})
		return err == nil
	}, transition, 50*time.Millisecond, "the apiserver never applied the bypass")
	w.wh.SetBehaviour(path, harness.Allow())
	calls := w.wh.APIServerCalls(path)
	require.Eventually(t, func() bool {
		_, open := w.entry()
		if open {
			require.Equal(t, calls, w.wh.APIServerCalls(path), "a call reached the bypassed webhook")
		}
		return !open
	}, transition, 20*time.Millisecond, "the probe never closed the bypassed circuit")
	w.waitClosed()
	l.Stop()
	assert.Equal(t, int32(2), writes.Load(), "one write to open, one to close")
	assert.Len(t, w.events(string(decide.Opened)), 1)

	// This apiserver does not serve MutatingAdmissionPolicy: the circuit
	// cycled without marking, and that was said once.
	resources, err := env.Clientset.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	require.NoError(t, err)
	for _, r := range resources.APIResources {
		require.NotEqual(t, "mutatingadmissionpolicies", r.Name, "this apiserver was meant not to serve MutatingAdmissionPolicy")
	}
	notes := w.events("MarkingUnavailable")
	require.Len(t, notes, 1, "reported once")
	assert.Contains(t, notes[0], "objects admitted while a circuit is open are not marked")
	assert.Contains(t, g.Logs(), `"msg":"Marking unavailable"`)
}

// Without RBAC for /metrics the apiserver signal is Unknown: reported
// once, and nothing opens from it.
func TestPartition_missingMetricsRBACIsUnknownAndOpensNothing(t *testing.T) {
	w := newWorld(t, "apiserver-metrics")
	g := w.startGuard("no-rbac", true, time.Second)
	waitHealthyProbes(t, g, 3)
	msg := w.waitEvent("APIServerSignalUnknown")
	assert.Contains(t, msg, "get on the non-resource URL /metrics")
	require.Eventually(t, func() bool { return strings.Contains(g.Logs(), "Reading the apiserver's /metrics failed") }, transition, 50*time.Millisecond)

	cut := time.Now()
	proxy.Cut(w.addr)
	l := startLoad(t, w.ns)
	require.Eventually(t, func() bool { return failedCalling(l.done(cut, time.Now())) >= 10 }, transition, 50*time.Millisecond)
	waitHealthyProbes(t, g, 10)
	_, open := w.entry()
	assert.False(t, open)
	assert.Len(t, w.events("APIServerSignalUnknown"), 1, "reported once, not every interval")
	assert.Equal(t, 1, strings.Count(g.Logs(), "Reading the apiserver's /metrics failed"), "logged once")
}
