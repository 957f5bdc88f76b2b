package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const (
	webhookPath = "/mutate"
	// transition bounds how long a test waits for the breaker to act. With
	// 100 ms probes and thresholds of 2 it normally takes well under 1 s.
	transition = 30 * time.Second
)

// breakerSetup is one test's world: a namespace, a slow-able webhook, its
// MutatingWebhookConfiguration and a ServiceAccount for the guard with
// least-privilege RBAC.
type breakerSetup struct {
	t        *testing.T
	ns       string
	name     string // MWC name
	hook     string // webhook name
	wh       *harness.Webhook
	guardID  *harness.Identity
	original admissionregistrationv1.MutatingWebhook // as stored, before the guard
	mode     string
	writes   *writeLog
	manifest []byte // the YAML applied with kubectl, when setupOptions.kubectl
}

type setupOptions struct {
	mode    string // Ignore | Bypass
	service bool   // clientConfig.service instead of url
	noRBAC  []string
	kubectl bool   // create the configuration with kubectl apply, as a user would
	name    string // the configuration's name; default a unique one
	// objectSelector is the target webhook's; default none.
	objectSelector *metav1.LabelSelector
}

func newBreakerSetup(t *testing.T, o setupOptions) *breakerSetup {
	t.Helper()
	ctx := context.Background()
	s := &breakerSetup{t: t, ns: testNamespace(t), mode: o.mode}
	s.name = o.name
	if s.name == "" {
		s.name = uniqueName(t, "breaker")
	}
	s.hook = "slow." + s.name + ".webhook-guard.io"
	dumpOnFailure(t, s.ns)

	cc := admissionregistrationv1.WebhookClientConfig{}
	if o.service {
		ip := harness.NextServiceIP()
		wh, err := harness.StartWebhook(harness.WebhookOptions{Host: ip, DNSNames: []string{"slow-mutator." + s.ns + ".svc"}})
		require.NoError(t, err)
		s.wh = wh
		require.NoError(t, env.ServiceFor(ctx, s.ns, "slow-mutator", ip, wh.Port()))
		require.NotEqual(t, int32(443), wh.Port())
		cc.Service = &admissionregistrationv1.ServiceReference{Namespace: s.ns, Name: "slow-mutator", Path: ptr.To(webhookPath), Port: ptr.To(wh.Port())}
	} else {
		s.wh = startWebhook(t, harness.WebhookOptions{})
		cc.URL = ptr.To(s.wh.URL(webhookPath))
	}
	t.Cleanup(s.wh.Close)
	cc.CABundle = s.wh.CA.CertPEM
	s.wh.SetBehaviour(webhookPath, harness.Allow())

	w := configMapWebhook(s.hook, s.ns, "", nil, admissionregistrationv1.Fail)
	w.ClientConfig = cc
	// An existing matchCondition must survive a Bypass cycle untouched.
	w.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "not-a-dry-run-marker", Expression: "!has(object.metadata.labels) || !('skip-slow' in object.metadata.labels)"}}
	w.ObjectSelector = o.objectSelector
	other := configMapWebhook("other."+s.name+".webhook-guard.io", "nowhere-"+s.name, "https://127.0.0.1:1/never", nil, admissionregistrationv1.Fail)
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Labels: map[string]string{"e2e": "breaker"}},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{w, other},
	}
	if o.kubectl {
		mwc.TypeMeta = metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"}
		data, err := yaml.Marshal(mwc)
		require.NoError(t, err)
		s.manifest = data
		r := env.Kubectl(ctx, "", data, "apply", "-f", "-")
		require.NoError(t, r.Err, r.Stderr)
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: s.name}, mwc))
	} else {
		require.NoError(t, env.Client.Create(ctx, mwc))
	}
	s.original = mwc.Webhooks[0]
	s.writes = watchWrites(t, mwc)

	id, err := env.ServiceAccount(ctx, s.ns, "webhook-guard")
	require.NoError(t, err)
	s.guardID = id
	grantGuard(t, s.ns, id, []string{s.name}, o.noRBAC)
	return s
}

