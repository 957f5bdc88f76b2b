// Package status is "guard status": every configured target with its
// circuit state, read from the objects, and the leader's probe counts,
// read from its GET /status (the contract is internal/status). With a
// kubeconfig alone it reads the installed configuration, finds the leader
// from its Lease and reaches it through the apiserver's pods proxy. What it
// cannot read it names, and prints the rest. It changes nothing.
package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/cli/startcheck"
	"github.com/webhook-guard/webhook-guard/internal/config"
	statusapi "github.com/webhook-guard/webhook-guard/internal/status"
)

// readTimeout bounds one read of a guard's /status, through the
// apiserver or at --endpoint: the counts are in memory, so a guard that
// does not answer within it is not going to.
const readTimeout = 5 * time.Second

// The exit statuses of --exit-code, besides 0 (every circuit closed, a
// leader) and 1 (the command failed).
// 2 is a usage error, for every command.
const (
	// ExitCircuitOpen: a target's circuit is open.
	ExitCircuitOpen = 3
	// ExitNoLeader: the installation has no leader. It wins over
	// ExitCircuitOpen: without a leader nothing opens or closes a circuit.
	ExitNoLeader = 4
	// ExitPolicyNotEnforced: the guard policy is missing or not as the
	// guard renders it, so the fields the breaker owns are unguarded. It
	// wins over the others: it is the one to fix first.
	ExitPolicyNotEnforced = 5
)

// waitPoll is how often --wait looks again.
const waitPoll = 2 * time.Second

// stateOpen is the State of a row whose circuit is open, and stateClosed
// of one whose circuit is closed.
const (
	stateOpen   = "Open"
	stateClosed = "Closed"
	// stateMissing is the State of a row whose configuration is not found.
	stateMissing = "Missing"
)

const long = `Prints every configured target: its circuit state from the webhook
configurations, and the leader's probe counts. With a kubeconfig alone it
reads the installed configuration from the cluster (the ConfigMap the
guard's Deployment mounts), finds the leader from its Lease, and reads the
leader's /status through the apiserver's pods proxy: no port-forward. What
it cannot read it names on stderr, and prints the rest.

With --exit-code, the exit status says what it found, for scripts and
probes: 0 when every circuit is closed, there is a leader and the guard
policy is enforced; 3 when a target's circuit is open; 4 when the
installation has no leader (which wins over 3: without a leader nothing
opens or closes a circuit); 5 when the guard policy (and its binding) is
missing or not the rule the guard renders for the breaker
it was rendered for (else system:serviceaccount:<namespace>:webhook-guard),
which wins over both:
the owned fields are then unguarded. There is no leader when the
leader-election Lease (in the installation's namespace unless its
Deployment's --leader-election-namespace says otherwise) does not exist, has no holder or has
expired; with --endpoint, when nothing answers there. A Lease that cannot
be read, a leader whose /status cannot be reached through the apiserver,
or an endpoint that refuses the request, is not "no leader": it is
reported on stderr and changes nothing. 1 means the command failed, and 2
a mistake on the command line (then nothing is printed on stdout), with or
without --exit-code.

--wait D looks again every 2s, for up to D, until the status would exit
0, and prints the last look (as cmctl check api --wait does); with
--exit-code, its status is the last look's. The chart's helm test runs
"guard status --exit-code --wait 60s".

The installation is the one in -n/--namespace. Without -n, as in kubectl,
it is the kubeconfig context's namespace when the guard's Deployment
(--deployment) is there; else the namespace of the only Deployment of
that name in the cluster; else webhook-guard-system. -v=1 says which.

-o json|yaml prints the report for scripts: {namespace, configSource,
instance, lease, leader, targets, orphanedRecords, guardPolicy,
unavailable}, a row per target; -o jsonpath=TEMPLATE runs a template on it, as kubectl's -o
jsonpath does (-o jsonpath='{.targets[*].state}'), and -o name prints the
webhook configuration of each target that exists, and of each orphaned
record, as kubectl's -o name does
(mutatingwebhookconfiguration.admissionregistration.k8s.io/NAME).`

