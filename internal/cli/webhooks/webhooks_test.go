package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/intercept"
)

var (
	fail   = ptr.To(admissionregistrationv1.Fail)
	ignore = ptr.To(admissionregistrationv1.Ignore)
)

func hook(kind circuit.Kind, configuration, name string, policy *admissionregistrationv1.FailurePolicyType, timeout int32) hookInfo {
	return hookInfo{kind: kind, configuration: configuration, name: name, policy: policy, timeout: ptr.To(timeout)}
}

// latencyAt is a histogram of n calls all in the apiserver's bucket that
// ends at le.
func latencyAt(n, le float64) apimetrics.Histogram {
	h := apimetrics.Histogram{Count: n}
	for _, b := range []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 25, math.Inf(1)} {
		c := 0.0
		if b >= le {
			c = n
		}
		h.Buckets = append(h.Buckets, apimetrics.Bucket{UpperBound: b, Count: c})
	}
	return h
}

func mutating(name string) apimetrics.Webhook {
	return apimetrics.Webhook{Name: name, Type: apimetrics.Mutating}
}

func TestBuildRows_oneWebhook(t *testing.T) {
	cfg := &config.Configuration{Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: "cfg", Webhook: "a.example.com"}}}
	calls := func(calls, callErrors, failOpen float64, latency apimetrics.Histogram) *callMetrics {
		return &callMetrics{
			counters: map[apimetrics.Webhook]apimetrics.Counters{mutating("a.example.com"): {Calls: calls, CallErrors: callErrors, FailOpen: failOpen}},
			latency:  map[apimetrics.Webhook]apimetrics.Histogram{mutating("a.example.com"): latency},
		}
	}
	openFail := hook(circuit.KindMutating, "cfg", "a.example.com", ignore, 1)
	openFail.open = &circuit.Entry{Mode: circuit.ModeBypass, OpenedAt: metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)), OriginalFailurePolicy: fail}
	tests := map[string]struct {
		hook        hookInfo
		cfg         *config.Configuration
		m           *callMetrics
		wantRisk    string
		wantRatio   *float64
		wantP99     *float64
		wantManaged *bool
		wantReason  string
		wantPolicy  string
		wantTimeout int32
	}{
		"Fail and every call failed is high": {
			hook: hook(circuit.KindMutating, "cfg", "a.example.com", fail, 1), cfg: cfg, m: calls(12, 12, 0, latencyAt(12, 0.005)),
			wantRisk: riskHigh, wantRatio: ptr.To(1.0), wantP99: ptr.To(0.00495), wantManaged: ptr.To(true),
			wantReason: "failurePolicy Fail and 100% of its calls failed: each rejected a request"},
		"Ignore and failing calls (fail-open) is medium": {
			hook: hook(circuit.KindMutating, "cfg", "a.example.com", ignore, 1), cfg: cfg, m: calls(10, 0, 5, latencyAt(10, 0.005)),
			wantRisk: riskMedium, wantRatio: ptr.To(0.5), wantP99: ptr.To(0.00495), wantManaged: ptr.To(true),
			wantReason: "50% of its calls failed: failurePolicy Ignore admitted those requests without it"},
		"Fail and p99 near the timeout is high without a failure": {
			hook: hook(circuit.KindMutating, "cfg", "a.example.com", fail, 1), cfg: cfg, m: calls(10, 0, 0, latencyAt(10, 1)),
			wantRisk: riskHigh, wantRatio: ptr.To(0.0), wantP99: ptr.To(0.995), wantManaged: ptr.To(true),
			wantReason: "failurePolicy Fail and p99 0.995s near its 1s timeout"},
		"Fail and p99 well within the timeout is low": {
			hook: hook(circuit.KindMutating, "cfg", "a.example.com", fail, 10), cfg: cfg, m: calls(10, 0, 0, latencyAt(10, 1)),
			wantRisk: riskLow, wantRatio: ptr.To(0.0), wantP99: ptr.To(0.995), wantManaged: ptr.To(true)},
		"Ignore and slow is medium": {
			hook: hook(circuit.KindMutating, "cfg", "a.example.com", ignore, 1), cfg: cfg, m: calls(10, 0, 0, latencyAt(10, 1)),
			wantRisk: riskMedium, wantRatio: ptr.To(0.0), wantP99: ptr.To(0.995), wantManaged: ptr.To(true),
			wantReason: "p99 0.995s near its 1s timeout: requests wait, then go without it"},
		"Fail and no calls is unknown": {
			hook: hook(circuit.KindMutating, "cfg", "a.example.com", fail, 1), cfg: cfg, m: &callMetrics{},
			wantRisk: riskUnknown, wantManaged: ptr.To(true), wantReason: "no calls observed: under failurePolicy Fail its failures would reject requests"},
		"Ignore and no calls is low": {
			hook: hook(circuit.KindMutating, "cfg", "a.example.com", ignore, 1), cfg: cfg, m: &callMetrics{},
			wantRisk: riskLow, wantManaged: ptr.To(true)},
		"no metrics leaves the numbers null": {
			hook: hook(circuit.KindMutating, "cfg", "a.example.com", fail, 1), cfg: cfg,
			wantRisk: riskUnknown, wantManaged: ptr.To(true), wantReason: "no metrics: under failurePolicy Fail"},
		"without the guard's configuration, managed is unknown": {
			hook: hook(circuit.KindMutating, "cfg", "a.example.com", ignore, 1), m: &callMetrics{},
			wantRisk: riskLow},
		"a target of the other kind is not this webhook": {
			hook: hook(circuit.KindValidating, "cfg", "a.example.com", ignore, 1), cfg: cfg, m: &callMetrics{},
			wantRisk: riskLow, wantManaged: ptr.To(false)},
		"unset failurePolicy and timeout are the API's defaults": {
			hook: hookInfo{kind: circuit.KindMutating, configuration: "other", name: "a.example.com"}, cfg: cfg, m: calls(4, 1, 0, latencyAt(4, 0.1)),
			wantRisk: riskHigh, wantRatio: ptr.To(0.25), wantP99: ptr.To(0.09925), wantManaged: ptr.To(false), wantPolicy: "Fail", wantTimeout: 10,
			wantReason: "failurePolicy Fail and 25% of its calls failed"},
		"an open circuit is judged by the original failurePolicy": {
			hook: openFail, cfg: cfg, m: calls(10, 0, 10, latencyAt(10, 0.005)),
			wantRisk: riskHigh, wantRatio: ptr.To(1.0), wantP99: ptr.To(0.00495), wantManaged: ptr.To(true), wantPolicy: "Ignore",
			wantReason: "failurePolicy Fail and 100% of its calls failed"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rows := buildRows([]hookInfo{tc.hook}, tc.cfg, tc.m)
			require.Len(t, rows, 1)
			r := rows[0]
			assert.Equal(t, tc.wantRisk, r.Risk, "%v", r.Reasons)
			if tc.wantRatio == nil {
				assert.Nil(t, r.FailureRatio)
			} else if assert.NotNil(t, r.FailureRatio) {
				assert.InDelta(t, *tc.wantRatio, *r.FailureRatio, 1e-9)
			}
			if tc.wantP99 == nil {
				assert.Nil(t, r.P99Seconds)
			} else if assert.NotNil(t, r.P99Seconds) {
				assert.InDelta(t, *tc.wantP99, *r.P99Seconds, 1e-9)
			}
			assert.Equal(t, tc.wantManaged, r.Managed)
			if tc.m == nil {
				assert.Nil(t, r.Calls)
			} else {
				assert.NotNil(t, r.Calls)
			}
			if tc.wantReason == "" {
				assert.Empty(t, r.Reasons)
			} else {
				require.NotEmpty(t, r.Reasons)
				assert.Contains(t, r.Reasons[0], tc.wantReason)
			}
			if tc.wantPolicy != "" {
				assert.Equal(t, tc.wantPolicy, r.FailurePolicy, "the live failurePolicy is shown")
			}
			if tc.wantTimeout != 0 {
				assert.Equal(t, tc.wantTimeout, r.TimeoutSeconds)
			}
		})
	}
}

