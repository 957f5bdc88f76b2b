package webhooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/apimetrics"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/intercept"
)

const long = `Lists every webhook of every MutatingWebhookConfiguration and
ValidatingWebhookConfiguration in the cluster, one line each, riskiest
first: its failurePolicy and timeoutSeconds, the share of its calls that
failed (calling_webhook_error under Fail, fail-open under Ignore) and its
p99 latency, both from kube-apiserver's own /metrics, and whether the guard
manages it. Unmanaged webhooks at the top are the candidates to approve.

By default the numbers are cumulative since the apiserver that answered
started; --window scrapes twice and reports the calls in between. The p99
is interpolated linearly within the apiserver's latency buckets (0.005,
0.025, 0.1, 0.5, 1, 2.5, 10, 25 s), as histogram_quantile does. The
apiserver counts webhooks by name and type, not by configuration: webhooks
of the same name and kind share their numbers, and the output says so.

A second section names every webhook with failurePolicy Fail that
intercepts the guard's own requests (a policy engine's */*): its
leader-election Lease and Events in the installation's namespace (-n), its
Events about webhook configurations and its marking canary in default.
While such a webhook fails the guard loses what it intercepts; the section
says what, and the namespaceSelector expression that excludes them. Writes
to webhook configurations are never sent to webhooks: the write that
opens a circuit is never intercepted.

It needs list on mutatingwebhookconfigurations and
validatingwebhookconfigurations, get on the non-resource URL /metrics, and
(without --config) get on the guard's Deployment and ConfigMap; with get on
the two namespaces it judges namespaceSelectors by their labels, without it
by kubernetes.io/metadata.name alone. What it cannot read it names on
stderr, and prints the rest.

-o json|yaml prints the report for scripts: {configSource, metrics,
window, apiserverStarted, webhooks, interceptingTheGuard, interceptBasis,
unavailable}, a row per webhook, riskiest first; -o jsonpath=TEMPLATE runs
a template on it, as kubectl's -o jsonpath does
(-o jsonpath='{.webhooks[?(@.risk=="high")].webhook}'), and -o name prints
the webhook configurations, each once, riskiest first, as kubectl's -o
name does (validatingwebhookconfiguration.admissionregistration.k8s.io/NAME).`

// scrapeTimeout bounds one scrape of kube-apiserver's /metrics, which is
// large on a busy apiserver.
const scrapeTimeout = 30 * time.Second

// secondScrapes is how many times the second scrape of --window is tried
// to reach the apiserver of the first, behind a load balancer.
const secondScrapes = 5

// The bounds of --window.
const (
	minWindow = time.Second
	maxWindow = time.Hour
)

// nearTimeout is the share of its timeout at which a webhook's p99 is
// reported as near it.
const nearTimeout = 0.8

// Risk levels, riskiest first.
const (
	riskHigh    = "high"
	riskMedium  = "medium"
	riskUnknown = "unknown"
	riskLow     = "low"
)

var riskOrder = map[string]int{riskHigh: 0, riskMedium: 1, riskUnknown: 2, riskLow: 3}

// webhookRow is one line of "guard webhooks".
type webhookRow struct {
	Risk          string `json:"risk"`
	Kind          string `json:"kind"`
	Configuration string `json:"configuration"`
	Webhook       string `json:"webhook"`
	// FailurePolicy and TimeoutSeconds are the live ones (with the API's
	// defaults, Fail and 10, when unset).
	FailurePolicy  string `json:"failurePolicy"`
	TimeoutSeconds int32  `json:"timeoutSeconds"`
	// Calls and FailedCalls are null when the metrics could not be read.
	Calls       *float64 `json:"calls"`
	FailedCalls *float64 `json:"failedCalls"`
	// FailureRatio is FailedCalls/Calls, null without calls.
	FailureRatio *float64 `json:"failureRatio"`
	// P99Seconds is null without calls.
	P99Seconds *float64 `json:"p99Seconds"`
	// Managed is null when the guard's configuration could not be read.
	Managed *bool `json:"managed"`
	// Circuit describes an open circuit recorded on the configuration.
	Circuit string `json:"circuit,omitempty"`
	// SharedMetrics says which other webhooks the numbers also count.
	SharedMetrics string   `json:"sharedMetrics,omitempty"`
	Reasons       []string `json:"riskReasons,omitempty"`

	// policy is the failurePolicy the risk is judged by: the original
	// one while the guard holds the circuit open.
	policy string
}

