package conformance

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/certs"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const (
	// defaultHealthyFor is how long healthy traffic runs before the outage.
	defaultHealthyFor = 3 * time.Minute
	// transition bounds a wait for the breaker to act. With probes every
	// 200 ms and thresholds of 3 it normally takes about a second; the
	// bound is generous for a loaded 2-core machine.
	transition = time.Minute
)

// healthyFor is defaultHealthyFor, or WEBHOOK_GUARD_CONFORMANCE_HEALTHY
// (a Go duration) for a quicker local iteration; the issue asks for 3
// minutes and make test runs that.
func healthyFor(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("WEBHOOK_GUARD_CONFORMANCE_HEALTHY")
	if v == "" {
		return defaultHealthyFor
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "WEBHOOK_GUARD_CONFORMANCE_HEALTHY")
	t.Logf("healthy traffic shortened to %s by WEBHOOK_GUARD_CONFORMANCE_HEALTHY", d)
	return d
}

// target is one webhook of a real webhook server, in one kind of
// configuration, and the mode the guard opens it in.
type target struct {
	kind   circuit.Kind
	config string
	hook   string
	mode   string
}

func (tg target) String() string { return strings.ToLower(string(tg.kind)) }

func (tg target) resource() string {
	if tg.kind == circuit.KindValidating {
		return "validatingwebhookconfigurations"
	}
	return "mutatingwebhookconfigurations"
}

// hookState is what the breaker owns on one webhook, as stored.
type hookState struct {
	uid         types.UID
	annotations map[string]string
	policy      *admissionregistrationv1.FailurePolicyType
	conditions  []admissionregistrationv1.MatchCondition
	found       bool
}

func getState(ctx context.Context, tg target) (hookState, error) {
	var s hookState
	key := client.ObjectKey{Name: tg.config}
	if tg.kind == circuit.KindValidating {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, key, vwc); err != nil {
			return s, err
		}
		s.uid, s.annotations = vwc.UID, vwc.Annotations
		for _, w := range vwc.Webhooks {
			if w.Name == tg.hook {
				s.found, s.policy, s.conditions = true, w.FailurePolicy, w.MatchConditions
			}
		}
		return s, nil
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := env.Client.Get(ctx, key, mwc); err != nil {
		return s, err
	}
	s.uid, s.annotations = mwc.UID, mwc.Annotations
	for _, w := range mwc.Webhooks {
		if w.Name == tg.hook {
			s.found, s.policy, s.conditions = true, w.FailurePolicy, w.MatchConditions
		}
	}
	return s, nil
}

func (s hookState) marker() bool {
	for _, c := range s.conditions {
		if c.Name == circuit.BypassCondition {
			return true
		}
	}
	return false
}

// open: the breaker's changes are in place for this incarnation, in mode.
func (s hookState) open(tg target) bool {
	rec, err := circuit.Decode(s.annotations)
	if err != nil || !s.found {
		return false
	}
	entry, ok := rec[tg.hook]
	return ok && entry.UID == s.uid && string(entry.Mode) == tg.mode &&
		s.policy != nil && *s.policy == admissionregistrationv1.Ignore && s.marker() == (tg.mode == "Bypass")
}

// closed: no entry, Fail restored, no marker.
func (s hookState) closed(tg target) bool {
	rec, err := circuit.Decode(s.annotations)
	if err != nil || !s.found {
		return false
	}
	_, ok := rec[tg.hook]
	return !ok && s.policy != nil && *s.policy == admissionregistrationv1.Fail && !s.marker()
}

// rawConfig is the configuration exactly as kube-apiserver serves it, in JSON.
func rawConfig(ctx context.Context, tg target) ([]byte, error) {
	return env.Clientset.AdmissionregistrationV1().RESTClient().Get().
		Resource(tg.resource()).Name(tg.config).SetHeader("Accept", "application/json").DoRaw(ctx)
}

var (
	resourceVersionField = regexp.MustCompile(`"resourceVersion":"[0-9]+",`)
	generationField      = regexp.MustCompile(`"generation":[0-9]+,`)
)

// withoutVersions removes metadata.resourceVersion and metadata.generation
// from a configuration as served; nothing else.
func withoutVersions(t *testing.T, raw []byte) []byte {
	t.Helper()
	require.Len(t, resourceVersionField.FindAll(raw, -1), 1, "want exactly one resourceVersion in %s", raw)
	require.Len(t, generationField.FindAll(raw, -1), 1, "want exactly one generation in %s", raw)
	return generationField.ReplaceAll(resourceVersionField.ReplaceAll(raw, nil), nil)
}