func TestBuildRows_riskiestFirstAndUnmanagedBeforeManaged(t *testing.T) {
	cfg := &config.Configuration{Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: "m", Webhook: "managed-failing"}}}
	hooks := []hookInfo{
		hook(circuit.KindMutating, "m", "healthy-ignore", ignore, 5),
		hook(circuit.KindMutating, "m", "managed-failing", fail, 5),
		hook(circuit.KindValidating, "v", "slow-fail", fail, 1),
		hook(circuit.KindMutating, "m", "idle-fail", fail, 5),
		hook(circuit.KindMutating, "m", "failing-ignore", ignore, 5),
		hook(circuit.KindMutating, "m", "half-failing-fail", fail, 5),
		hook(circuit.KindMutating, "m", "all-failing-fail", fail, 5),
	}
	val := func(n string) apimetrics.Webhook { return apimetrics.Webhook{Name: n, Type: apimetrics.Validating} }
	m := &callMetrics{
		counters: map[apimetrics.Webhook]apimetrics.Counters{
			mutating("healthy-ignore"):    {Calls: 100},
			mutating("managed-failing"):   {Calls: 10, CallErrors: 10},
			val("slow-fail"):              {Calls: 10},
			mutating("failing-ignore"):    {Calls: 10, FailOpen: 10},
			mutating("half-failing-fail"): {Calls: 10, CallErrors: 5},
			mutating("all-failing-fail"):  {Calls: 10, CallErrors: 10},
		},
		latency: map[apimetrics.Webhook]apimetrics.Histogram{
			mutating("healthy-ignore"): latencyAt(100, 0.005),
			val("slow-fail"):           latencyAt(10, 1),
		},
	}
	var got []string
	for _, r := range buildRows(hooks, cfg, m) {
		got = append(got, r.Risk+" "+r.Webhook)
	}
	assert.Equal(t, []string{
		"high all-failing-fail",
		"high half-failing-fail",
		"high slow-fail",
		"high managed-failing",
		"medium failing-ignore",
		"unknown idle-fail",
		"low healthy-ignore",
	}, got)
}