// webhooksReport is what "guard webhooks" found; -o json|yaml|jsonpath
// prints it, and -o name its ObjectNames.
type webhooksReport struct {
	// ConfigSource says where the GuardConfiguration came from.
	ConfigSource string `json:"configSource,omitempty"`
	// Metrics says what calls, ratios and p99 cover.
	Metrics string `json:"metrics"`
	// Window is --window, when given.
	Window string `json:"window,omitempty"`
	// APIServerStarted is when the apiserver that answered started.
	APIServerStarted string       `json:"apiserverStarted,omitempty"`
	Webhooks         []webhookRow `json:"webhooks"`
	// InterceptingTheGuard are the webhooks under failurePolicy Fail that
	// intercept the guard's own requests, with what each costs it and the
	// fix; empty when none does.
	InterceptingTheGuard []interceptRow `json:"interceptingTheGuard"`
	// InterceptBasis says what InterceptingTheGuard was judged for: the
	// namespace, and which labels.
	InterceptBasis string `json:"interceptBasis"`
	// Unavailable names what could not be read, and why.
	Unavailable []string `json:"unavailable,omitempty"`
}

var _ cli.Named = webhooksReport{}

// ObjectNames are the webhook configurations of the webhooks, each once,
// in the report's order (riskiest first), as kubectl's -o name prints
// them.
func (r webhooksReport) ObjectNames() []string {
	var names []string
	for _, w := range r.Webhooks {
		n := cli.ObjectName(admissionregistrationv1.SchemeGroupVersion.WithKind(circuit.Kind(w.Kind).ObjectKind()).GroupKind(), w.Configuration)
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// interceptRow is a webhook that intercepts the guard's own requests.
type interceptRow struct {
	intercept.Interceptor
	// Managed is null when the guard's configuration could not be read.
	Managed *bool `json:"managed"`
	// Advice says what it costs the guard while it fails, and the fix.
	Advice []string `json:"advice"`
}

// configurations are the cluster's webhook configurations, as listed.
type configurations struct {
	mutating   []admissionregistrationv1.MutatingWebhookConfiguration
	validating []admissionregistrationv1.ValidatingWebhookConfiguration
}

// hookInfo is one webhook as its configuration declares it.
type hookInfo struct {
	kind          circuit.Kind
	configuration string
	name          string
	policy        *admissionregistrationv1.FailurePolicyType
	timeout       *int32
	// open is the circuit record's entry, if the guard holds it open.
	open *circuit.Entry
}

func (h hookInfo) metricsKey() apimetrics.Webhook {
	if h.kind == circuit.KindValidating {
		return apimetrics.Webhook{Name: h.name, Type: apimetrics.Validating}
	}
	return apimetrics.Webhook{Name: h.name, Type: apimetrics.Mutating}
}

// callMetrics are the webhooks' calls over what the report covers; nil
// when the metrics could not be read.
type callMetrics struct {
	counters map[apimetrics.Webhook]apimetrics.Counters
	latency  map[apimetrics.Webhook]apimetrics.Histogram
}

// Options are the flags of "guard webhooks".
type Options struct {
	// Factory owns --config (the GuardConfiguration that says which
	// webhooks are managed; default: the installed one), -n/--namespace,
	// --deployment and kubectl's connection flags, and builds the clients.
	*factory.Factory
	cli.IOStreams
	// Window reports the calls between two scrapes of /metrics that far
	// apart (--window), between minWindow and maxWindow. Default 0: the
	// cumulative counts since the apiserver started.
	Window time.Duration
	// Output is the format (-o, --output): table, json, yaml, name,
	// jsonpath=TEMPLATE or jsonpath-as-json=TEMPLATE (cli.AddOutputFlag).
	// Default table.
	Output string
}

// NewCmd returns "guard webhooks". It only binds flags.
func NewCmd(streams cli.IOStreams, f *factory.Factory) *cobra.Command {
	o := &Options{Factory: f, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "webhooks",
		Short: "List every webhook in the cluster, riskiest first: failurePolicy, timeout, failure ratio and p99 from kube-apiserver's metrics, managed or not",
		Long:  long,
		Args:  cli.NoArgs,
		RunE:  cli.RunE(o),
	}
	fs := cmd.Flags()
	f.AddInstallationReaderFlags(fs, "GuardConfiguration file, for which webhooks the guard manages; default: the one installed in the cluster (the ConfigMap --deployment mounts).")
	fs.DurationVar(&o.Window, "window", 0, "Report the calls of this window (for example 10s or 5m) from two scrapes of /metrics, instead of the cumulative counts since the apiserver started.")
	cli.AddOutputFlag(fs, &o.Output)
	f.RegisterCompletions(cmd)
	return cmd
}

// Validate checks the flags and reads the --config file, before anything
// reaches the cluster.
func (o *Options) Validate() error {
	if err := cli.ValidateOutput(o.Output); err != nil {
		return err
	}
	if o.Window < 0 || (o.Window > 0 && o.Window < minWindow) || o.Window > maxWindow {
		return cli.Usagef("--window %s: must be between %s and %s", o.Window, minWindow, maxWindow)
	}
	return o.ReadConfigFile()
}

// Complete builds the clients.
func (o *Options) Complete(ctx context.Context) error {
	return o.Factory.Complete(ctx)
}

// Run lists the webhooks and prints them; what it could not read goes to
// o.ErrOut.
func (o *Options) Run(ctx context.Context) error {
	var rep webhooksReport
	if err := o.ReadInstalledConfig(ctx); err != nil {
		rep.Unavailable = append(rep.Unavailable, fmt.Sprintf("which webhooks the guard manages (MANAGED shows \"?\"): %v; pass --config FILE to read the configuration from a file", err))
	}
	cfg := o.Config // nil when unknown
	rep.ConfigSource = o.ConfigSource

	hooks, configs, problems := listHooks(ctx, o.Client)
	rep.Unavailable = append(rep.Unavailable, problems...)
	if len(problems) == 2 {
		return errors.New(strings.Join(problems, "; "))
	}

	want := map[apimetrics.Webhook]bool{}
	for _, h := range hooks {
		want[h.metricsKey()] = true
	}
	window := o.Window
	scraper := &apimetrics.Scraper{Client: o.KubeClient.Discovery().RESTClient(), Latency: true, Timeout: scrapeTimeout}
	m, started, err := readCallMetrics(ctx, scraper, want, window)
	switch {
	case err != nil:
		rep.Metrics = "unavailable: " + metricsProblem(err)
		rep.Unavailable = append(rep.Unavailable, "calls, failure ratios and p99 latencies: "+metricsProblem(err))
	case window > 0:
		rep.Window = window.String()
		rep.Metrics = fmt.Sprintf("calls in the last %s, from two scrapes of the same kube-apiserver's /metrics (behind a load balancer each apiserver counts only its own calls)", window)
	default:
		rep.Metrics = "cumulative since kube-apiserver started, as counted by the apiserver that answered (behind a load balancer each counts only its own calls); --window 1m for recent calls only"
	}
	if started > 0 {
		at := time.Unix(0, int64(started*float64(time.Second))).UTC()
		rep.APIServerStarted = at.Format(time.RFC3339)
		if err == nil && window == 0 {
			rep.Metrics = fmt.Sprintf("cumulative since kube-apiserver started at %s (%s ago), as counted by the apiserver that answered (behind a load balancer each counts only its own calls); --window 1m for recent calls only",
				rep.APIServerStarted, time.Since(at).Round(time.Second))
		}
	}
	rep.Webhooks = buildRows(hooks, cfg, m)
	// The Lease, and leader election's Events, are where the Deployment
	// says: kube-system in the shipped manifests.
	leaseNS := o.LeaseNamespace(ctx)
	in := intercept.Inputs{Namespace: leaseNS, Mutating: configs.mutating, Validating: configs.validating, WithoutMarking: cfg != nil && !opensMutating(cfg)}
	var unread []string
	in.NamespaceLabels, unread = namespaceLabels(ctx, o.Client, leaseNS, unread)
	in.DefaultLabels, unread = namespaceLabels(ctx, o.Client, metav1.NamespaceDefault, unread)
	if leaseNS != circuit.EventsNamespace {
		in.EventsLabels, unread = namespaceLabels(ctx, o.Client, circuit.EventsNamespace, unread)
	}
	rep.InterceptingTheGuard = interceptRows(intercept.Find(in), cfg, leaseNS)
	rep.InterceptBasis = interceptBasis(in, unread)

	if o.Output == cli.OutputTable {
		if err := printWebhooks(o.Out, rep); err != nil {
			return err
		}
	} else if err := cli.PrintObject(o.Out, o.Output, rep); err != nil {
		return err
	}
	for _, u := range rep.Unavailable {
		fmt.Fprintf(o.ErrOut, "unavailable: %s\n", u)
	}
	return nil
}

// listHooks lists the webhooks of every configuration of both kinds. A
// kind it may not list is a problem, named with the permission missing.
func listHooks(ctx context.Context, c client.Reader) ([]hookInfo, configurations, []string) {
	var hooks []hookInfo
	var problems []string
	record := func(kind circuit.Kind, name string, annotations map[string]string) circuit.Record {
		rec, err := circuit.Decode(annotations)
		if err != nil {
			problems = append(problems, fmt.Sprintf("the circuit record of %s %s: %v", kind.ObjectKind(), name, err))
		}
		return rec
	}
	entry := func(rec circuit.Record, webhook string) *circuit.Entry {
		if e, ok := rec[webhook]; ok {
			return &e
		}
		return nil
	}
	mwcs := &admissionregistrationv1.MutatingWebhookConfigurationList{}
	if err := c.List(ctx, mwcs); err != nil {
		problems = append(problems, listProblem(circuit.KindMutating, err))
	}
	for _, o := range mwcs.Items {
		rec := record(circuit.KindMutating, o.Name, o.Annotations)
		for _, w := range o.Webhooks {
			hooks = append(hooks, hookInfo{kind: circuit.KindMutating, configuration: o.Name, name: w.Name, policy: w.FailurePolicy, timeout: w.TimeoutSeconds, open: entry(rec, w.Name)})
		}
	}
	vwcs := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	if err := c.List(ctx, vwcs); err != nil {
		problems = append(problems, listProblem(circuit.KindValidating, err))
	}
	for _, o := range vwcs.Items {
		rec := record(circuit.KindValidating, o.Name, o.Annotations)
		for _, w := range o.Webhooks {
			hooks = append(hooks, hookInfo{kind: circuit.KindValidating, configuration: o.Name, name: w.Name, policy: w.FailurePolicy, timeout: w.TimeoutSeconds, open: entry(rec, w.Name)})
		}
	}
	return hooks, configurations{mutating: mwcs.Items, validating: vwcs.Items}, problems
}

// opensMutating reports whether a mutating target of cfg can open, so
// that the guard sends the marking canary.
func opensMutating(cfg *config.Configuration) bool {
	return slices.ContainsFunc(cfg.Targets, func(t config.Target) bool { return t.Kind == circuit.KindMutating && !t.Observes() })
}

// namespaceLabels reads a namespace's labels; what it cannot read it adds
// to unread and returns nil (intercept.Find then judges by
// kubernetes.io/metadata.name alone, which kube-apiserver sets on every
// namespace).
func namespaceLabels(ctx context.Context, c client.Reader, name string, unread []string) (map[string]string, []string) {
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return nil, append(unread, fmt.Sprintf("namespace %s: %v", name, err))
	}
	if ns.Labels == nil {
		return map[string]string{}, unread
	}
	return ns.Labels, unread
}

// interceptBasis says what the interceptors were judged for.
func interceptBasis(in intercept.Inputs, unread []string) string {
	what := "its Lease and leader election's Events there; Events about cluster-scoped objects in " + circuit.EventsNamespace
	if in.Namespace == circuit.EventsNamespace {
		what = "its Lease and all its Events there"
	}
	basis := fmt.Sprintf("for an installation with its Lease in namespace %s (%s", in.Namespace, what)
	if in.WithoutMarking {
		basis += "; no marking canary: no mutating target of its configuration opens)"
	} else {
		basis += "; the marking canary in default)"
	}
	if len(unread) > 0 {
		return basis + ", namespaceSelectors judged by kubernetes.io/metadata.name alone (cannot read " + strings.Join(unread, "; ") + ")"
	}
	return basis + ", namespaceSelectors judged by the namespaces' labels"
}

// interceptRows adds to each interceptor whether the guard manages it and
// the advice for an installation in namespace.
func interceptRows(found []intercept.Interceptor, cfg *config.Configuration, namespace string) []interceptRow {
	managed := map[string]bool{}
	if cfg != nil {
		for _, t := range cfg.Targets {
			managed[t.Key()] = true
		}
	}
	rows := make([]interceptRow, 0, len(found))
	for _, i := range found {
		row := interceptRow{Interceptor: i, Advice: intercept.Advice(i, namespace)}
		if cfg != nil {
			mg := managed[string(i.Kind)+"/"+i.Configuration+"/"+i.Webhook]
			row.Managed = &mg
		}
		rows = append(rows, row)
	}
	return rows
}

func listProblem(kind circuit.Kind, err error) string {
	if apierrors.IsForbidden(err) {
		return fmt.Sprintf("%ss: missing permission: list %s.admissionregistration.k8s.io (cluster-wide): %v", kind.ObjectKind(), kind.Resource(), err)
	}
	return fmt.Sprintf("%ss: %v", kind.ObjectKind(), err)
}

func metricsProblem(err error) string {
	if apierrors.IsForbidden(err) {
		return fmt.Sprintf(`missing permission: get on the non-resource URL /metrics (a ClusterRole rule nonResourceURLs: ["/metrics"], verbs: ["get"]): %v`, err)
	}
	return err.Error()
}

// readCallMetrics scrapes once, or twice window apart and subtracts. It
// returns the apiserver's start time (process_start_time_seconds).
func readCallMetrics(ctx context.Context, s *apimetrics.Scraper, want map[apimetrics.Webhook]bool, window time.Duration) (*callMetrics, float64, error) {
	first, err := s.Scrape(ctx, want)
	if err != nil {
		return nil, 0, err
	}
	if window == 0 {
		return &callMetrics{counters: first.Webhooks, latency: first.Latency}, first.Instance, nil
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return nil, first.Instance, ctx.Err()
	}
	// Behind a load balancer the second scrape may reach another
	// apiserver, whose counters have nothing to do with the first's.
	var second apimetrics.Sample
	for range secondScrapes {
		if second, err = s.Scrape(ctx, want); err != nil {
			return nil, first.Instance, err
		}
		if second.Instance == first.Instance {
			break
		}
	}
	if second.Instance != first.Instance {
		return nil, first.Instance, errors.New("the two scrapes of /metrics reached different apiservers (started at different times), whose counters cannot be subtracted; try again, or without --window")
	}
	m, err := deltaMetrics(first, second)
	return m, second.Instance, err
}

// deltaMetrics is the calls between two scrapes of the same apiserver.
func deltaMetrics(earlier, later apimetrics.Sample) (*callMetrics, error) {
	m := &callMetrics{counters: map[apimetrics.Webhook]apimetrics.Counters{}, latency: map[apimetrics.Webhook]apimetrics.Histogram{}}
	for wh, cur := range later.Webhooks {
		prev := earlier.Webhooks[wh]
		d := apimetrics.Counters{Calls: cur.Calls - prev.Calls, CallErrors: cur.CallErrors - prev.CallErrors, FailOpen: cur.FailOpen - prev.FailOpen}
		if d.Calls < 0 || d.CallErrors < 0 || d.FailOpen < 0 {
			return nil, fmt.Errorf("the apiserver's counters for %s went down between the two scrapes (reset)", wh.Name)
		}
		m.counters[wh] = d
	}
	for wh, cur := range later.Latency {
		d, ok := cur.Sub(earlier.Latency[wh])
		if !ok {
			return nil, fmt.Errorf("the apiserver's latency histogram for %s cannot be subtracted between the two scrapes (reset)", wh.Name)
		}
		m.latency[wh] = d
	}
	return m, nil
}

// buildRows turns the webhooks, the guard's configuration (nil when
// unknown) and their calls (nil when unknown) into rows, riskiest first.
func buildRows(hooks []hookInfo, cfg *config.Configuration, m *callMetrics) []webhookRow {
	managed := map[string]bool{}
	if cfg != nil {
		for _, t := range cfg.Targets {
			managed[t.Key()] = true
		}
	}
	byMetrics := map[apimetrics.Webhook][]hookInfo{}
	for _, h := range hooks {
		byMetrics[h.metricsKey()] = append(byMetrics[h.metricsKey()], h)
	}
	rows := make([]webhookRow, 0, len(hooks))
	for _, h := range hooks {
		row := webhookRow{Kind: string(h.kind), Configuration: h.configuration, Webhook: h.name,
			FailurePolicy: string(admissionregistrationv1.Fail), TimeoutSeconds: 10}
		if h.policy != nil && *h.policy != "" {
			row.FailurePolicy = string(*h.policy)
		}
		if h.timeout != nil {
			row.TimeoutSeconds = *h.timeout
		}
		row.policy = row.FailurePolicy
		if h.open != nil {
			row.Circuit = fmt.Sprintf("open (%s) since %s, failurePolicy was %s", h.open.Mode, h.open.OpenedAt.UTC().Format(time.RFC3339), circuit.PolicyString(h.open.OriginalFailurePolicy))
			row.policy = string(admissionregistrationv1.Fail)
			if h.open.OriginalFailurePolicy != nil && *h.open.OriginalFailurePolicy != "" {
				row.policy = string(*h.open.OriginalFailurePolicy)
			}
		}
		if cfg != nil {
			mg := managed[string(h.kind)+"/"+h.configuration+"/"+h.name]
			row.Managed = &mg
		}
		if others := byMetrics[h.metricsKey()]; len(others) > 1 {
			var names []string
			for _, o := range others {
				if o.configuration != h.configuration {
					names = append(names, o.configuration)
				}
			}
			row.SharedMetrics = fmt.Sprintf("the apiserver counts webhooks by name: these numbers also count %s in %s", h.name, strings.Join(names, ", "))
		}
		if m != nil {
			c := m.counters[h.metricsKey()]
			calls, failed := c.Calls, c.CallErrors+c.FailOpen
			row.Calls, row.FailedCalls = &calls, &failed
			if calls > 0 {
				ratio := failed / calls
				row.FailureRatio = &ratio
			}
			if p99, ok := m.latency[h.metricsKey()].Quantile(0.99); ok {
				row.P99Seconds = &p99
			}
		}
		row.Risk, row.Reasons = judgeRisk(row, m != nil)
		rows = append(rows, row)
	}
	slices.SortStableFunc(rows, compareRisk)
	return rows
}

// judgeRisk says how likely the webhook is to take admission down, and
// why. A webhook under Fail rejects every request whose call fails or
// times out; under Ignore it admits them without it, after waiting up to
// its timeout.
func judgeRisk(row webhookRow, haveMetrics bool) (string, []string) {
	fail := row.policy == string(admissionregistrationv1.Fail)
	var reasons []string
	failing := row.FailureRatio != nil && *row.FailureRatio > 0
	slow := row.P99Seconds != nil && *row.P99Seconds >= nearTimeout*float64(row.TimeoutSeconds)
	if failing {
		if fail {
			reasons = append(reasons, fmt.Sprintf("failurePolicy Fail and %s of its calls failed: each rejected a request", percent(*row.FailureRatio)))
		} else {
			reasons = append(reasons, fmt.Sprintf("%s of its calls failed: failurePolicy Ignore admitted those requests without it", percent(*row.FailureRatio)))
		}
	}
	if slow {
		if fail {
			reasons = append(reasons, fmt.Sprintf("failurePolicy Fail and p99 %s near its %ds timeout: a little slower and requests are rejected", seconds(*row.P99Seconds), row.TimeoutSeconds))
		} else {
			reasons = append(reasons, fmt.Sprintf("p99 %s near its %ds timeout: requests wait, then go without it", seconds(*row.P99Seconds), row.TimeoutSeconds))
		}
	}
	switch {
	case (failing || slow) && fail:
		return riskHigh, reasons
	case failing || slow:
		return riskMedium, reasons
	case fail && (!haveMetrics || row.FailureRatio == nil):
		why := "no calls observed"
		if !haveMetrics {
			why = "no metrics"
		}
		return riskUnknown, append(reasons, why+": under failurePolicy Fail its failures would reject requests")
	}
	return riskLow, reasons
}

// compareRisk orders rows riskiest first: by level, then unmanaged before
// managed (the candidates to approve), then by failure ratio and by p99
// relative to the timeout, then by name.
func compareRisk(a, b webhookRow) int {
	return cmp.Or(
		cmp.Compare(riskOrder[a.Risk], riskOrder[b.Risk]),
		cmp.Compare(managedRank(a), managedRank(b)),
		-cmp.Compare(deref(a.FailureRatio), deref(b.FailureRatio)),
		-cmp.Compare(latencyShare(a), latencyShare(b)),
		cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Configuration, b.Configuration),
		cmp.Compare(a.Webhook, b.Webhook),
	)
}