// Options are the flags of "guard status".
type Options struct {
	// Factory owns --config (default: the installed configuration),
	// -n/--namespace (where the Deployment, the Lease and the status
	// reader are), --deployment and kubectl's connection flags, and builds
	// the clients.
	*factory.Factory
	cli.IOStreams
	// Endpoint is a /status URL to read the counts from instead of the
	// leader's pod (--endpoint): https://... (a port-forward to the
	// metrics port; a status token is requested and sent) or
	// http://127.0.0.1:... (a guard run by hand). Default empty: the
	// leader's pod through the apiserver.
	Endpoint string
	// Output is the format (-o, --output): table, json, yaml, name,
	// jsonpath=TEMPLATE or jsonpath-as-json=TEMPLATE (cli.AddOutputFlag).
	// Default table.
	Output string
	// ExitCode makes the exit status say whether a circuit is open
	// (ExitCircuitOpen) or the installation has no leader (ExitNoLeader)
	// (--exit-code). Default false: 0 whenever the command ran.
	ExitCode bool
	// Wait looks again until every circuit is closed, a leader leads and
	// the guard policy is enforced, for at most Wait (--wait). Default 0:
	// one look.
	Wait time.Duration
}

// NewCmd returns "guard status". It only binds flags.
func NewCmd(streams cli.IOStreams, f *factory.Factory) *cobra.Command {
	o := &Options{Factory: f, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print every configured target with its circuit state and probe counts",
		Long:  long,
		Args:  cli.NoArgs,
		RunE:  cli.RunE(o),
	}
	fs := cmd.Flags()
	f.AddInstallationReaderFlags(fs, factory.InstalledConfigUsage)
	fs.StringVar(&o.Endpoint, "endpoint", "", "A /status URL to read counts from instead of the leader's pod: https://... (for example a port-forward to the metrics port; a status token is requested and sent, the self-signed certificate is not verified) or http://127.0.0.1:... (--status-bind-address of a guard run by hand); default: the leader's pod through the apiserver.")
	cli.AddOutputFlag(fs, &o.Output)
	fs.BoolVar(&o.ExitCode, "exit-code", false, "Exit 3 when a circuit is open, 4 when the installation has no leader, 5 when the guard policy is not enforced (see above).")
	fs.DurationVar(&o.Wait, "wait", 0, "Look again every 2s, for up to this long, until every circuit is closed, a leader leads and the guard policy is enforced; print the last look.")
	f.RegisterCompletions(cmd)
	return cmd
}

// Validate checks the flags and reads the --config file, before anything
// reaches the cluster.
func (o *Options) Validate() error {
	if err := cli.ValidateOutput(o.Output); err != nil {
		return err
	}
	if o.Wait < 0 {
		return cli.Usagef("--wait %s: must not be negative", o.Wait)
	}
	return o.ReadConfigFile()
}

// Complete builds the clients.
func (o *Options) Complete(ctx context.Context) error {
	return o.Factory.Complete(ctx)
}

// Run reads the configuration, the objects and the counts (again until
// all is well, for up to Wait), prints them, and with ExitCode returns an
// ExitError for what it found.
func (o *Options) Run(ctx context.Context) error {
	if err := o.ReadInstalledConfig(ctx); err != nil {
		return fmt.Errorf("%w; pass --config FILE to read the configuration from a file", err)
	}
	deadline := time.Now().Add(o.Wait)
	rep, found := o.look(ctx)
	for found != nil && time.Now().Add(waitPoll).Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(waitPoll):
		}
		rep, found = o.look(ctx)
	}
	var err error
	switch cli.OutputFormat(o.Output) {
	case cli.OutputTable:
		err = printStatus(o.Out, o.ErrOut, rep)
	case cli.OutputJSON, cli.OutputYAML:
		err = cli.PrintObject(o.Out, o.Output, rep)
	default:
		// The report's unavailable may not be in what -o name or a
		// template prints: on stderr, as with the table.
		err = cli.PrintObject(o.Out, o.Output, rep)
		printUnavailable(o.ErrOut, rep.Unavailable)
	}
	switch {
	case err != nil:
		return err
	case found != nil && o.ExitCode:
		return *found
	case found != nil && o.Wait > 0:
		return fmt.Errorf("after %s: %w", o.Wait, found.Err)
	}
	return nil
}

