// Command demo starts a local control plane (kube-apiserver and etcd built
// from source), a sample slow mutating webhook behind a real Service on a
// port other than 443, and the real guard binary running as its own
// ServiceAccount. It shows what each failure policy costs a client, and
// the guard opening and closing the circuit. Run it with "make demo".
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"
	"text/tabwriter"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/hack/latency"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const (
	namespace = "demo"
	service   = "slow-mutator"
	webhook   = "slow-mutator.example.com"
	path      = "/mutate"
	delay     = 2 * time.Second
	guardNS   = "webhook-guard-system"
)

// samples is the number of creates per case (-samples); jsonOut, when set,
// receives the table as JSON (-json), for make bench.
var (
	samples = 5
	jsonOut string
)

func main() {
	flag.IntVar(&samples, "samples", samples, "ConfigMap creates per case.")
	flag.StringVar(&jsonOut, "json", "", "Write the latency table as JSON to this file.")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type demo struct {
	env      *harness.Env
	wh       *harness.Webhook
	guardID  *harness.Identity
	rows     []row
	timeline []string
	start    time.Time
}

func run(ctx context.Context) error {
	say("starting kube-apiserver and etcd (building them first if missing: about 11 minutes the first time)")
	env, err := harness.Start(harness.Options{})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping the control plane")
		env.Stop()
	}()
	d := &demo{env: env, start: time.Now()}

	ip := harness.NextServiceIP()
	d.wh, err = harness.StartWebhook(harness.WebhookOptions{Host: ip, DNSNames: []string{service + "." + namespace + ".svc"}})
	if err != nil {
		return err
	}
	defer d.wh.Close()
	if err := env.ServiceFor(ctx, namespace, service, ip, d.wh.Port()); err != nil {
		return err
	}
	say("sample webhook %s serves %s behind Service %s/%s (ClusterIP %s, port %d), timeoutSeconds 1", webhook, path, namespace, service, ip, d.wh.Port())
	if err := d.measure(ctx, "no webhook"); err != nil {
		return err
	}
	if err := d.install(ctx); err != nil {
		return err
	}
	slow := harness.Delayed(delay, harness.Allow())
	if err := d.withoutGuard(ctx, slow); err != nil {
		return err
	}
	for _, mode := range []string{"Ignore", "Bypass"} {
		if err := d.withGuard(ctx, mode, slow); err != nil {
			return err
		}
	}
	d.print()
	if err := d.writeJSON(); err != nil {
		return err
	}
	return d.listUnmutated(ctx)
}

// install registers the sample webhook, healthy, with failurePolicy Fail,
// and the guard's ServiceAccount with its grants.
func (d *demo) install(ctx context.Context) error {
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: service},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    webhook,
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](1),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: service, Path: ptr.To(path), Port: ptr.To(d.wh.Port())},
				CABundle: d.wh.CA.CertPEM,
			},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
		}},
	}
	d.wh.SetBehaviour(path, harness.Allow())
	if err := d.env.Client.Create(ctx, mwc); err != nil {
		return err
	}
	go d.watch(ctx, mwc.ResourceVersion)

	var err error
	d.guardID, err = d.env.ServiceAccount(ctx, guardNS, "webhook-guard")
	if err != nil {
		return err
	}
	return d.env.GrantGuard(ctx, guardNS, d.guardID, []string{service})
}

// withoutGuard measures the problem: the webhook turns slow under Fail,
// and then under the static alternative, Ignore set by hand.
func (d *demo) withoutGuard(ctx context.Context, slow harness.Behaviour) error {
	if err := d.waitCalledWith(ctx, "healthy, Fail", harness.Allow()); err != nil {
		return err
	}
	d.wh.SetBehaviour(path, slow)
	if err := d.measure(ctx, "slow, Fail (no guard)"); err != nil {
		return err
	}
	if err := d.setFailurePolicy(ctx, admissionregistrationv1.Ignore); err != nil {
		return err
	}
	d.settle(ctx, func(err error, _ bool) bool { return err == nil })
	if err := d.measure(ctx, "slow, static Ignore (no guard)"); err != nil {
		return err
	}
	return d.setFailurePolicy(ctx, admissionregistrationv1.Fail)
}