// describeDifference names what differs between two served objects: the
// top-level and metadata fields, and managedFields in full.
func describeDifference(before, after []byte) string {
	var b, a map[string]any
	if json.Unmarshal(before, &b) != nil || json.Unmarshal(after, &a) != nil {
		return "unparseable"
	}
	var out []string
	bm, _ := b["metadata"].(map[string]any)
	am, _ := a["metadata"].(map[string]any)
	for k := range union(bm, am) {
		if k == "resourceVersion" || k == "generation" {
			continue
		}
		if !jsonEqual(bm[k], am[k]) {
			bj, _ := json.Marshal(bm[k])
			aj, _ := json.Marshal(am[k])
			out = append(out, fmt.Sprintf("metadata.%s: before %s, after %s", k, bj, aj))
		}
	}
	for k := range union(b, a) {
		if k != "metadata" && !jsonEqual(b[k], a[k]) {
			bj, _ := json.Marshal(b[k])
			aj, _ := json.Marshal(a[k])
			out = append(out, fmt.Sprintf("%s: before %s, after %s", k, bj, aj))
		}
	}
	return strings.Join(out, "\n")
}

func union(a, b map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func jsonEqual(a, b any) bool {
	aj, _ := json.Marshal(a)
	bj, _ := json.Marshal(b)
	return bytes.Equal(aj, bj)
}

// writeWatch records every write to one configuration from a watch
// started at resourceVersion rv.
type writeWatch struct {
	mu     sync.Mutex
	writes []string // resourceVersions of MODIFIED and DELETED events
}

func watchWrites(t *testing.T, tg target, rv string) *writeWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", tg.config).String(), ResourceVersion: rv}
	var w watch.Interface
	var err error
	if tg.kind == circuit.KindValidating {
		w, err = env.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Watch(ctx, opts)
	} else {
		w, err = env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Watch(ctx, opts)
	}
	require.NoError(t, err)
	l := &writeWatch{}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Modified && ev.Type != watch.Deleted {
				continue
			}
			obj, ok := ev.Object.(metav1.Object)
			if !ok {
				continue
			}
			l.mu.Lock()
			l.writes = append(l.writes, string(ev.Type)+" "+obj.GetResourceVersion())
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *writeWatch) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.writes)
}

// openingEvents lists the CircuitOpened Events on a configuration.
func openingEvents(ctx context.Context, tg target) ([]string, error) {
	list := &eventsv1.EventList{}
	if err := env.Client.List(ctx, list, client.InNamespace(circuit.EventsNamespace)); err != nil {
		return nil, err
	}
	kind := string(tg.kind) + "WebhookConfiguration"
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == tg.config && e.Regarding.Kind == kind && e.Reason == "CircuitOpened" {
			out = append(out, e.Note)
		}
	}
	return out, nil
}

// process is a real webhook server running as a child process.
type process struct {
	name string
	cmd  *exec.Cmd
	logs *harness.SyncBuffer
	done chan struct{}
}

func startProcess(t *testing.T, name, bin string, env []string, args ...string) *process {
	t.Helper()
	p := &process{name: name, logs: &harness.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.Env = append(os.Environ(), env...)
	require.NoError(t, p.cmd.Start(), "starting %s", name)
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, p.logs.String())
		}
	})
	return p
}

func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig), "signalling %s", p.name)
}

func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitServing waits until addr completes a TLS handshake trusted by
// caPEM, and fails early if the process exits.
func (p *process) waitServing(t *testing.T, addr string, caPEM []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	host, _, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	exited := false
	require.Eventually(t, func() bool {
		select {
		case <-p.done:
			exited = true
			return true
		default:
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12})
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	}, transition, 50*time.Millisecond, "%s never served TLS on %s", p.name, addr)
	require.False(t, exited, "%s exited before it served:\n%s", p.name, p.logs.String())
}

// servingCert writes a fresh CA's certificate for 127.0.0.1 to dir as
// tls.crt and tls.key, and returns the CA (PEM) for caBundle.
func servingCert(t *testing.T, dir string) []byte {
	t.Helper()
	ca, err := certs.NewCA("webhook-guard-conformance-ca", 24*time.Hour)
	require.NoError(t, err)
	pair, err := ca.Issue([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, 24*time.Hour)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt"), pair.CertPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.key"), pair.KeyPEM, 0o600))
	return ca.CertPEM
}

// freePort returns a free loopback port.
func freePort(t *testing.T) int {
	t.Helper()
	addr, err := harness.FreeLoopbackAddr()
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	var n int
	_, err = fmt.Sscan(port, &n)
	require.NoError(t, err)
	return n
}