// leaderRows reads the leader's /status rows, from o.Endpoint or through
// the apiserver from the Lease's holder, noting in rep where it looked and
// what it could not read; noLeader is set when nobody leads.
func (o *Options) leaderRows(ctx context.Context, rep *statusReport) (rows []statusapi.Row, noLeader bool) {
	namespace := o.GuardNamespace
	if o.Endpoint != "" {
		var err error
		token := ""
		if strings.HasPrefix(o.Endpoint, "https://") {
			token, err = statusToken(ctx, o.KubeClient, namespace)
		}
		if err == nil {
			rows, err = fetchStatus(ctx, o.Endpoint, token)
		}
		if err != nil {
			noLeader = errors.As(err, new(noLeaderError))
			rep.Unavailable = append(rep.Unavailable, fmt.Sprintf("probe counts from %s: %v", o.Endpoint, err))
		}
	} else {
		lease := client.ObjectKey{Namespace: o.LeaseNamespace(ctx), Name: statusapi.LeaseName(o.Config.Instance)}
		rep.Lease = lease.String()
		pod, err := leaderPod(ctx, o.Client, namespace, lease)
		if err != nil {
			noLeader = errors.As(err, new(noLeaderError))
			rep.Unavailable = append(rep.Unavailable, fmt.Sprintf("probe counts: %v", err))
		} else {
			rep.Leader = pod.Name
			if rows, err = proxyStatus(ctx, o.KubeClient, pod); err != nil {
				rep.Unavailable = append(rep.Unavailable, fmt.Sprintf("probe counts from the leader pod %s/%s through the apiserver: %v", pod.Namespace, pod.Name, err))
			}
		}
	}
	return rows, noLeader
}

// look reads everything once. found is what keeps the status from
// exiting 0 (the ExitError --exit-code returns); nil when all is well.
func (o *Options) look(ctx context.Context) (statusReport, *cli.ExitError) {
	cfg, c, namespace := o.Config, o.Client, o.GuardNamespace
	rep := statusReport{Namespace: namespace, ConfigSource: o.ConfigSource, Instance: cfg.Instance}

	rows, noLeader := o.leaderRows(ctx, &rep)
	counts := map[string]statusapi.Row{}
	for _, r := range rows {
		counts[r.Kind+"/"+r.Configuration+"/"+r.Webhook] = r
	}
	open := 0
	for _, t := range cfg.Targets {
		row := objectRow(ctx, c, t)
		if cr, ok := counts[t.Key()]; ok {
			row.Failures, row.Successes, row.LastResult, row.LastProbe = cr.Failures, cr.Successes, cr.LastResult, cr.LastProbe
			row.APIServerLast, row.APIServerFailures, row.Admitted, row.Disagree = cr.APIServerLast, cr.APIServerFailures, cr.Admitted, cr.Disagree
			row.Marking, row.Marked = cr.Marking, cr.Marked
			row.Reopenings, row.DampedFor = cr.Reopenings, cr.DampedFor
			row.WouldOpenSince, row.WouldOpenSignal, row.WouldClosedAt = cr.WouldOpenSince, cr.WouldOpenSignal, cr.WouldClosedAt
			if t.Observes() && row.State == stateClosed && cr.WouldOpenSince != "" {
				row.State = statusapi.StateWouldOpen
			}
			if cr.Problem != "" && row.Problem == "" {
				row.Problem = cr.Problem
			}
		}
		if row.State == stateOpen {
			open++
		}
		rep.Targets = append(rep.Targets, row)
	}
	switch orphans, err := startcheck.OrphanedRecords(ctx, c, cfg, ""); {
	case err != nil:
		rep.Unavailable = append(rep.Unavailable, fmt.Sprintf("records of removed targets: %v", err))
	default:
		for _, or := range orphans {
			rep.OrphanedRecords = append(rep.OrphanedRecords, orphanRow{Kind: string(or.Kind), Configuration: or.Configuration, Webhook: or.Webhook, By: or.By})
		}
	}

	breaker, enforced := o.policyEnforced(ctx)
	if enforced != nil {
		rep.Unavailable = append(rep.Unavailable, fmt.Sprintf("guard policy not enforced: %v", enforced))
	} else {
		rep.GuardPolicy = "enforced, for the breaker " + breaker
	}
	switch {
	case enforced != nil:
		return rep, &cli.ExitError{Code: ExitPolicyNotEnforced, Err: fmt.Errorf("the guard policy is not enforced: %w", enforced)}
	case noLeader:
		return rep, &cli.ExitError{Code: ExitNoLeader, Err: errors.New("the installation has no leader")}
	case open > 0:
		return rep, &cli.ExitError{Code: ExitCircuitOpen, Err: fmt.Errorf("%d of %d circuits open", open, len(cfg.Targets))}
	}
	return rep, nil
}