// withGuard runs the guard in mode while the webhook turns slow and
// recovers, and measures each phase.
func (d *demo) withGuard(ctx context.Context, mode string, slow harness.Behaviour) error {
	d.wh.SetBehaviour(path, harness.Allow())
	g, err := d.startGuard(mode)
	if err != nil {
		return err
	}
	defer g.Stop()
	d.wh.SetBehaviour(path, slow)
	slowAt := time.Now()
	if err := d.waitFor(ctx, func(m *admissionregistrationv1.MutatingWebhookConfiguration) bool { return open(m) }); err != nil {
		return fmt.Errorf("%s mode: %w\n%s", mode, err, g.Logs())
	}
	d.note("%s mode: circuit opened %s after the webhook turned slow", mode, time.Since(slowAt).Round(time.Millisecond))
	d.settle(ctx, func(err error, called bool) bool { return err == nil && (mode != "Bypass" || !called) })
	if err := d.measure(ctx, "slow, circuit open in "+mode+" mode"); err != nil {
		return err
	}
	d.wh.SetBehaviour(path, harness.Allow())
	okAt := time.Now()
	if err := d.waitFor(ctx, func(m *admissionregistrationv1.MutatingWebhookConfiguration) bool { return restored(m) }); err != nil {
		return fmt.Errorf("%s mode: %w\n%s", mode, err, g.Logs())
	}
	d.note("%s mode: circuit closed %s after the webhook recovered; failurePolicy Fail restored", mode, time.Since(okAt).Round(time.Millisecond))
	if mode == "Bypass" {
		d.settle(ctx, func(err error, called bool) bool { return err == nil && called })
		return d.measure(ctx, "recovered, Fail restored")
	}
	return nil
}

// setFailurePolicy sets the webhook's failurePolicy by hand, as an
// administrator would without the guard.
func (d *demo) setFailurePolicy(ctx context.Context, p admissionregistrationv1.FailurePolicyType) error {
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := d.env.Client.Get(ctx, client.ObjectKey{Name: service}, m); err != nil {
		return err
	}
	m.Webhooks[0].FailurePolicy = ptr.To(p)
	return d.env.Client.Update(ctx, m)
}