func TestBuildRows_sameNameSharesTheMetrics(t *testing.T) {
	hooks := []hookInfo{
		hook(circuit.KindMutating, "one", "same.example.com", fail, 1),
		hook(circuit.KindMutating, "two", "same.example.com", fail, 1),
		hook(circuit.KindValidating, "three", "same.example.com", fail, 1),
	}
	rows := buildRows(hooks, nil, &callMetrics{})
	require.Len(t, rows, 3)
	byConfig := map[string]webhookRow{}
	for _, r := range rows {
		byConfig[r.Configuration] = r
	}
	assert.Contains(t, byConfig["one"].SharedMetrics, "also count same.example.com in two")
	assert.Contains(t, byConfig["two"].SharedMetrics, "also count same.example.com in one")
	assert.Empty(t, byConfig["three"].SharedMetrics, "validating webhooks are counted apart")
}

func TestDeltaMetrics(t *testing.T) {
	wh := mutating("a.example.com")
	earlier := apimetrics.Sample{Instance: 1,
		Webhooks: map[apimetrics.Webhook]apimetrics.Counters{wh: {Calls: 100, CallErrors: 90}},
		Latency:  map[apimetrics.Webhook]apimetrics.Histogram{wh: latencyAt(100, 0.005)}}
	later := apimetrics.Sample{Instance: 1,
		Webhooks: map[apimetrics.Webhook]apimetrics.Counters{wh: {Calls: 110, CallErrors: 90, FailOpen: 1}},
		Latency:  map[apimetrics.Webhook]apimetrics.Histogram{wh: sumHist(latencyAt(100, 0.005), latencyAt(10, 1))}}
	m, err := deltaMetrics(earlier, later)
	require.NoError(t, err)
	assert.Equal(t, apimetrics.Counters{Calls: 10, FailOpen: 1}, m.counters[wh])
	p99, ok := m.latency[wh].Quantile(0.99)
	require.True(t, ok)
	assert.InDelta(t, 0.995, p99, 1e-9, "only the window's calls, all slow")

	_, err = deltaMetrics(later, earlier)
	assert.ErrorContains(t, err, "went down")
}