// policyEnforced says whether the installation's guard policy and binding
// are the rule the guard renders for its breaker and the installed
// configuration's targets (admission.PolicyProblems, what the leader
// reports too), and returns that breaker: the one the policy says it was
// rendered for (admission.PolicyBreaker), else the ServiceAccount
// webhook-guard in --namespace. The breaker is only a hint for which
// rendering to compare with: a policy is enforced only when it is, whole,
// the rendering for that breaker and these targets.
func (o *Options) policyEnforced(ctx context.Context) (string, error) {
	cfg := o.Config
	opts := admission.Options{Instance: cfg.Instance, Managed: cfg.Managed(circuit.KindMutating), ManagedValidating: cfg.Managed(circuit.KindValidating)}
	opts.BreakerUsername = "system:serviceaccount:" + o.GuardNamespace + ":" + circuit.DefaultServiceAccount
	policy, _ := admission.RenderPolicy(opts)
	if err := o.Client.Get(ctx, client.ObjectKeyFromObject(policy), policy); err == nil {
		if breaker, ok := admission.PolicyBreaker(policy); ok {
			opts.BreakerUsername = breaker
		}
	}
	problems, err := admission.PolicyProblems(ctx, o.Client, opts)
	if err != nil {
		return opts.BreakerUsername, err
	}
	if len(problems) > 0 {
		return opts.BreakerUsername, errors.New(strings.Join(problems, "; "))
	}
	return opts.BreakerUsername, nil
}

// statusReport is what "guard status" found; -o json|yaml|jsonpath prints
// it, and -o name its ObjectNames.
type statusReport struct {
	// Namespace is the installation's namespace.
	Namespace string `json:"namespace"`
	// ConfigSource says where the GuardConfiguration came from.
	ConfigSource string `json:"configSource"`
	// Instance is the configuration's instance name, if any.
	Instance string `json:"instance,omitempty"`
	// Lease is the leader-election Lease read, and Leader its holder pod.
	Lease  string `json:"lease,omitempty"`
	Leader string `json:"leader,omitempty"`
	// Targets are the configured targets: state from the objects, counts
	// from the leader.
	Targets []statusapi.Row `json:"targets"`
	// OrphanedRecords are open circuits of webhooks that are no longer
	// targets.
	OrphanedRecords []orphanRow `json:"orphanedRecords,omitempty"`
	// GuardPolicy says that the guard policy is enforced, and for which
	// breaker; empty when it is not (Unavailable says why).
	GuardPolicy string `json:"guardPolicy,omitempty"`
	// Unavailable names what could not be read, and why.
	Unavailable []string `json:"unavailable,omitempty"`
}

var _ cli.Named = statusReport{}