func (d *demo) results() []latency.Case {
	var healthy float64
	var out []latency.Case
	for _, r := range d.rows {
		sorted := append([]time.Duration(nil), r.took...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		ms := func(q float64) float64 {
			return float64(sorted[min(len(sorted)-1, int(q*float64(len(sorted))))].Microseconds()) / 1000
		}
		c := latency.Case{Case: r.label, P50Ms: ms(0.5), P95Ms: ms(0.95), MaxMs: ms(1), Created: len(r.took) - r.rejected, Rejected: r.rejected, WebhookCalls: r.called}
		if r.label == "healthy, Fail" {
			healthy = c.P50Ms
		}
		out = append(out, c)
	}
	for i := range out {
		if healthy > 0 {
			out[i].RatioToHealth = out[i].P50Ms / healthy
		}
	}
	return out
}

func (d *demo) writeJSON() error {
	if jsonOut == "" {
		return nil
	}
	data, err := json.MarshalIndent(d.results(), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(jsonOut, append(data, '\n'), 0o644)
}

// listUnmutated runs "guard unmutated" as the administrator: the
// ConfigMaps the demo created while a circuit was open carry the mark.
func (d *demo) listUnmutated(ctx context.Context) error {
	bin, err := d.env.BuildGuard()
	if err != nil {
		return err
	}
	cfg := filepath.Join(d.env.Dir, "demo-guard.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("apiVersion: config.webhook-guard.io/v1alpha1\nkind: GuardConfiguration\ntargets:\n- configuration: %s\n  webhook: %s\n  allowAdmissionWithoutMutation: true\n", service, webhook)), 0o600); err != nil {
		return err
	}
	say("objects admitted while a circuit was open (Ignore mode marks what may lack the mutation, Bypass mode what surely does):")
	fmt.Println("$ guard unmutated --config guard.yaml")
	out, err := exec.CommandContext(ctx, bin, "unmutated", "--config", cfg, "--kubeconfig", d.env.KubeconfigPath).CombinedOutput()
	fmt.Print(string(out))
	if err != nil {
		return fmt.Errorf("guard unmutated: %w", err)
	}
	return nil
}

func (d *demo) startGuard(mode string) (*harness.Guard, error) {
	cfg := fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
targets:
- configuration: %s
  webhook: %s
  allowAdmissionWithoutMutation: true
  mode: %s
  openAfter: 3
  closeAfter: 3
  probe:
    interval: 200ms
    timeout: 500ms
`, service, webhook, mode)
	say("starting the guard (mode %s, probes every 200ms, open after 3 failures, close after 3 successes) as %s", mode, d.guardID.Username)
	return d.env.StartGuard(harness.GuardOptions{Name: mode, Kubeconfig: d.guardID.KubeconfigPath, Config: cfg,
		Args: []string{"--leader-elect", "--leader-election-namespace", guardNS}})
}

func open(m *admissionregistrationv1.MutatingWebhookConfiguration) bool {
	rec, err := circuit.Decode(m.Annotations)
	return err == nil && len(rec) > 0 && *m.Webhooks[0].FailurePolicy == admissionregistrationv1.Ignore
}

func restored(m *admissionregistrationv1.MutatingWebhookConfiguration) bool {
	_, rec := m.Annotations[circuit.Annotation]
	return !rec && *m.Webhooks[0].FailurePolicy == admissionregistrationv1.Fail && len(m.Webhooks[0].MatchConditions) == 0
}

func (d *demo) waitFor(ctx context.Context, cond func(*admissionregistrationv1.MutatingWebhookConfiguration) bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := d.env.Client.Get(ctx, client.ObjectKey{Name: service}, m); err != nil {
			return err
		}
		if cond(m) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the configuration never reached the expected state")
}

// waitCalledWith waits until the apiserver calls the webhook (its
// registration is live), then measures.
func (d *demo) waitCalledWith(ctx context.Context, label string, b harness.Behaviour) error {
	d.wh.SetBehaviour(path, b)
	deadline := time.Now().Add(30 * time.Second)
	for d.wh.APIServerCalls(path) == 0 && time.Now().Before(deadline) {
		_ = d.env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "warmup-"}})
	}
	return d.measure(ctx, label)
}

// settle creates warm-up ConfigMaps until one behaves as ok says: the
// apiserver applies a configuration change a moment after it is stored.
func (d *demo) settle(ctx context.Context, ok func(err error, called bool) bool) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		before := d.wh.APIServerCalls(path)
		err := d.env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "warmup-"}})
		if ok(err, d.wh.APIServerCalls(path) > before) {
			return
		}
	}
}

func (d *demo) measure(ctx context.Context, label string) error {
	r := row{label: label}
	for i := 0; i < samples; i++ {
		before := d.wh.APIServerCalls(path)
		start := time.Now()
		err := d.env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "demo-"}})
		r.took = append(r.took, time.Since(start))
		r.called += d.wh.APIServerCalls(path) - before
		if err != nil {
			r.rejected++
		}
	}
	d.rows = append(d.rows, r)
	say("measured %s", label)
	return nil
}

// watch records every write to the configuration, as transitions.
func (d *demo) watch(ctx context.Context, rv string) {
	w, err := d.env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", service).String(), ResourceVersion: rv,
	})
	if err != nil {
		return
	}
	for ev := range w.ResultChan() {
		m, ok := ev.Object.(*admissionregistrationv1.MutatingWebhookConfiguration)
		if !ok || ev.Type != watch.Modified {
			continue
		}
		state := "closed"
		if open(m) {
			state = "open"
		}
		d.note("write rv=%s: failurePolicy=%s matchConditions=%d circuit=%s", m.ResourceVersion, *m.Webhooks[0].FailurePolicy, len(m.Webhooks[0].MatchConditions), state)
	}
}

func (d *demo) note(format string, args ...any) {
	line := fmt.Sprintf("%7.3fs  ", time.Since(d.start).Seconds()) + fmt.Sprintf(format, args...)
	d.timeline = append(d.timeline, line)
	say("%s", line)
}

type row struct {
	label    string
	took     []time.Duration
	rejected int
	called   int
}

func (d *demo) print() {
	fmt.Printf("\nConfigMap create through the Go client, %d samples per case; the webhook sleeps %s against timeoutSeconds 1 when slow.\n\n", samples, delay)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tp50\tp95\tmax\tp50/healthy\toutcome\twebhook calls by the apiserver")
	for _, c := range d.results() {
		outcome := fmt.Sprintf("%d/%d created", c.Created, c.Created+c.Rejected)
		if c.Created == 0 {
			outcome = fmt.Sprintf("%d/%d rejected", c.Rejected, c.Rejected)
		}
		fmt.Fprintf(tw, "%s\t%.1fms\t%.1fms\t%.1fms\t%.2f\t%s\t%d\n", c.Case, c.P50Ms, c.P95Ms, c.MaxMs, c.RatioToHealth, outcome, c.WebhookCalls)
	}
	tw.Flush()
	fmt.Println("\nTransitions observed (every write to the configuration, from a watch):")
	for _, l := range d.timeline {
		fmt.Println("  " + l)
	}
	fmt.Println()
}

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "demo: "+format+"\n", args...)
}