// suite is one real webhook server under test: its process, its two
// targets, the traffic that exercises both, and the guard.
type suite struct {
	t       *testing.T
	name    string // for the log lines: crwebhook, cert-manager
	ns      string
	process *process
	targets []target
	// traffic makes one round of requests through kube-apiserver that
	// both webhooks see; it returns an error when one was not handled as
	// the healthy webhooks handle it (admitted and mutated, or denied by
	// the validator itself). round counts from 0.
	traffic func(ctx context.Context, round int) error
}

// guardConfig renders the GuardConfiguration: probes every 200 ms, both
// signals on, the first target (mutating) in Bypass mode and the second
// (validating) in Ignore mode. instance keeps this guard's policy apart
// from the other tests' guards, which run in parallel.
func (s *suite) guardConfig(instance string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\napiserverScrapeInterval: 1s\ninstance: %s\ntargets:\n", instance)
	for _, tg := range s.targets {
		approval := "allowAdmissionWithoutMutation"
		if tg.kind == circuit.KindValidating {
			approval = "allowAdmissionWithoutValidation"
		}
		fmt.Fprintf(&b, `- kind: %s
  configuration: %s
  webhook: %s
  %s: true
  mode: %s
  openAfter: 3
  closeAfter: 3
  probe:
    interval: 200ms
    timeout: 1s
  apiserverSignal:
    enabled: true
    minRequests: 3
    minOpen: 1s
`, tg.kind, tg.config, tg.hook, approval, tg.mode)
	}
	return b.String()
}

// startGuard runs the real guard binary, with the RBAC make manifests
// renders for these targets and this instance.
func (s *suite) startGuard(instance string) *harness.Guard {
	t := s.t
	t.Helper()
	ctx := context.Background()
	id, err := env.ServiceAccount(ctx, s.ns, "webhook-guard")
	require.NoError(t, err)
	var names []string
	for _, tg := range s.targets {
		names = append(names, tg.config)
	}
	require.NoError(t, env.GrantGuard(ctx, s.ns, id, names))
	// "guard manifests rbac" for a named instance: update on its own
	// policy objects.
	policy := "webhook-guard-" + instance
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "guard-policy-" + s.ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
		ResourceNames: []string{policy}, Verbs: []string{"update"},
	}}}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Bind(ctx, role.Name, role.Name, s.ns, "webhook-guard"))

	g := env.StartGuardT(t, harness.GuardOptions{
		Name: s.name, Kubeconfig: id.KubeconfigPath, Config: s.guardConfig(instance),
		Args: []string{"--leader-elect", "--leader-election-namespace", s.ns},
	})
	return g
}

// statusRow is the part of the guard's /status this suite reads.
type statusRow struct {
	Kind              string `json:"kind"`
	Webhook           string `json:"webhook"`
	LastResult        string `json:"lastResult"`
	Failures          int    `json:"consecutiveFailures"`
	Successes         int    `json:"consecutiveSuccesses"`
	Problem           string `json:"problem"`
	APIServerLast     string `json:"apiserverLastResult"`
	APIServerFailures int    `json:"apiserverConsecutiveFailures"`
}

func guardStatus(g *harness.Guard) ([]statusRow, error) {
	resp, err := http.Get(g.StatusURL)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var rows []statusRow
	return rows, json.NewDecoder(resp.Body).Decode(&rows)
}

// signals is what one target's two signals said during healthy traffic.
type signals struct {
	probeHealthy, apiserverHealthy        int // samples whose last result was Healthy
	maxProbeFailures, maxAPIFailures      int // the most consecutive failures seen
	lastProbe, lastAPIServer, lastProblem string
}

