package main

// The "policy" section: what the guard's ValidatingAdmissionPolicy adds to
// writes by others to a configuration it manages.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

func init() { register("policy", policyOverhead) }

const (
	// policyWrites is the number of label updates per cell.
	policyWrites = 200
	// policyWarmup writes per configuration come before the first cell.
	policyWarmup = 50
	// policyInstance names the policy and binding the section installs,
	// so that they cannot collide with a guard another section runs.
	policyInstance = "bench"
	// policyPrefix names the section's configurations.
	policyPrefix = "bench-policy-"
	// policyPlugin is the admission plugin that evaluates every
	// ValidatingAdmissionPolicy, as kube-apiserver's
	// apiserver_admission_controller_admission_duration_seconds names it.
	// The per-policy apiserver_validating_admission_policy_check_duration_seconds
	// is observed only for denials and errors, never for an admitted write.
	policyPlugin = "ValidatingAdmissionPolicy"
)

// policySizes are the configurations' numbers of webhooks, all managed.
var policySizes = []int{1, 20, 100}

// policyOverhead measures, for a MutatingWebhookConfiguration of 1, 20 and
// 100 managed webhooks, the latency of an administrator's label update with
// the guard's policy bound (A) and with its binding deleted (B), in ABBA
// cells of policyWrites writes each, and the policy plugin's mean time per
// write from the apiserver's own metric.
func policyOverhead(ctx context.Context, b *Bench) ([]Row, error) {
	env, err := b.Env()
	if err != nil {
		return nil, err
	}
	s := &policyBench{env: env, opts: admission.Options{Instance: policyInstance, Managed: map[string][]string{}}}
	defer s.cleanup()
	if err := s.setup(ctx); err != nil {
		return nil, err
	}

	ratio := map[int][]float64{}
	withP50 := map[int][]float64{}
	withoutP50 := map[int][]float64{}
	pluginWith := map[int][]float64{}
	pluginWithout := map[int][]float64{}
	for run := range b.Runs {
		for _, n := range policySizes {
			var lat [2][]time.Duration // by bound: 0 without, 1 with
			var plugin [2]pluginTime
			for _, bound := range []bool{true, false, false, true} {
				if err := s.bind(ctx, bound); err != nil {
					return nil, err
				}
				l, p, err := s.cell(ctx, n)
				if err != nil {
					return nil, err
				}
				i := map[bool]int{false: 0, true: 1}[bound]
				lat[i] = append(lat[i], l...)
				plugin[i] = plugin[i].add(p)
			}
			with, without := median(lat[1]), median(lat[0])
			ratio[n] = append(ratio[n], with.Seconds()/without.Seconds())
			withP50[n] = append(withP50[n], policyMS(with))
			withoutP50[n] = append(withoutP50[n], policyMS(without))
			pluginWith[n] = append(pluginWith[n], plugin[1].meanMS())
			pluginWithout[n] = append(pluginWithout[n], plugin[0].meanMS())
			say("policy run %d, %d webhooks: p50 %.2f ms with, %.2f ms without (%.3f×); plugin mean %.3f ms with, %.3f ms without",
				run+1, n, policyMS(with), policyMS(without), with.Seconds()/without.Seconds(), plugin[1].meanMS(), plugin[0].meanMS())
		}
	}

	var rows []Row
	for _, n := range policySizes {
		c := fmt.Sprintf("%d webhooks", n)
		r := Row{Section: "policy", Case: c, Metric: "p50 with / without policy", Runs: ratio[n], Unit: "×",
			Note: fmt.Sprintf("%d label updates by an administrator per cell, ABBA (A: the guard's policy bound, B: its binding deleted); p50 without the policy %s ms",
				policyWrites, policyRuns(withoutP50[n]))}
		if n <= 20 {
			r = r.AtMost(1.1)
		}
		rows = append(rows, r)
		p := Row{Section: "policy", Case: c, Metric: "policy plugin mean", Runs: pluginWith[n], Unit: "ms",
			Note: fmt.Sprintf("apiserver_admission_controller_admission_duration_seconds{name=%q} sum/count over the A cells' UPDATEs; over the B cells (no binding) %s ms",
				policyPlugin, policyRuns(pluginWithout[n]))}
		if n == 20 {
			p = p.AtMost(0.5)
		}
		rows = append(rows, p)
		rows = append(rows, Row{Section: "policy", Case: c, Metric: "p50 with policy", Runs: withP50[n], Unit: "ms"})
	}
	return rows, nil
}

// policyBench holds the section's objects.
type policyBench struct {
	env  *harness.Env
	opts admission.Options
	// probe is a managed configuration whose managed failurePolicy the
	// section flips in dry run to learn whether the policy is in force.
	probe   string
	policy  *admissionregistrationv1.ValidatingAdmissionPolicy
	binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	bound   *bool
	seq     int
}

func policyConfigName(n int) string { return fmt.Sprintf("%s%d", policyPrefix, n) }

// policyConfiguration is a configuration of n webhooks as the guard manages
// them: explicit failurePolicy, URL clients, rules that match nothing any
// section creates.
func policyConfiguration(name string, n int) *admissionregistrationv1.MutatingWebhookConfiguration {
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": "0"}}}
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(10)
	for i := range n {
		url := fmt.Sprintf("https://127.0.0.1:1/%s/%d", name, i)
		mwc.Webhooks = append(mwc.Webhooks, admissionregistrationv1.MutatingWebhook{
			Name:                    fmt.Sprintf("hook-%03d.%s.webhook-guard.io", i, name),
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"bench.webhook-guard.io"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}},
			}},
		})
	}
	return mwc
}

