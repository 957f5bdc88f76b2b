package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const (
	namespace = "demo"
	service   = "slow-mutator"
	webhook   = "slow-mutator.example.com"
	path      = "/mutate"
	// delay is how long the slow webhook sleeps, against timeoutSeconds 1.
	delay   = 2 * time.Second
	guardNS = "webhook-guard-system"
	// pod is the pod label the scrape adds, as a ServiceMonitor would.
	pod = "webhook-guard-7c9d4b6f58-x2x4q"
	// loadClients create ConfigMaps side by side, enough calls for the
	// apiserver signal (minRequests 3) to judge even while each call waits
	// for the timeout.
	loadClients = 4
)

// recording is what happened when, for the axes and the marks.
type recording struct {
	// start and end are the first and last scrape.
	start, end time.Time
	// slow, opened, recovered and closed are the outage's moments.
	slow, opened, recovered, closed time.Time
	// namespace is the guard's namespace, for the $namespace variable.
	namespace string
	// created and rejected count the scenario's ConfigMap creates.
	created, rejected atomic.Int64
}

// record runs the scenario, scraping into s throughout.
func record(ctx context.Context, s *store, apiserver bool) (_ *recording, err error) {
	say("starting kube-apiserver and etcd")
	env, err := harness.Start(harness.Options{})
	if err != nil {
		return nil, err
	}
	defer env.Stop()

	ip := harness.NextServiceIP()
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: ip, DNSNames: []string{service + "." + namespace + ".svc"}})
	if err != nil {
		return nil, err
	}
	defer wh.Close()
	wh.SetBehaviour(path, harness.Allow())
	if err := env.ServiceFor(ctx, namespace, service, ip, wh.Port()); err != nil {
		return nil, err
	}
	if err := env.Client.Create(ctx, configuration(wh)); err != nil {
		return nil, err
	}
	guardID, err := env.ServiceAccount(ctx, guardNS, "webhook-guard")
	if err != nil {
		return nil, err
	}
	if err := env.GrantGuard(ctx, guardNS, guardID, []string{service}); err != nil {
		return nil, err
	}
	token, err := metricsReader(ctx, env)
	if err != nil {
		return nil, err
	}
	addr, err := harness.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	say("building and starting the guard (probes every 200ms, open after 3 failures, close after 3 successes)")
	g, err := env.StartGuard(harness.GuardOptions{Name: "dashboard", Kubeconfig: guardID.KubeconfigPath, Config: guardConfig,
		Args: []string{"--zap-log-level", "info", "--metrics-bind-address", addr, "--leader-elect", "--leader-election-namespace", guardNS}})
	if err != nil {
		return nil, err
	}
	defer g.Stop()

	sc := &scraper{
		store: s, env: env, apiserver: apiserver, url: "https://" + addr + "/metrics", token: token,
		http:   &http.Client{Timeout: 900 * time.Millisecond, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}, //nolint:gosec // loopback, self-signed
		target: labels.FromStrings("job", "webhook-guard", "namespace", guardNS, "pod", pod, "instance", addr),
	}
	if err := sc.waitServing(ctx, g); err != nil {
		return nil, err
	}
	rec := &recording{namespace: guardNS}
	scrapeCtx, stopScraping := context.WithCancel(context.Background())
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		sc.run(scrapeCtx)
	}()
	defer func() {
		stopScraping()
		<-scraped
		rec.start, rec.end = sc.first, sc.last
		if err == nil && sc.failed > 0 {
			say("%d of the scrapes failed", sc.failed)
		}
	}()

	defer startLoad(ctx, env, rec)()
	if err := playOutage(ctx, wh, env, g, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// startLoad starts loadClients creating ConfigMaps, counted in rec, and
// returns the function that stops them.
func startLoad(ctx context.Context, env *harness.Env, rec *recording) (stop func()) {
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	for range loadClients {
		load.Add(1)
		go func() {
			defer load.Done()
			createLoop(loadCtx, env, rec)
		}()
	}
	return func() {
		stopLoad()
		load.Wait()
	}
}

// playOutage plays the scenario under load: healthy, slow until the
// circuit opens and for the outage, recovered until it closes, healthy
// again; rec notes when each happened.
func playOutage(ctx context.Context, wh *harness.Webhook, env *harness.Env, g *harness.Guard, rec *recording) error {
	var err error
	say("healthy for %s", *healthy)
	if err := sleep(ctx, *healthy); err != nil {
		return err
	}
	wh.SetBehaviour(path, harness.Delayed(delay, harness.Allow()))
	rec.slow = time.Now()
	say("the webhook turned slow (%s against timeoutSeconds 1)", delay)
	if rec.opened, err = waitFor(ctx, env, open); err != nil {
		return fmt.Errorf("%w\n%s", err, g.Logs())
	}
	say("circuit opened %s after the webhook turned slow", rec.opened.Sub(rec.slow).Round(time.Millisecond))
	if err := sleep(ctx, time.Until(rec.slow.Add(*outage))); err != nil {
		return err
	}
	wh.SetBehaviour(path, harness.Allow())
	rec.recovered = time.Now()
	say("the webhook recovered")
	if rec.closed, err = waitFor(ctx, env, restored); err != nil {
		return fmt.Errorf("%w\n%s", err, g.Logs())
	}
	say("circuit closed %s after the webhook recovered", rec.closed.Sub(rec.recovered).Round(time.Millisecond))
	if err := sleep(ctx, *healthy); err != nil {
		return err
	}
	say("%d ConfigMaps created, %d rejected", rec.created.Load(), rec.rejected.Load())
	return nil
}

// guardConfig probes fast so that the scenario is short.
var guardConfig = fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
apiserverScrapeInterval: 1s
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  mode: Ignore
  openAfter: 3
  closeAfter: 3
  probe:
    interval: 200ms
    timeout: 500ms
`, service, webhook)

// configuration is the guarded webhook: failurePolicy Fail, timeoutSeconds
// 1, ConfigMap creates in the demo namespace.
func configuration(wh *harness.Webhook) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: service},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    webhook,
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](1),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: service, Path: ptr.To(path), Port: ptr.To(wh.Port())},
				CABundle: wh.CA.CertPEM,
			},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
		}},
	}
}

// createLoop creates a ConfigMap about every 250ms (one at a time) until
// ctx ends, so the apiserver calls the webhook throughout.
func createLoop(ctx context.Context, env *harness.Env, rec *recording) {
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := env.Client.Create(cctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "load-"}})
		cancel()
		switch {
		case ctx.Err() != nil:
		case err != nil:
			rec.rejected.Add(1)
		default:
			rec.created.Add(1)
		}
		_ = sleep(ctx, 250*time.Millisecond)
	}
}

// metricsReader returns the token of a ServiceAccount allowed to read the
// guard's metrics endpoint, as Prometheus's would be.
func metricsReader(ctx context.Context, env *harness.Env) (string, error) {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "dashboard-metrics-reader"},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
	}
	if err := env.Client.Create(ctx, role); err != nil {
		return "", err
	}
	id, err := env.ServiceAccount(ctx, "monitoring", "prometheus")
	if err != nil {
		return "", err
	}
	if err := env.Bind(ctx, role.Name, role.Name, "monitoring", "prometheus"); err != nil {
		return "", err
	}
	return id.Token, nil
}

func open(m *admissionregistrationv1.MutatingWebhookConfiguration) bool {
	rec, err := circuit.Decode(m.Annotations)
	return err == nil && len(rec) > 0 && *m.Webhooks[0].FailurePolicy == admissionregistrationv1.Ignore
}

func restored(m *admissionregistrationv1.MutatingWebhookConfiguration) bool {
	_, rec := m.Annotations[circuit.Annotation]
	return !rec && *m.Webhooks[0].FailurePolicy == admissionregistrationv1.Fail && len(m.Webhooks[0].MatchConditions) == 0
}

// waitFor polls the configuration until cond holds and returns when.
func waitFor(ctx context.Context, env *harness.Env, cond func(*admissionregistrationv1.MutatingWebhookConfiguration) bool) (time.Time, error) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: service}, m); err != nil {
			return time.Time{}, err
		}
		if cond(m) {
			return time.Now(), nil
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
	return time.Time{}, fmt.Errorf("the configuration never reached the expected state in 60s")
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// scraper scrapes the guard (and, when asked, kube-apiserver) once a
// second into the store, as Prometheus would with scrape_interval 1s.
type scraper struct {
	store     *store
	env       *harness.Env
	apiserver bool
	url       string
	token     string
	http      *http.Client
	target    labels.Labels

	first, last time.Time
	failed      int
}

func (s *scraper) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		s.once()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *scraper) once() {
	ctx := context.Background()
	// Samples carry the scheduled time, a whole number of intervals after
	// the first scrape, so that each query step sees the scrape of its
	// own second and not, by a few milliseconds of jitter, the one before.
	at := time.Now().Truncate(time.Millisecond)
	if !s.first.IsZero() {
		at = s.first.Add(at.Sub(s.first).Round(time.Second))
	}
	body, err := s.get(ctx)
	if err != nil {
		s.failed++
		say("scraping the guard: %v", err)
	}
	var r io.Reader
	if err == nil {
		r = strings.NewReader(body)
	}
	if err := s.store.appendScrape(s.target, at.UnixMilli(), r); err != nil {
		say("storing the guard's scrape: %v", err)
	}
	if s.apiserver {
		data, err := s.env.Clientset.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		var r io.Reader
		if err == nil {
			r = strings.NewReader(string(data))
		} else {
			say("scraping kube-apiserver: %v", err)
		}
		target := labels.FromStrings("job", "apiserver", "instance", strings.TrimPrefix(s.env.Config.Host, "https://"))
		if err := s.store.appendScrape(target, at.UnixMilli(), r); err != nil {
			say("storing kube-apiserver's scrape: %v", err)
		}
	}
	if s.first.IsZero() {
		s.first = at
	}
	s.last = at
}

func (s *scraper) get(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %.200s", resp.Status, data)
	}
	return string(data), nil
}

// waitServing waits until the guard's metrics endpoint answers.
func (s *scraper) waitServing(ctx context.Context, g *harness.Guard) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := s.get(ctx)
		if err == nil {
			return nil
		}
		if exited, code := g.Exited(); exited {
			return fmt.Errorf("the guard exited with %d before serving its metrics\n%s", code, g.Logs())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the guard's metrics did not answer in 2 minutes: %w", err)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}
