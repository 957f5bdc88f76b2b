package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

func init() { register("traffic", trafficCase) }

// configLabel selects the configuration whose webhooks a ConfigMap of the
// traffic load is for.
const configLabel = "bench.example.com/configuration"

// trafficCase runs the guard over 1,000 healthy url webhooks, 900 of which
// kube-apiserver calls once a second each: the webhooks of 90 of the 100
// configurations match ConfigMaps in the fleet's namespace carrying a
// label, and one dry-run create of such a ConfigMap a second calls all
// 900. (One create per configuration, 90 a second, each weighed by the
// 1,000 marking policies, was more than this 2-core control plane could
// admit.) The
// apiserver's own healthy calls stand in for those 900 probes
// (apiserverSignal.trafficAsProbe), so the guard should probe only the
// 100 without traffic.
func trafficCase(ctx context.Context, b *Bench) ([]Row, error) {
	env, limit, err := b.LimitedEnv()
	if err != nil {
		return nil, err
	}
	const n, called = 1000, 900
	f, err := newFleet(ctx, env, "url", n)
	if err != nil {
		return nil, err
	}
	defer f.delete(ctx, env)
	// Traffic stands in for a probe only when kube-apiserver's /metrics is
	// read as often as the webhooks are probed (every second here); the
	// default, 30 s, keeps that read under 1% of kube-apiserver's CPU on a
	// large cluster, and the scrape section measures what 1 s costs it.
	f.scrapeInterval = "1s"
	targets := f.configs[:called/perConfiguration]
	if err := callable(ctx, env, f, targets); err != nil {
		return nil, err
	}
	var runs []steady
	var skipped []float64
	for range b.Runs {
		// The guard first (it installs its marking policies), then the
		// traffic, both before measureWindow's warm-up.
		r, err := startGuard(ctx, env, f, "Ignore", 3, limit, true)
		if err != nil {
			return nil, err
		}
		stopTraffic, err := startTraffic(env.Config, f.ns)
		if err != nil {
			r.stop()
			return nil, err
		}
		s, err := measureWindow(ctx, r)
		stopTraffic()
		if err != nil {
			r.stop()
			return nil, err
		}
		m, err := r.metrics(ctx)
		r.stop()
		if err != nil {
			return nil, err
		}
		runs = append(runs, s)
		if all := m["webhook_guard_probes_skipped_total"] + m["webhook_guard_probe_duration_seconds_count"]; all > 0 {
			skipped = append(skipped, 100*m["webhook_guard_probes_skipped_total"]/all)
		}
	}
	name := fmt.Sprintf("%d url targets, %d called by kube-apiserver once a second each", n, called)
	col := func(get func(steady) float64) []float64 {
		var out []float64
		for _, s := range runs {
			out = append(out, get(s))
		}
		return out
	}
	row := func(metric string, get func(steady) float64) Row {
		return Row{Section: "traffic", Case: name, Metric: metric, Runs: col(get)}
	}
	cores := row("guard CPU (cores)", func(s steady) float64 { return s.cores }).AtMost(0.03)
	cores.Note = fmt.Sprintf("inside a %.2g-core CFS quota; the 900 called webhooks are not probed while their calls succeed", limit)
	return []Row{
		cores,
		row("guard RSS (MiB)", func(s steady) float64 { return s.rss }).AtMost(100),
		row("probes sent per second", func(s steady) float64 { return s.probes / window.Seconds() }),
		{Section: "traffic", Case: name, Metric: "probes skipped since start (%)", Runs: skipped},
		row("probes on time (%, ≤ 100 ms late)", func(s steady) float64 { return s.onTime }).AtLeast(99),
		row("failed or unknown probes, circuits opened", func(s steady) float64 { return s.failures + s.unknown + s.openings }).AtMost(0),
	}, nil
}

// callable makes kube-apiserver call the webhooks of configurations: they
// match ConfigMaps in the fleet's namespace labelled with their name.
func callable(ctx context.Context, env *harness.Env, f *fleet, configurations []string) error {
	for _, name := range configurations {
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, mwc); err != nil {
			return err
		}
		for i := range mwc.Webhooks {
			mwc.Webhooks[i].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: f.ns}}
			mwc.Webhooks[i].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{configLabel: "called"}}
		}
		if err := env.Client.Update(ctx, mwc); err != nil {
			return fmt.Errorf("making %s callable: %w", name, err)
		}
	}
	return nil
}

// startTraffic sends one dry-run ConfigMap create a second that the
// called configurations match, until stopped; a create runs in its own
// goroutine, so a slow one does not delay the next. A dry run calls the
// webhooks (they have no side effects) and stores nothing.
func startTraffic(cfg *rest.Config, ns string) (func(), error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 100, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "traffic-", Labels: map[string]string{configLabel: "called"}}}
		for {
			wg.Go(func() {
				c, cancelCall := context.WithTimeout(ctx, 30*time.Second)
				defer cancelCall()
				if _, err := cs.CoreV1().ConfigMaps(ns).Create(c, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil && ctx.Err() == nil {
					say("traffic: %v", err)
				}
			})
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return func() { cancel(); wg.Wait() }, nil
}