func sumHist(a, b apimetrics.Histogram) apimetrics.Histogram {
	out := apimetrics.Histogram{Count: a.Count + b.Count, Sum: a.Sum + b.Sum}
	for i := range a.Buckets {
		out.Buckets = append(out.Buckets, apimetrics.Bucket{UpperBound: a.Buckets[i].UpperBound, Count: a.Buckets[i].Count + b.Buckets[i].Count})
	}
	return out
}

func TestWebhooksCommand_badInputTouchesNothing(t *testing.T) {
	for name, args := range map[string][]string{
		"an unknown output":              {"-o", "wide"},
		"an unknown long output":         {"--output", "wide"},
		"a jsonpath without template":    {"-o", "jsonpath="},
		"a jsonpath that does not parse": {"-o", "jsonpath={.webhooks["},
		"a window under a second":        {"--window", "10ms"},
		"a negative window":              {"--window", "-1s"},
		"a stray argument":               {"extra"},
		"a bad configuration file":       {"--config", "/nonexistent/guard.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := NewCmd(cli.IOStreams{Out: &stdout, ErrOut: &stderr}, factory.New(func(clientcmd.ClientConfig) (*rest.Config, error) {
				t.Fatal("the command reached for the cluster before validating its input")
				return nil, nil
			}))
			cmd.SetArgs(args)
			cmd.SetOut(&stdout)
			cmd.SetErr(&stderr)
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			err := cmd.ExecuteContext(context.Background())
			require.Error(t, err)
			assert.Empty(t, stdout.String())
		})
	}
}

func TestPrintWebhooks(t *testing.T) {
	rows := buildRows([]hookInfo{hook(circuit.KindMutating, "cfg", "a.example.com", fail, 1)}, &config.Configuration{},
		&callMetrics{counters: map[apimetrics.Webhook]apimetrics.Counters{mutating("a.example.com"): {Calls: 4, CallErrors: 4}},
			latency: map[apimetrics.Webhook]apimetrics.Histogram{mutating("a.example.com"): latencyAt(4, 0.005)}})
	var out bytes.Buffer
	require.NoError(t, printWebhooks(&out, webhooksReport{ConfigSource: "file x", Metrics: "cumulative", Webhooks: rows}))
	assert.Contains(t, out.String(), "RISK  KIND      CONFIGURATION  WEBHOOK        FAILURE POLICY  TIMEOUT  CALLS  FAILURE RATIO    P99       MANAGED  WHY\n")
	assert.Contains(t, out.String(), "high  Mutating  cfg            a.example.com  Fail            1s       4      1.00 (4 failed)  0.00495s  no       failurePolicy Fail and 100% of its calls failed")
	data, err := json.Marshal(rows[0])
	require.NoError(t, err)
	assert.JSONEq(t, `{"risk":"high","kind":"Mutating","configuration":"cfg","webhook":"a.example.com","failurePolicy":"Fail","timeoutSeconds":1,
		"calls":4,"failedCalls":4,"failureRatio":1,"p99Seconds":0.00495,"managed":false,
		"riskReasons":["failurePolicy Fail and 100% of its calls failed: each rejected a request"]}`, string(data))
}