// run is the whole conformance cycle on s: the guard started on the
// webhooks' untouched configurations, healthy traffic for healthyFor,
// an outage, recovery, and the comparison with the configurations as
// they were before the guard started.
func (s *suite) run(instance string) {
	t := s.t
	ctx := context.Background()

	// The configurations before the guard: byte for byte as served, and a
	// watch from there that sees every write.
	before := map[target][]byte{}
	writes := map[target]*writeWatch{}
	for _, tg := range s.targets {
		raw, err := rawConfig(ctx, tg)
		require.NoError(t, err)
		before[tg] = raw
		var meta struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		require.NoError(t, json.Unmarshal(raw, &meta))
		writes[tg] = watchWrites(t, tg, meta.Metadata.ResourceVersion)
	}

	// The webhooks are live in kube-apiserver before the guard starts.
	require.Eventually(t, func() bool { return s.traffic(ctx, 0) == nil }, transition, 100*time.Millisecond,
		"%s: the webhooks never handled traffic through kube-apiserver", s.name)

	g := s.startGuard(instance)

	// Healthy traffic for healthyFor, sampling the guard's view of both
	// signals meanwhile.
	d := healthyFor(t)
	seen := map[string]*signals{}
	for _, tg := range s.targets {
		seen[string(tg.kind)+"/"+tg.hook] = &signals{}
	}
	var trafficErrs []string
	rounds := 0
	deadline := time.Now().Add(d)
	tick := time.NewTicker(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		<-tick.C
		if err := s.traffic(ctx, rounds); err != nil {
			trafficErrs = append(trafficErrs, err.Error())
		}
		rounds++
		rows, err := guardStatus(g)
		if err != nil {
			continue
		}
		for _, r := range rows {
			sg, ok := seen[r.Kind+"/"+r.Webhook]
			if !ok {
				continue
			}
			if strings.HasPrefix(r.LastResult, "Healthy") {
				sg.probeHealthy++
			}
			if r.APIServerLast == "Healthy" {
				sg.apiserverHealthy++
			}
			sg.maxProbeFailures = max(sg.maxProbeFailures, r.Failures)
			sg.maxAPIFailures = max(sg.maxAPIFailures, r.APIServerFailures)
			sg.lastProbe, sg.lastAPIServer, sg.lastProblem = r.LastResult, r.APIServerLast, r.Problem
		}
	}
	tick.Stop()
	t.Logf("conformance: %s: %d rounds of healthy traffic in %s, %d not handled as healthy webhooks handle them", s.name, rounds, d, len(trafficErrs))
	if len(trafficErrs) > 0 {
		t.Errorf("%s: %d of %d rounds were not handled as the healthy webhooks handle them; the first: %s",
			s.name, len(trafficErrs), rounds, strings.Join(trafficErrs[:min(3, len(trafficErrs))], "; "))
	}
	healthyOpenings := map[target]int{}
	for _, tg := range s.targets {
		sg := seen[string(tg.kind)+"/"+tg.hook]
		opened, err := openingEvents(ctx, tg)
		require.NoError(t, err)
		st, err := getState(ctx, tg)
		require.NoError(t, err)
		t.Logf("conformance: %s %s: healthy: writes=%d openings=%d probe-healthy-samples=%d apiserver-healthy-samples=%d max-probe-failures=%d max-apiserver-failures=%d last-probe=%q last-apiserver=%q problem=%q",
			s.name, tg, writes[tg].count(), len(opened), sg.probeHealthy, sg.apiserverHealthy, sg.maxProbeFailures, sg.maxAPIFailures, sg.lastProbe, sg.lastAPIServer, sg.lastProblem)
		healthyOpenings[tg] = len(opened)
		assert.Zero(t, writes[tg].count(), "%s %s: the guard wrote to the configuration during healthy traffic", s.name, tg)
		assert.Empty(t, opened, "%s %s: CircuitOpened during healthy traffic", s.name, tg)
		assert.True(t, st.closed(tg), "%s %s: not closed after healthy traffic", s.name, tg)
		assert.Positive(t, sg.probeHealthy, "%s %s: the direct probe never judged the webhook healthy (last: %s)", s.name, tg, sg.lastProbe)
		assert.Positive(t, sg.apiserverHealthy, "%s %s: the apiserver signal never judged the webhook healthy (last: %s)", s.name, tg, sg.lastAPIServer)
	}
	if t.Failed() {
		return
	}

	// Outage: the webhook process stops (no traffic meanwhile: in Ignore
	// mode every request would wait the webhook's timeoutSeconds).
	s.process.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	openAfter := s.waitAll(func(st hookState, tg target) bool { return st.open(tg) }, "opened after SIGSTOP")

	// Recovery.
	s.process.signal(t, syscall.SIGCONT)
	resumed := time.Now()
	closeAfter := s.waitAll(func(st hookState, tg target) bool { return st.closed(tg) }, "closed after SIGCONT")

	for _, tg := range s.targets {
		opened, err := openingEvents(ctx, tg)
		require.NoError(t, err)
		for _, n := range opened {
			t.Logf("conformance: %s %s: CircuitOpened: %s", s.name, tg, n)
		}
		assert.Len(t, opened, 1, "%s %s: want exactly one opening, for the outage", s.name, tg)
		// The fixed, greppable summary line: failed, openings during
		// healthy traffic, time to open after SIGSTOP and to close after
		// SIGCONT, then the openings during the outage.
		t.Logf("conformance: %s %s: %t openings=%d open=%s close=%s outage-openings=%d",
			s.name, tg, t.Failed(), healthyOpenings[tg], openAfter[tg].Sub(stopped).Round(10*time.Millisecond), closeAfter[tg].Sub(resumed).Round(10*time.Millisecond), len(opened))
	}

	// Byte-identical to before, apart from resourceVersion and generation
	// and, in metadata.managedFields, the ownership of the webhook's
	// failurePolicy: the guard's writes set it (to Ignore, then back), so
	// kube-apiserver's field management records the guard's manager as its
	// owner and takes it from the configuration's author. That one change
	// is required exactly and reported; any other is a failure.
	// The breaker disarms a mutating circuit's marking 2 s after the
	// write that closed it (docs/how-it-works.md, "Ordering"): compare
	// after that write.
	for _, tg := range s.targets {
		require.Eventually(t, func() bool {
			raw, err := rawConfig(ctx, tg)
			return err == nil && !bytes.Contains(raw, []byte(circuit.ArmingAnnotation))
		}, time.Minute, 100*time.Millisecond, "%s %s: marking was never disarmed after the close", s.name, tg)
	}
	for _, tg := range s.targets {
		after, err := rawConfig(ctx, tg)
		require.NoError(t, err)
		b, a := withoutVersions(t, before[tg]), withoutVersions(t, after)
		if bytes.Equal(b, a) {
			t.Logf("conformance: %s %s: byte-identical to before apart from resourceVersion and generation (%d bytes)", s.name, tg, len(after))
			continue
		}
		bm, bOwn := splitManagedFields(t, b, tg.hook)
		am, aOwn := splitManagedFields(t, a, tg.hook)
		if !bytes.Equal(bm, am) {
			t.Errorf("conformance: %s %s: the configuration differs from before the guard beyond resourceVersion, generation and the failurePolicy's owner in managedFields:\n%s\nbefore: %s\nafter:  %s",
				s.name, tg, describeDifference(before[tg], after), before[tg], after)
			continue
		}
		t.Logf("conformance: %s %s: byte-identical to before apart from resourceVersion, generation and metadata.managedFields, where only the owner of webhooks[name=%s].failurePolicy changed: before %s, after %s",
			s.name, tg, tg.hook, bOwn, aOwn)
	}
}