// ObjectNames are the webhook configurations of the targets that exist,
// then of the orphaned records, each once, as kubectl's -o name prints
// them.
func (r statusReport) ObjectNames() []string {
	var names []string
	add := func(kind, name string) {
		n := cli.ObjectName(admissionregistrationv1.SchemeGroupVersion.WithKind(circuit.Kind(kind).ObjectKind()).GroupKind(), name)
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, row := range r.Targets {
		if row.State != stateMissing {
			add(row.Kind, row.Configuration)
		}
	}
	for _, o := range r.OrphanedRecords {
		add(o.Kind, o.Configuration)
	}
	return names
}

// orphanRow is an open circuit of a webhook that is no longer a target.
type orphanRow struct {
	Kind          string `json:"kind"`
	Configuration string `json:"configuration"`
	Webhook       string `json:"webhook"`
	By            string `json:"by,omitempty"`
}

// observedSince is the SINCE column of a target in Observe mode: since when
// its circuit would be open, or when it last would have closed.
func observedSince(row statusapi.Row) string {
	switch {
	case row.WouldOpenSince != "":
		return row.WouldOpenSince + sinceAgo(row.WouldOpenSince)
	case row.WouldClosedAt != "":
		return "would have closed " + row.WouldClosedAt
	}
	return ""
}

// sinceAgo is " (how long ago)" for an RFC 3339 time, or "".
func sinceAgo(at string) string {
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (%s)", time.Since(t).Round(time.Second))
}

// printStatus prints rep as a table, and what was unavailable on stderr.
func printStatus(stdout, stderr io.Writer, rep statusReport) error {
	fmt.Fprintf(stdout, "Configuration: %s\n", rep.ConfigSource)
	if rep.Lease != "" {
		fmt.Fprintf(stdout, "Leader: %s (Lease %s)\n", cli.Dash(rep.Leader), rep.Lease)
	}
	if rep.GuardPolicy != "" {
		fmt.Fprintf(stdout, "Guard policy: %s\n", rep.GuardPolicy)
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tCONFIGURATION\tWEBHOOK\tSTATE\tMODE\tSINCE\tOPENED BY\tOWNER\tFAILURES\tSUCCESSES\tADMITTED WITHOUT\tLAST PROBE\tAPISERVER")
	for _, row := range rep.Targets {
		last := row.LastResult
		if row.Problem != "" {
			last = row.Problem
		}
		admitted := "-"
		if row.State == stateOpen {
			admitted = fmt.Sprintf("%.0f", row.Admitted)
			if row.Marked > 0 {
				admitted += fmt.Sprintf(" (%.0f marked)", row.Marked)
			}
		}
		apiserver := row.APIServerLast
		if row.Disagree != "" {
			apiserver += " (signals disagree: " + row.Disagree + ")"
		}
		owner := row.Owner
		if row.State == stateOpen && owner == "" {
			owner = "(unsigned)"
		}
		since, openedBy := row.Since, row.OpenedBy
		if row.Mode == string(config.ModeObserve) {
			// What would have happened, and when: nothing was written.
			since, openedBy = observedSince(row), row.WouldOpenSignal
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", row.Kind, row.Configuration, row.Webhook, row.State, row.Mode, cli.Dash(since), cli.Dash(openedBy),
			cli.Dash(owner), row.Failures, row.Successes, admitted, cli.Dash(last), cli.Dash(apiserver))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.OrphanedRecords) > 0 {
		fmt.Fprintln(stdout, "\nOpen circuits on webhooks that are no longer targets (the breaker closes them when it may update the configuration):")
		for _, o := range rep.OrphanedRecords {
			fmt.Fprintf(stdout, "  %s %s %s (opened by %s)\n", o.Kind, o.Configuration, o.Webhook, cli.Dash(o.By))
		}
	}
	for _, row := range rep.Targets {
		if row.Marking != "" {
			fmt.Fprintf(stdout, "\nMarking: %s\n", row.Marking)
			break
		}
	}
	for _, row := range rep.Targets {
		if row.DampedFor != "" {
			fmt.Fprintf(stdout, "\nDamped: %s re-opened %d time(s) in a row soon after closing; it stays open at least %s after opening before it may close\n",
				row.Webhook, row.Reopenings, row.DampedFor)
		}
	}
	printUnavailable(stderr, rep.Unavailable)
	return nil
}

// printUnavailable names on stderr what could not be read.
func printUnavailable(stderr io.Writer, unavailable []string) {
	for _, u := range unavailable {
		fmt.Fprintf(stderr, "unavailable: %s\n", u)
	}
}