func TestPrintWebhooks_interceptors(t *testing.T) {
	engine := admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "kyverno-resource-mutating-webhook-cfg"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "mutate.kyverno.svc-fail", FailurePolicy: fail,
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", "kyverno"}},
			}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
			}},
		}},
	}
	target := &config.Configuration{Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: engine.Name, Webhook: "mutate.kyverno.svc-fail"}}}
	in := intercept.Inputs{Namespace: "webhook-guard", Mutating: []admissionregistrationv1.MutatingWebhookConfiguration{engine}, WithoutMarking: !opensMutating(target)}
	rep := webhooksReport{Metrics: "cumulative", InterceptingTheGuard: interceptRows(intercept.Find(in), target, "webhook-guard"),
		InterceptBasis: interceptBasis(in, []string{"namespace webhook-guard: forbidden"})}

	var out bytes.Buffer
	require.NoError(t, printWebhooks(&out, rep))
	assert.Contains(t, out.String(), "Webhooks with failurePolicy Fail that intercept the guard's own requests, judged for an installation with its Lease in namespace webhook-guard "+
		"(its Lease and leader election's Events there; Events about cluster-scoped objects in kube-system; the marking canary in default), "+
		"namespaceSelectors judged by kubernetes.io/metadata.name alone (cannot read namespace webhook-guard: forbidden):\n")
	assert.Contains(t, out.String(), "\nMutating kyverno-resource-mutating-webhook-cfg webhook mutate.kyverno.svc-fail (timeout 10s, managed by the guard) intercepts: "+
		"Lease in webhook-guard, Events in webhook-guard, marking canary in default\n")
	assert.Contains(t, out.String(), "  - fix: add {key: kubernetes.io/metadata.name, operator: NotIn, values: [webhook-guard]} to its namespaceSelector.matchExpressions")
	data, err := json.Marshal(rep.InterceptingTheGuard[0])
	require.NoError(t, err)
	assert.Contains(t, string(data), `{"kind":"Mutating","configuration":"kyverno-resource-mutating-webhook-cfg","webhook":"mutate.kyverno.svc-fail","timeoutSeconds":10,`+
		`"intercepts":[{"what":"Lease","namespace":"webhook-guard"},{"what":"Events","namespace":"webhook-guard"},{"what":"canary","namespace":"default"}],`+
		`"managed":true,"advice":[`)

	// Excluding the guard's namespace and default: none.
	engine.Webhooks[0].NamespaceSelector.MatchExpressions[0].Values = []string{"kube-system", "kyverno", "webhook-guard", "default"}
	in.Mutating = []admissionregistrationv1.MutatingWebhookConfiguration{engine}
	in.WithoutMarking = true
	rep.InterceptingTheGuard, rep.InterceptBasis = interceptRows(intercept.Find(in), nil, "webhook-guard"), interceptBasis(in, nil)
	out.Reset()
	require.NoError(t, printWebhooks(&out, rep))
	assert.Contains(t, out.String(), "\nNo webhook with failurePolicy Fail intercepts the guard's own requests, judged for an installation with its Lease in namespace webhook-guard "+
		"(its Lease and leader election's Events there; Events about cluster-scoped objects in kube-system; no marking canary: no mutating target of its configuration opens), "+
		"namespaceSelectors judged by the namespaces' labels.\n")
	data, err = json.Marshal(rep)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"interceptingTheGuard":[]`)
}

// -o name prints the configurations, each once, riskiest first; -o
// jsonpath runs on the report's JSON.
func TestPrintObject_webhooksReport(t *testing.T) {
	hooks := []hookInfo{
		hook(circuit.KindMutating, "m", "healthy", ignore, 5),
		hook(circuit.KindValidating, "v", "failing", fail, 5),
		hook(circuit.KindMutating, "m", "failing", fail, 5),
	}
	m := &callMetrics{counters: map[apimetrics.Webhook]apimetrics.Counters{
		mutating("healthy"):                            {Calls: 10},
		mutating("failing"):                            {Calls: 10, CallErrors: 10},
		{Name: "failing", Type: apimetrics.Validating}: {Calls: 10, CallErrors: 1},
	}}
	rep := webhooksReport{Webhooks: buildRows(hooks, &config.Configuration{}, m)}
	for name, tc := range map[string]struct {
		output, want string
	}{
		"name": {"name", "mutatingwebhookconfiguration.admissionregistration.k8s.io/m\nvalidatingwebhookconfiguration.admissionregistration.k8s.io/v\n"},
		"jsonpath of the risky ones": {`jsonpath={range .webhooks[?(@.risk=="high")]}{.kind}/{.configuration}/{.webhook}{"\n"}{end}`,
			"Mutating/m/failing\nValidating/v/failing\n"},
		"a relaxed jsonpath": {"jsonpath=webhooks[*].risk", "high high low"},
		"jsonpath-as-json":   {"jsonpath-as-json={.webhooks[0].failureRatio}", "[\n    1\n]\n"},
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, cli.ValidateOutput(tc.output))
			var out bytes.Buffer
			require.NoError(t, cli.PrintObject(&out, tc.output, rep))
			assert.Equal(t, tc.want, out.String())
		})
	}
}