// splitManagedFields returns the served object with the ownership of the
// webhook hook's failurePolicy taken out of metadata.managedFields
// (entries left owning nothing are dropped), and who owned it: manager
// and operation of each entry that did.
func splitManagedFields(t *testing.T, raw []byte, hook string) ([]byte, string) {
	t.Helper()
	var obj map[string]any
	require.NoError(t, json.Unmarshal(raw, &obj))
	meta, _ := obj["metadata"].(map[string]any)
	entries, _ := meta["managedFields"].([]any)
	var kept []any
	var owners []string
	for _, e := range entries {
		entry, _ := e.(map[string]any)
		fields, _ := entry["fieldsV1"].(map[string]any)
		webhooks, _ := fields["f:webhooks"].(map[string]any)
		key := `k:{"name":"` + hook + `"}`
		w, _ := webhooks[key].(map[string]any)
		if _, ok := w["f:failurePolicy"]; ok {
			owners = append(owners, fmt.Sprintf("%s/%s", entry["manager"], entry["operation"]))
			delete(w, "f:failurePolicy")
			if len(w) == 0 {
				delete(webhooks, key)
			}
			if len(webhooks) == 0 {
				delete(fields, "f:webhooks")
			}
			if len(fields) == 0 {
				continue
			}
		}
		kept = append(kept, entry)
	}
	meta["managedFields"] = kept
	out, err := json.Marshal(obj)
	require.NoError(t, err)
	return out, "[" + strings.Join(owners, " ") + "]"
}

// waitAll polls every target until done holds for it, and returns when
// each first did.
func (s *suite) waitAll(done func(hookState, target) bool, what string) map[target]time.Time {
	t := s.t
	t.Helper()
	at := map[target]time.Time{}
	require.Eventually(t, func() bool {
		for _, tg := range s.targets {
			if _, ok := at[tg]; ok {
				continue
			}
			st, err := getState(context.Background(), tg)
			if err == nil && done(st, tg) {
				at[tg] = time.Now()
			}
		}
		return len(at) == len(s.targets)
	}, transition, 20*time.Millisecond, "%s: not every circuit %s", s.name, what)
	return at
}

// buildCommand runs a build command in the repository and returns its stdout.
func buildCommand(t *testing.T, name string, args ...string) string {
	t.Helper()
	root, err := harness.RepoRoot()
	require.NoError(t, err)
	cmd := exec.Command(name, args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	require.NoError(t, err, "%s %v:\n%s", name, args, stderr.String())
	t.Logf("%s %s: %s", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return strings.TrimSpace(string(out))
}