// setup creates the configurations (before the policy exists), the policy
// for all of them, and warms up the write path.
func (s *policyBench) setup(ctx context.Context) error {
	s.probe = policyPrefix + "probe"
	configs := map[string]int{s.probe: 1}
	for _, n := range policySizes {
		configs[policyConfigName(n)] = n
	}
	for name, n := range configs {
		mwc := policyConfiguration(name, n)
		for _, h := range mwc.Webhooks {
			s.opts.Managed[name] = append(s.opts.Managed[name], h.Name)
		}
		_ = s.env.Client.Delete(ctx, mwc) // a leftover of an interrupted run
		if err := s.env.Client.Create(ctx, mwc); err != nil {
			return fmt.Errorf("creating %s: %w", name, err)
		}
	}
	s.policy, s.binding = admission.RenderPolicy(s.opts)
	_ = s.env.Client.Delete(ctx, s.binding)
	_ = s.env.Client.Delete(ctx, s.policy)
	if err := s.env.Client.Create(ctx, s.policy); err != nil {
		return fmt.Errorf("creating the policy: %w", err)
	}
	if err := s.bind(ctx, true); err != nil {
		return err
	}
	for _, n := range policySizes {
		for range policyWarmup {
			if _, err := s.write(ctx, policyConfigName(n)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *policyBench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.binding != nil {
		_ = s.env.Client.Delete(ctx, s.binding)
	}
	if s.policy != nil {
		_ = s.env.Client.Delete(ctx, s.policy)
	}
	for name := range s.opts.Managed {
		_ = s.env.Client.Delete(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
}

// bind creates or deletes the binding and waits until kube-apiserver,
// which reloads policies about once a second, enforces or ignores it: a
// dry-run change of the probe's managed failurePolicy is denied by the
// policy, or admitted.
func (s *policyBench) bind(ctx context.Context, bound bool) error {
	if s.bound != nil && *s.bound == bound {
		return nil
	}
	var err error
	if bound {
		b := s.binding.DeepCopy()
		b.ResourceVersion = ""
		err = s.env.Client.Create(ctx, b)
	} else {
		err = s.env.Client.Delete(ctx, s.binding.DeepCopy())
	}
	if err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("binding %v: %w", bound, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		enforced, err := s.enforced(ctx)
		return err == nil && enforced == bound, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the policy to be enforced=%v: %w", bound, err)
	}
	s.bound = &bound
	return nil
}

// enforced reports whether the policy denies a dry-run change of the
// probe's managed failurePolicy.
func (s *policyBench) enforced(ctx context.Context) (bool, error) {
	patch := []byte(`[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"}]`)
	_, err := s.env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, s.probe, types.JSONPatchType, patch,
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), s.opts.Policy()):
		return true, nil
	}
	return false, err
}

// write updates only a label of configuration name, as the admin.
func (s *policyBench) write(ctx context.Context, name string) (time.Duration, error) {
	s.seq++
	patch := []byte(`{"metadata":{"labels":{"bench":"` + strconv.Itoa(s.seq) + `"}}}`)
	start := time.Now()
	_, err := s.env.Clientset.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("label update of %s: %w", name, err)
	}
	return d, nil
}

// cell runs policyWrites label updates on the configuration of n webhooks
// and returns their latencies and the plugin's time over them.
func (s *policyBench) cell(ctx context.Context, n int) ([]time.Duration, pluginTime, error) {
	before, err := s.scrape(ctx)
	if err != nil {
		return nil, pluginTime{}, err
	}
	lat := make([]time.Duration, 0, policyWrites)
	for range policyWrites {
		d, err := s.write(ctx, policyConfigName(n))
		if err != nil {
			return nil, pluginTime{}, err
		}
		lat = append(lat, d)
	}
	after, err := s.scrape(ctx)
	if err != nil {
		return nil, pluginTime{}, err
	}
	return lat, pluginTime{sum: after.sum - before.sum, count: after.count - before.count}, nil
}

// pluginTime is the policy plugin's admitted UPDATEs: total seconds and
// count.
type pluginTime struct {
	sum   float64
	count float64
}

func (p pluginTime) add(q pluginTime) pluginTime { return pluginTime{p.sum + q.sum, p.count + q.count} }

func (p pluginTime) meanMS() float64 {
	if p.count == 0 {
		return 0
	}
	return p.sum / p.count * 1000
}

// scrape reads the policy plugin's admitted UPDATEs from kube-apiserver's
// /metrics.
func (s *policyBench) scrape(ctx context.Context) (pluginTime, error) {
	data, err := s.env.Clientset.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return pluginTime{}, fmt.Errorf("scraping /metrics: %w", err)
	}
	const family = "apiserver_admission_controller_admission_duration_seconds"
	want := []string{`name="` + policyPlugin + `"`, `operation="UPDATE"`, `rejected="false"`, `type="validate"`}
	var p pluginTime
	var found int
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var into *float64
		switch {
		case strings.HasPrefix(line, family+"_sum{"):
			into = &p.sum
		case strings.HasPrefix(line, family+"_count{"):
			into = &p.count
		default:
			continue
		}
		labels := line[strings.IndexByte(line, '{')+1 : strings.LastIndexByte(line, '}')]
		if !slices.ContainsFunc(want, func(w string) bool { return !slices.Contains(strings.Split(labels, ","), w) }) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				return pluginTime{}, fmt.Errorf("parsing %q: %w", line, err)
			}
			*into = v
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return pluginTime{}, err
	}
	if found != 2 {
		return pluginTime{}, errors.New("no " + family + ` series for name="` + policyPlugin + `", operation UPDATE, admitted`)
	}
	return p, nil
}

func policyMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// policyRuns prints one value per run.
func policyRuns(v []float64) string {
	parts := make([]string, 0, len(v))
	for _, x := range v {
		parts = append(parts, format(x))
	}
	return strings.Join(parts, ", ")
}