// grantGuard gives the guard's ServiceAccount what the installed RBAC
// gives it, for the configuration names given, minus the resources in
// without (to test the lack of a permission).
func grantGuard(t *testing.T, ns string, id *harness.Identity, names []string, without []string) {
	t.Helper()
	require.NoError(t, env.GrantGuard(context.Background(), ns, id, names, without...))
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// config renders the GuardConfiguration for this setup.
func (s *breakerSetup) config(extra string) string {
	return fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
apiserverScrapeInterval: 1s
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  mode: %s
  openAfter: 2
  closeAfter: 2
  probe:
    interval: 100ms
    timeout: 250ms
%s`, s.name, s.hook, s.mode, extra)
}

// startGuard runs the real guard binary as the setup's ServiceAccount.
func (s *breakerSetup) startGuard(name string, extra ...string) *harness.Guard {
	s.t.Helper()
	g, err := env.StartGuard(harness.GuardOptions{
		Name: name, Kubeconfig: s.guardID.KubeconfigPath, Config: s.config(""),
		Args: append([]string{"--leader-elect", "--leader-election-namespace", s.ns,
			"--leader-election-lease-duration", "3s", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "500ms"}, extra...),
	})
	require.NoError(s.t, err)
	s.t.Cleanup(func() {
		g.Stop()
		if s.t.Failed() {
			s.t.Logf("guard %s logs:\n%s", g.Name, g.Logs())
		}
	})
	return g
}

func (s *breakerSetup) get() *admissionregistrationv1.MutatingWebhookConfiguration {
	s.t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(s.t, env.Client.Get(context.Background(), client.ObjectKey{Name: s.name}, mwc))
	return mwc
}

// isOpen, hasMarker and findWebhook are the harness's, shared with the
// other e2e packages.
func isOpen(mwc *admissionregistrationv1.MutatingWebhookConfiguration, hook, mode string) bool {
	return harness.IsOpen(mwc, hook, mode)
}

func hasMarker(w *admissionregistrationv1.MutatingWebhook) bool { return harness.HasBypassMarker(w) }

func findWebhook(mwc *admissionregistrationv1.MutatingWebhookConfiguration, name string) *admissionregistrationv1.MutatingWebhook {
	return harness.FindWebhook(mwc, name)
}

func (s *breakerSetup) waitOpen() (time.Duration, *admissionregistrationv1.MutatingWebhookConfiguration) {
	s.t.Helper()
	start := time.Now()
	var mwc *admissionregistrationv1.MutatingWebhookConfiguration
	require.Eventually(s.t, func() bool {
		mwc = s.get()
		return isOpen(mwc, s.hook, s.mode)
	}, transition, 20*time.Millisecond, "the circuit never opened")
	return time.Since(start), mwc
}

// waitRestored waits until the webhook is exactly what it was before the
// guard touched it, with no record left.
func (s *breakerSetup) waitRestored() time.Duration {
	s.t.Helper()
	start := time.Now()
	require.Eventually(s.t, func() bool {
		mwc := s.get()
		_, hasRecord := mwc.Annotations[circuit.Annotation]
		return !hasRecord && equality.Semantic.DeepEqual(*findWebhook(mwc, s.hook), s.original)
	}, transition, 20*time.Millisecond, "the original webhook was never restored exactly")
	return time.Since(start)
}

// writeLog collects every write to one MWC, from a watch started before
// the guard.
type writeLog struct {
	mu      sync.Mutex
	initial *admissionregistrationv1.MutatingWebhookConfiguration
	events  []watch.Event
}

// watchWrites watches the writes to from, from its resourceVersion on.
func watchWrites(t *testing.T, from *admissionregistrationv1.MutatingWebhookConfiguration) *writeLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", from.Name).String(), ResourceVersion: from.ResourceVersion,
	})
	require.NoError(t, err)
	l := &writeLog{initial: from.DeepCopy()}
	go func() {
		for ev := range w.ResultChan() {
			l.mu.Lock()
			l.events = append(l.events, ev)
			l.mu.Unlock()
		}
	}()
	return l
}

// modified returns the MODIFIED objects seen so far.
func (l *writeLog) modified() []*admissionregistrationv1.MutatingWebhookConfiguration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*admissionregistrationv1.MutatingWebhookConfiguration
	for _, ev := range l.events {
		if ev.Type == watch.Modified {
			out = append(out, ev.Object.(*admissionregistrationv1.MutatingWebhookConfiguration))
		}
	}
	return out
}

// transitions returns the MODIFIED objects that changed more than the
// marking's arming entries: the breaker's transitions, and others' edits.
func (l *writeLog) transitions() []*admissionregistrationv1.MutatingWebhookConfiguration {
	return l.split(false)
}

// armingWrites returns the MODIFIED objects that changed only the
// marking's arming entries (circuit.ArmingAnnotation): the breaker arms
// marking before an opening and disarms it after a closing.
func (l *writeLog) armingWrites() []*admissionregistrationv1.MutatingWebhookConfiguration {
	return l.split(true)
}

func (l *writeLog) split(arming bool) []*admissionregistrationv1.MutatingWebhookConfiguration {
	prev := l.initial
	var out []*admissionregistrationv1.MutatingWebhookConfiguration
	for _, m := range l.modified() {
		without := func(a map[string]string) map[string]string {
			c := maps.Clone(a)
			delete(c, circuit.ArmingAnnotation)
			return c
		}
		only := prev.Annotations[circuit.ArmingAnnotation] != m.Annotations[circuit.ArmingAnnotation] &&
			equality.Semantic.DeepEqual(without(prev.Annotations), without(m.Annotations)) &&
			equality.Semantic.DeepEqual(prev.Labels, m.Labels) &&
			equality.Semantic.DeepEqual(prev.Webhooks, m.Webhooks)
		if only == arming {
			out = append(out, m)
		}
		prev = m
	}
	return out
}

// status runs "guard status" against the running guard, as an operator would.
func (s *breakerSetup) status(g *harness.Guard) string {
	s.t.Helper()
	bin, err := env.BuildGuard()
	require.NoError(s.t, err)
	cfg := filepath.Join(s.t.TempDir(), "guard.yaml")
	require.NoError(s.t, os.WriteFile(cfg, []byte(s.config("")), 0o600))
	out, err := exec.Command(bin, "status", "--config", cfg, "--kubeconfig", env.KubeconfigPath, "--endpoint", g.StatusURL).CombinedOutput()
	require.NoError(s.t, err, "%s", out)
	return string(out)
}

// statusLine returns the fields of the status line for webhook.
func statusLine(t *testing.T, out, webhook string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		// KIND CONFIGURATION WEBHOOK STATE …; the row is returned from
		// CONFIGURATION on.
		if f := strings.Fields(line); len(f) > 6 && f[2] == webhook {
			return f[1:]
		}
	}
	t.Fatalf("no status line for %s in:\n%s", webhook, out)
	return nil
}

// requireCount waits until the watch has delivered n writes, then
// requires exactly n.
// requireCount requires exactly n transition writes (transitions).
func (l *writeLog) requireCount(t *testing.T, n int, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return len(l.transitions()) >= n }, transition, 20*time.Millisecond, "%s: the watch saw fewer writes", msg)
	require.Len(t, l.transitions(), n, msg)
}

// waitFor waits until the watch has delivered the write that produced
// resourceVersion rv.
func (l *writeLog) waitFor(t *testing.T, rv string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, w := range l.modified() {
			if w.ResourceVersion == rv {
				return true
			}
		}
		return false
	}, transition, 20*time.Millisecond, "the watch never delivered resourceVersion %s", rv)
}

// guardStatus reads the guard's /status rows.
type statusRow struct {
	Failures  int    `json:"consecutiveFailures"`
	Successes int    `json:"consecutiveSuccesses"`
	Problem   string `json:"problem"`
	Last      string `json:"lastResult"`
}

func guardStatus(g *harness.Guard) (statusRow, error) {
	resp, err := http.Get(g.StatusURL)
	if err != nil {
		return statusRow{}, err
	}
	defer resp.Body.Close()
	var rows []statusRow
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil || len(rows) == 0 {
		return statusRow{}, fmt.Errorf("decoding status: %v", err)
	}
	return rows[0], nil
}

// waitHealthyProbes waits until the leader has seen n healthy probes in a row.
func waitHealthyProbes(t *testing.T, g *harness.Guard, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := guardStatus(g)
		return err == nil && st.Successes >= n
	}, transition, 20*time.Millisecond, "the guard never reported %d healthy probes", n)
}

func eventReasons(t *testing.T, name string) []string {
	t.Helper()
	list := &eventsv1.EventList{}
	require.NoError(t, env.Client.List(context.Background(), list, client.InNamespace(circuit.EventsNamespace)))
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == "MutatingWebhookConfiguration" {
			out = append(out, e.Reason)
		}
	}
	return out
}

func TestBreaker_fullCycle(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		service bool
	}{
		{"Ignore", false}, {"Bypass", false}, {"Ignore", true}, {"Bypass", true},
	} {
		ref := "url"
		if tc.service {
			ref = "service"
		}
		t.Run(tc.mode+"/"+ref, func(t *testing.T) {
			ctx := context.Background()
			s := newBreakerSetup(t, setupOptions{mode: tc.mode, service: tc.service})
			g := s.startGuard("guard")
			waitHealthyProbes(t, g, 3)
			assert.Empty(t, s.writes.modified(), "a healthy webhook must not be written to")

			s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
			openTook, open := s.waitOpen()
			entry := mustRecord(t, open)[s.hook]
			assert.Equal(t, admissionregistrationv1.Fail, *entry.OriginalFailurePolicy)
			assert.NotEmpty(t, entry.Reason)
			other := findWebhook(open, "other."+s.name+".webhook-guard.io")
			assert.Equal(t, admissionregistrationv1.Fail, *other.FailurePolicy, "another webhook in the same configuration was touched")
			t.Logf("%s/%s: opened %s after the webhook turned slow (reason %s)", tc.mode, ref, openTook.Round(time.Millisecond), entry.Reason)

			// guard status tells the story from the objects and the leader.
			status := s.status(g)
			t.Logf("$ guard status --config guard.yaml\n%s", status)
			row := statusLine(t, status, s.hook)
			assert.Equal(t, []string{s.name, s.hook, "Open", tc.mode, entry.OpenedAt.UTC().Format(time.RFC3339)}, row[:5], status)
			assert.Equal(t, entry.Signal, row[6], "OPENED BY is the record's signal")
			assert.True(t, strings.HasPrefix(entry.Signal, decide.SignalProbe), "a slow webhook is seen by the probe: %q", entry.Signal)
			assert.Contains(t, status, "Failed (timeout")

			// What the open circuit buys: admission works, and in Bypass
			// mode the apiserver no longer calls the webhook at all. The
			// apiserver sees the new configuration a moment after we do.
			var took time.Duration
			require.Eventually(t, func() bool {
				before := s.wh.APIServerCalls(webhookPath)
				var err error
				took, err = createConfigMap(ctx, env.Client, s.ns)
				return err == nil && (tc.mode != "Bypass" || s.wh.APIServerCalls(webhookPath) == before)
			}, transition, 20*time.Millisecond, "%s mode: a create never went through without waiting on the webhook", tc.mode)
			t.Logf("%s/%s: ConfigMap create with the circuit open took %s", tc.mode, ref, took.Round(time.Millisecond))

			s.wh.SetBehaviour(webhookPath, harness.Allow())
			closeTook := s.waitRestored()
			t.Logf("%s/%s: closed %s after the webhook recovered", tc.mode, ref, closeTook.Round(time.Millisecond))

			// Exactly one write per transition, seen by a watch; and
			// one write that arms marking before the opening and one
			// that disarms it after the closing (docs/how-it-works.md,
			// "Ordering"), which change nothing else.
			require.Eventually(t, func() bool { return len(s.writes.transitions()) >= 2 }, transition, 20*time.Millisecond)
			require.Eventually(t, func() bool { return len(s.writes.armingWrites()) >= 2 }, transition, 20*time.Millisecond)
			waitHealthyProbes(t, g, 4)
			writes := s.writes.transitions()
			require.Len(t, writes, 2, "want exactly one write to open and one to close")
			arming := s.writes.armingWrites()
			require.Len(t, arming, 2, "want one write to arm marking and one to disarm it")
			armed, err := circuit.DecodeArming(arming[0].Annotations)
			require.NoError(t, err)
			assert.Equal(t, arming[0].UID, armed[s.hook].UID, "the arming write arms the webhook's entry")
			assert.NotContains(t, arming[1].Annotations, circuit.ArmingAnnotation)
			var order []string
			for _, w := range s.writes.modified() {
				order = append(order, w.ResourceVersion)
			}
			assert.Equal(t, []string{arming[0].ResourceVersion, writes[0].ResourceVersion, writes[1].ResourceVersion, arming[1].ResourceVersion}, order,
				"armed before the opening, disarmed after the closing")
			assert.True(t, isOpen(writes[0], s.hook, tc.mode), "the first write must open completely: policy and record together")
			assert.Equal(t, s.original, *findWebhook(writes[1], s.hook), "the second write must restore the original exactly")
			assert.NotContains(t, writes[1].Annotations, circuit.Annotation)

			require.Eventually(t, func() bool {
				reasons := eventReasons(t, s.name)
				return contains(reasons, string(decide.Opened)) && contains(reasons, string(decide.Closed))
			}, transition, 50*time.Millisecond, "no CircuitOpened/CircuitClosed Events on the configuration")
		})
	}
}

func mustRecord(t *testing.T, mwc *admissionregistrationv1.MutatingWebhookConfiguration) circuit.Record {
	t.Helper()
	rec, err := circuit.Decode(mwc.Annotations)
	require.NoError(t, err)
	return rec
}

// A crash right after opening must not strand the circuit: a restarted
// guard derives everything from the object and closes after recovery.
func TestBreaker_killedAfterOpenRestartsAndCloses(t *testing.T) {
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	g := s.startGuard("first")
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	s.waitOpen()
	g.Kill()
	exited, code := g.Exited()
	require.True(t, exited)
	t.Logf("first guard killed with SIGKILL (exit code %d) with the circuit open", code)

	s.wh.SetBehaviour(webhookPath, harness.Allow())
	assert.True(t, isOpen(s.get(), s.hook, s.mode), "nothing but the guard may close the circuit")
	s.startGuard("second")
	took := s.waitRestored()
	t.Logf("restarted guard restored the original %s after start", took.Round(time.Millisecond))
	s.writes.requireCount(t, 2, "want one write to open (first guard) and one to close (second guard)")
}

// A configuration deleted and re-created while open carries no stale
// record: the new object (new UID) is a new baseline.
func TestBreaker_recreatedWhileOpenCarriesNoStaleRecord(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Ignore"})
	s.startGuard("guard")
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	_, open := s.waitOpen()
	oldUID := open.UID

	require.NoError(t, env.Client.Delete(ctx, open))
	recreated := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: s.name},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{s.original},
	}
	require.NoError(t, env.Client.Create(ctx, recreated))
	require.NotEqual(t, oldUID, recreated.UID)

	// Still slow: the breaker opens the new object, recording the new UID.
	_, reopened := s.waitOpen()
	assert.Equal(t, recreated.UID, mustRecord(t, reopened)[s.hook].UID)
	s.wh.SetBehaviour(webhookPath, harness.Allow())
	s.waitRestored()
	for _, w := range s.writes.modified() {
		rec, err := circuit.Decode(w.Annotations)
		require.NoError(t, err)
		for hook, e := range rec {
			assert.Equal(t, w.UID, e.UID, "write %s carried a record for %s from another incarnation", w.ResourceVersion, hook)
		}
	}
}

// The override hands the configuration to its administrator during an
// open circuit, and no concurrent update is lost.
func TestBreaker_overrideHandoffDuringOpenLosesNoUpdate(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Bypass"})
	g := s.startGuard("guard")
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	s.waitOpen()

	// The administrator takes over and, at the same moment, edits fields
	// the breaker does not own, in two separate writes.
	r := env.Kubectl(ctx, "", nil, "annotate", "mutatingwebhookconfiguration", s.name, circuit.OverrideAnnotation+"=incident-42")
	require.NoError(t, r.Err, r.Stderr)
	r = env.Kubectl(ctx, "", nil, "label", "mutatingwebhookconfiguration", s.name, "owner=oncall")
	require.NoError(t, r.Err, r.Stderr)
	mwc := s.get()
	findWebhook(mwc, s.hook).TimeoutSeconds = ptr.To[int32](3)
	for err := env.Client.Update(ctx, mwc); apierrors.IsConflict(err); err = env.Client.Update(ctx, mwc) {
		mwc = s.get()
		findWebhook(mwc, s.hook).TimeoutSeconds = ptr.To[int32](3)
	}

	var handed *admissionregistrationv1.MutatingWebhookConfiguration
	require.Eventually(t, func() bool {
		handed = s.get()
		rec, err := circuit.Decode(handed.Annotations)
		return err == nil && rec[s.hook].HandedOff()
	}, transition, 20*time.Millisecond, "the breaker never handed off")
	assert.Equal(t, admissionregistrationv1.Fail, *mustRecord(t, handed)[s.hook].OriginalFailurePolicy, "the entry keeps the original")
	w := findWebhook(handed, s.hook)
	assert.Equal(t, admissionregistrationv1.Ignore, *w.FailurePolicy, "handoff must keep the policy that is there now")
	assert.False(t, hasMarker(w), "handoff removes the breaker's bypass marker")
	assert.Equal(t, "incident-42", handed.Annotations[circuit.OverrideAnnotation])
	assert.Equal(t, "oncall", handed.Labels["owner"], "a concurrent label edit was lost")
	assert.Equal(t, int32(3), *w.TimeoutSeconds, "a concurrent timeoutSeconds edit was lost")
	require.Eventually(t, func() bool { return contains(eventReasons(t, s.name), string(decide.HandedOff)) },
		transition, 50*time.Millisecond, "no HandedOff Event")
	// guard status believes the Event only by these two fields, as core/v1
	// shows them (internal/cli/status handedOffOriginal).
	coreEvents := &corev1.EventList{}
	require.NoError(t, env.Client.List(ctx, coreEvents, client.InNamespace(circuit.EventsNamespace)))
	handedOffEvents := 0
	for _, ev := range coreEvents.Items {
		if ev.Reason == string(decide.HandedOff) && ev.InvolvedObject.Name == s.name {
			handedOffEvents++
			assert.Equal(t, circuit.ReportingController, ev.ReportingController, "reportingComponent")
			assert.Equal(t, handed.UID, ev.InvolvedObject.UID)
		}
	}
	assert.NotZero(t, handedOffEvents, "no HandedOff Event in core/v1")

	// While handed off, the breaker counts nothing and writes nothing.
	// The watch may deliver the handoff write a little after a read saw
	// it; count from there.
	s.writes.waitFor(t, handed.ResourceVersion)
	writes := len(s.writes.modified())
	require.Eventually(t, func() bool {
		now, err := guardStatus(g)
		return err == nil && strings.Contains(now.Problem, "handed over") && now.Failures == 0
	}, transition, 20*time.Millisecond, "the handed-off target kept counting")
	assert.Len(t, s.writes.modified(), writes, "the breaker wrote to a handed-off configuration")

	// Removing the annotation hands it back: the kept original is the
	// breaker's again. Once the webhook answers, the circuit closes to it,
	// with the administrator's timeoutSeconds.
	r = env.Kubectl(ctx, "", nil, "annotate", "mutatingwebhookconfiguration", s.name, circuit.OverrideAnnotation+"-")
	require.NoError(t, r.Err, r.Stderr)
	s.wh.SetBehaviour(webhookPath, harness.Allow())
	s.original.TimeoutSeconds = ptr.To[int32](3)
	s.waitRestored()
}

// With two replicas only the leader writes; when it dies, the other
// takes over from the state on the object.
func TestBreaker_twoReplicasOnlyOneWrites(t *testing.T) {
	s := newBreakerSetup(t, setupOptions{mode: "Ignore"})
	a := s.startGuard("a")
	b := s.startGuard("b")
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	s.waitOpen()
	const wrote = "Wrote a circuit transition"
	require.Eventually(t, func() bool { return a.CountLogLines(wrote)+b.CountLogLines(wrote) >= 1 }, transition, 20*time.Millisecond)
	leader, follower := a, b
	if b.CountLogLines(wrote) > 0 {
		leader, follower = b, a
	}
	assert.Equal(t, 1, leader.CountLogLines(wrote))
	assert.Equal(t, 0, follower.CountLogLines(wrote), "the follower wrote")
	s.writes.requireCount(t, 1, "want exactly the leader's write to open")

	leader.Kill()
	s.wh.SetBehaviour(webhookPath, harness.Allow())
	s.waitRestored()
	// The process logs the write just after the apiserver has it.
	require.Eventually(t, func() bool { return follower.CountLogLines(wrote) == 1 }, transition, 20*time.Millisecond,
		"the new leader must write the close, once")
	s.writes.requireCount(t, 2, "want the open and the close, nothing else")
}

// A probe that cannot run for reasons on the guard's side (here: no RBAC
// to read the webhook's Service) counts as unknown and never opens.
func TestBreaker_guardSideFailureIsUnknownNotUnhealthy(t *testing.T) {
	s := newBreakerSetup(t, setupOptions{mode: "Ignore", service: true, noRBAC: []string{"services"}})
	g := s.startGuard("guard")
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	require.Eventually(t, func() bool {
		return strings.Count(g.Logs(), "Probe could not run; nothing counted") >= 10
	}, transition, 50*time.Millisecond, "the guard never reported unknown probes")
	st, err := guardStatus(g)
	require.NoError(t, err)
	assert.Zero(t, st.Failures)
	assert.Contains(t, st.Last, "Unknown")
	assert.Empty(t, s.writes.modified(), "an unknown probe must change nothing")
	assert.Equal(t, admissionregistrationv1.Fail, *findWebhook(s.get(), s.hook).FailurePolicy)
	_ = corev1.EventTypeWarning
}

// A target whose configuration, then whose webhook, does not exist yet is
// reported, and picked up when it appears.
func TestBreaker_missingTargetIsReportedAndPickedUp(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Ignore"})
	full := s.get()
	require.NoError(t, env.Client.Delete(ctx, full))
	g := s.startGuard("guard")

	require.Eventually(t, func() bool {
		st, err := guardStatus(g)
		return err == nil && strings.Contains(st.Problem, "MutatingWebhookConfiguration not found")
	}, transition, 20*time.Millisecond, "a missing configuration was not reported")

	// The configuration appears without the target webhook: an Event says so.
	partial := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: s.name},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{*findWebhook(full, "other."+s.name+".webhook-guard.io")},
	}
	require.NoError(t, env.Client.Create(ctx, partial))
	require.Eventually(t, func() bool { return contains(eventReasons(t, s.name), "TargetMissing") },
		transition, 50*time.Millisecond, "no TargetMissing Event on the configuration")

	// The webhook appears, and the breaker works on it.
	partial.Webhooks = append(partial.Webhooks, s.original)
	require.NoError(t, env.Client.Update(ctx, partial))
	waitHealthyProbes(t, g, 2)
	s.wh.SetBehaviour(webhookPath, harness.Delayed(2*time.Second, harness.Allow()))
	s.waitOpen()
}

// marked returns the value of the marking label on obj, if any.
func marked(obj client.Object) (string, bool) {
	v, ok := obj.GetLabels()[circuit.UnmutatedLabel]
	return v, ok
}