func managedRank(r webhookRow) int {
	if r.Managed != nil && *r.Managed {
		return 1
	}
	return 0
}

func latencyShare(r webhookRow) float64 {
	if r.P99Seconds == nil || r.TimeoutSeconds <= 0 {
		return 0
	}
	return *r.P99Seconds / float64(r.TimeoutSeconds)
}

func deref(f *float64) float64 {
	if f == nil {
		return 0
	}
	return *f
}

func percent(ratio float64) string {
	return fmt.Sprintf("%.3g%%", ratio*100)
}

func seconds(s float64) string {
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("%.3gs", s)
}

// printWebhooks prints rep as a table.
func printWebhooks(w io.Writer, rep webhooksReport) error {
	fmt.Fprintf(w, "Guard configuration: %s\n", cli.Dash(rep.ConfigSource))
	fmt.Fprintf(w, "Calls, failure ratio (calling_webhook_error + fail-open over calls) and p99: %s\n\n", rep.Metrics)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RISK\tKIND\tCONFIGURATION\tWEBHOOK\tFAILURE POLICY\tTIMEOUT\tCALLS\tFAILURE RATIO\tP99\tMANAGED\tWHY")
	for _, r := range rep.Webhooks {
		calls, ratio, p99 := "-", "-", "-"
		if r.Calls != nil {
			calls = fmt.Sprintf("%.0f", *r.Calls)
		}
		if r.FailureRatio != nil {
			ratio = fmt.Sprintf("%.2f (%.0f failed)", *r.FailureRatio, *r.FailedCalls)
		}
		if r.P99Seconds != nil {
			p99 = seconds(*r.P99Seconds)
		}
		managed := "?"
		if r.Managed != nil {
			managed = "no"
			if *r.Managed {
				managed = "yes"
			}
		}
		why := r.Reasons
		if r.Circuit != "" {
			why = append(why, "circuit "+r.Circuit)
		}
		if r.SharedMetrics != "" {
			why = append(why, r.SharedMetrics)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%ds\t%s\t%s\t%s\t%s\t%s\n", r.Risk, r.Kind, r.Configuration, r.Webhook, r.FailurePolicy, r.TimeoutSeconds,
			calls, ratio, p99, managed, cli.Dash(strings.Join(why, "; ")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Webhooks) == 0 {
		fmt.Fprintln(w, "(no webhook configurations)")
	}
	printInterceptors(w, rep)
	return nil
}

// printInterceptors prints the section on the webhooks that intercept the
// guard's own requests.
func printInterceptors(w io.Writer, rep webhooksReport) {
	if len(rep.InterceptingTheGuard) == 0 {
		fmt.Fprintf(w, "\nNo webhook with failurePolicy Fail intercepts the guard's own requests, judged %s.\n", rep.InterceptBasis)
		return
	}
	fmt.Fprintf(w, "\nWebhooks with failurePolicy Fail that intercept the guard's own requests, judged %s:\n", rep.InterceptBasis)
	for _, r := range rep.InterceptingTheGuard {
		managed := "managed: ?"
		if r.Managed != nil {
			managed = "not managed by the guard"
			if *r.Managed {
				managed = "managed by the guard"
			}
		}
		verb := "intercepts"
		if r.MatchConditions {
			verb = "may intercept"
		}
		var what []string
		for _, req := range r.Intercepts {
			what = append(what, req.String())
		}
		fmt.Fprintf(w, "\n%s %s webhook %s (timeout %ds, %s) %s: %s\n", r.Kind, r.Configuration, r.Webhook, r.TimeoutSeconds, managed, verb, strings.Join(what, ", "))
		for _, a := range r.Advice {
			fmt.Fprintf(w, "  - %s\n", a)
		}
	}
}
