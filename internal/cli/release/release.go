package release

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/cli/startcheck"
	"github.com/webhook-guard/webhook-guard/internal/cli/status"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	statusapi "github.com/webhook-guard/webhook-guard/internal/status"
)

// FieldManager is the field manager of the writes "guard release" makes.
const FieldManager = "webhook-guard-release"

// notFoundNote is the note of a webhook whose configuration is not found.
const notFoundNote = "nothing to release (configuration not found)"

const long = `Hands back what this installation of webhook-guard owns, before it is
uninstalled: for every target (--all) or one configuration or webhook, it
closes each open circuit, restoring the webhook exactly as its record says
it was (the original failurePolicy, or none when it was unset, and no
bypass matchCondition), and removes the installation's record entries.
As after a closing, their marking stays armed in that write and is
disarmed 2s later, in a write of its own: kube-apiserver calls the webhook
again a moment after it sees the write, and what it admits meanwhile
without the webhook is still marked. It then deletes the marking policies
(and bindings) of the mutating targets it released and, with --all, the
guard policy and its binding. Circuits, entries and policies of other installations are left
alone. It prints one line per webhook and per deleted object; --dry-run
prints the same and writes nothing. With --dry-run, -o json|yaml prints
the plan for scripts, {configurations, deletions}: per configuration
whether it would be written and, per webhook, the changes or why none;
per policy or binding whether it would be deleted. -o jsonpath=TEMPLATE
runs a template on it, as kubectl's -o jsonpath does
(-o jsonpath='{.configurations[?(@.write==true)].name}'), and -o name
prints the objects it would write or delete, as kubectl's -o name does
(mutatingwebhookconfiguration.admissionregistration.k8s.io/NAME,
mutatingadmissionpolicy.admissionregistration.k8s.io/NAME).

It refuses while the installation has a leader (its leader-election Lease
has a holder and has not expired): the leader would open
the circuits again. Stop the guard first, release, then delete the rest:

  kubectl -n webhook-guard-system scale deployment webhook-guard --replicas 0
  guard release --all -n webhook-guard-system
  kustomize build ... | kubectl delete -f -

--scale-down does the first step itself and waits up to --timeout for the
Lease to say that nobody leads (the Helm chart's pre-delete hook uses it).
Every configuration is read and planned before anything is stopped: one
that cannot be released (an unreadable circuit record) fails the command
with nothing changed. If anything fails after the scale-down, the
Deployment is scaled back to its replicas, so that no circuit is left
open with nothing running; the error says so. Unreadable arming entries
are no arming, as the breaker reads them: they are removed.

Run it as an administrator, not as the service's ServiceAccount: it writes
each configuration in two JSON patches, the first with the override
annotation webhook-guard.io/override added (which the guard policy
requires of anyone but the breaker), the second removing that annotation
alone. A configuration that already carries an override is its
administrators': only the entries are removed, and the override stays.
The service's token could neither add the override nor delete a policy.`

// Options are the flags and argument of "guard release".
type Options struct {
	// Factory owns --config (default: the installed configuration),
	// -n/--namespace (where the Lease and the Deployment are),
	// --deployment and kubectl's connection flags, and builds the clients.
	*factory.Factory
	cli.IOStreams
	// All releases every target and deletes the guard policy (--all).
	// Default false: Target must be given.
	All bool
	// Target is the argument: CONFIGURATION or CONFIGURATION/WEBHOOK,
	// among the configured targets. Default empty (with All).
	Target string
	// Breaker is the service's username (--breaker), which signs its
	// entries (with the configuration's instance: startcheck.Signer).
	// Default system:serviceaccount:<namespace>:webhook-guard.
	Breaker string
	// DryRun prints what would be done and writes nothing (--dry-run).
	// Default false.
	DryRun bool
	// ScaleDown scales --deployment to 0 replicas first and waits, up to
	// Timeout, until the Lease says nobody leads (--scale-down). Default
	// false: a leader makes the command fail.
	ScaleDown bool
	// Timeout bounds the wait of ScaleDown (--timeout). Default 2m.
	Timeout time.Duration
	// Output is the format of a dry run (-o, --output): table (its
	// lines), json, yaml, name, jsonpath=TEMPLATE or
	// jsonpath-as-json=TEMPLATE (cli.AddOutputFlag); only table without
	// DryRun. Default table.
	Output string

	// report collects a dry run's plan for an Output other than table;
	// nil otherwise.
	report *dryRunReport

	// poll is how often ScaleDown reads the Lease; tests shorten it.
	poll time.Duration
}

// NewCmd returns "guard release". It only binds flags.
func NewCmd(streams cli.IOStreams, f *factory.Factory) *cobra.Command {
	o := &Options{Factory: f, IOStreams: streams, Timeout: 2 * time.Minute, poll: time.Second}
	cmd := &cobra.Command{
		Use:   "release (--all | CONFIGURATION[/WEBHOOK])",
		Short: "Hand back every webhook this installation changed, and delete its policies, before uninstalling it",
		Long:  long,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return cli.Usagef("unexpected argument %q", args[1])
			}
			if len(args) == 1 {
				o.Target = args[0]
			}
			return nil
		},
		ValidArgsFunction: f.CompleteConfigurations,
		RunE:              cli.RunE(o),
	}
	fs := cmd.Flags()
	f.AddInstallationReaderFlags(fs, factory.InstalledConfigUsage)
	fs.BoolVar(&o.All, "all", false, "Release every target, and delete the guard policy and its binding.")
	fs.StringVar(&o.Breaker, "breaker", "", "The service's username, which signs its entries; default: system:serviceaccount:<the installation's namespace, -n>:webhook-guard.")
	fs.BoolVar(&o.DryRun, "dry-run", false, "Print what would be done; write nothing.")
	fs.BoolVar(&o.ScaleDown, "scale-down", false, "Scale --deployment to 0 replicas first, and wait up to --timeout until nobody leads.")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "How long --scale-down waits for the leader to go.")
	cli.AddOutputFlag(fs, &o.Output)
	fs.Lookup("output").Usage += " Other than table only with --dry-run."
	f.RegisterCompletions(cmd)
	return cmd
}

// Validate checks the argument and flags and reads the --config file,
// before anything reaches the cluster.
func (o *Options) Validate() error {
	switch {
	case o.All && o.Target != "":
		return cli.Usagef("give --all or CONFIGURATION[/WEBHOOK], not both")
	case !o.All && o.Target == "":
		return cli.Usagef("give --all, or the CONFIGURATION[/WEBHOOK] to release")
	case o.Timeout <= 0:
		return cli.Usagef("--timeout %s: must be positive", o.Timeout)
	}
	if err := cli.ValidateOutput(o.Output); err != nil {
		return err
	}
	if o.Output != cli.OutputTable && !o.DryRun {
		return cli.Usagef("-o %s: only with --dry-run; a release prints what it does as it does it, line by line", o.Output)
	}
	if conf, hook, _ := strings.Cut(o.Target, "/"); !o.All && (conf == "" || strings.HasSuffix(o.Target, "/") && hook == "") {
		return cli.Usagef("%q: want CONFIGURATION or CONFIGURATION/WEBHOOK", o.Target)
	}
	return o.ReadConfigFile()
}

// Complete builds the clients and finds the installation, whose
// namespace names the default --breaker.
func (o *Options) Complete(ctx context.Context) error {
	if err := o.Factory.Complete(ctx); err != nil {
		return err
	}
	if o.Breaker == "" {
		o.Breaker = "system:serviceaccount:" + o.GuardNamespace + ":" + circuit.DefaultServiceAccount
	}
	return nil
}

// configuration is one webhook configuration to release, and its
// webhooks asked for.
type configuration struct {
	kind     circuit.Kind
	name     string
	webhooks []string
}

// Run releases what Validate selected. It reads and plans every
// configuration first, and fails before anything is stopped or written
// if one cannot be planned. Then it stops or checks for the leader,
// writes each configuration (plan again, now that nobody else writes),
// disarms their marking circuit.DisarmAfter later, and deletes the
// policies. A configuration that could not be written keeps the guard
// policy in place, and fails the command once everything else was tried.
// With --scale-down, anything that fails after the scale-down scales the
// Deployment back up, so that no circuit stays open with nothing running.
func (o *Options) Run(ctx context.Context) error {
	if err := o.ReadInstalledConfig(ctx); err != nil {
		return fmt.Errorf("%w; pass --config FILE to read the configuration from a file", err)
	}
	cfg := o.Config
	targets, err := o.selected(cfg)
	if err != nil {
		return err
	}
	signer := startcheck.Signer(o.Breaker, cfg.Instance)
	groups := groupByConfiguration(targets)
	if o.DryRun && o.Output != cli.OutputTable {
		o.report = &dryRunReport{Configurations: []configurationPlan{}, Deletions: []deletion{}}
	}
	var unplanned []string
	var disarmed []string
	for _, c := range groups {
		_, plan, err := o.plan(ctx, c, signer, o.DryRun)
		if err != nil {
			out := o.Out
			if o.report != nil {
				out = o.ErrOut // nothing on stdout but the report
			}
			fmt.Fprintf(out, "%s/%s: cannot be released: %v\n", c.kind.Singular(), c.name, err)
			unplanned = append(unplanned, c.kind.Singular()+"/"+c.name)
		}
		if len(plan.Disarm) > 0 {
			disarmed = append(disarmed, disarmedLine(c, plan.Disarm)+" (dry run)")
		}
	}
	if len(unplanned) > 0 {
		return fmt.Errorf("cannot be released: %s; nothing was stopped or written", strings.Join(unplanned, ", "))
	}
	if o.DryRun {
		if o.report == nil {
			for _, l := range disarmed {
				fmt.Fprintln(o.Out, l)
			}
		}
		if err := o.stopLeader(ctx, statusapi.LeaseName(cfg.Instance)); err != nil {
			return err
		}
		err := o.deleteAll(ctx, cfg, targets)
		if o.report != nil {
			// Printed also when a deletion could not be planned, as the
			// table's lines are; the error says which.
			if perr := cli.PrintObject(o.Out, o.Output, *o.report); perr != nil {
				return perr
			}
		}
		return err
	}
	replicas, err := o.replicas(ctx)
	if err != nil {
		return err
	}
	err = o.stopLeader(ctx, statusapi.LeaseName(cfg.Instance))
	if err == nil {
		err = o.releaseAll(ctx, cfg, targets, groups, signer)
	}
	if err != nil && replicas != nil {
		return o.scaleBack(ctx, *replicas, err)
	}
	return err
}

// releaseAll writes each configuration, disarms its marking
// circuit.DisarmAfter later, then deletes the policies.
func (o *Options) releaseAll(ctx context.Context, cfg *config.Configuration, targets []config.Target, groups []configuration, signer string) error {
	var failed []string
	disarm := map[int][]string{}
	for i, c := range groups {
		hooks, err := o.release(ctx, c, signer)
		if err != nil {
			fmt.Fprintf(o.Out, "%s/%s: not released: %v\n", c.kind.Singular(), c.name, err)
			failed = append(failed, c.kind.Singular()+"/"+c.name)
		}
		if len(hooks) > 0 {
			disarm[i] = hooks
		}
	}
	if len(disarm) > 0 {
		// The order of a closing: kube-apiserver's webhook dispatcher
		// sees the restoring write a moment after the marking policies
		// do, and an object it admits meanwhile without the webhook must
		// still be marked.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(circuit.DisarmAfter):
		}
	}
	for i, c := range groups {
		if hooks := disarm[i]; len(hooks) > 0 {
			if err := o.disarm(ctx, c, signer, hooks); err != nil {
				fmt.Fprintf(o.Out, "%s/%s: marking not disarmed: %v\n", c.kind.Singular(), c.name, err)
				failed = append(failed, c.kind.Singular()+"/"+c.name+" (disarming)")
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("not released: %s; nothing was deleted, the guard policy still guards them: run guard release again", strings.Join(failed, ", "))
	}
	return o.deleteAll(ctx, cfg, targets)
}

// deleteAll deletes the marking policies of the mutating targets and,
// with --all, the guard policy.
func (o *Options) deleteAll(ctx context.Context, cfg *config.Configuration, targets []config.Target) error {
	var objects []owned
	for _, t := range targets {
		if t.Kind == circuit.KindMutating {
			name := marking.Name(t.Configuration, t.Webhook)
			marks := t.Configuration + "/" + t.Webhook
			objects = append(objects,
				owned{"mutatingadmissionpolicybinding", &admissionregistrationv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}}, marks},
				owned{"mutatingadmissionpolicy", &admissionregistrationv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}, marks})
		}
	}
	if o.All {
		name := admission.Options{Instance: cfg.Instance}.Policy()
		objects = append(objects,
			owned{"validatingadmissionpolicybinding", &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}}, ""},
			owned{"validatingadmissionpolicy", &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}, ""})
	}
	var failed []string
	for _, obj := range objects {
		if err := o.delete(ctx, obj); err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	return nil
}

// selected returns the configured targets Validate selected.
func (o *Options) selected(cfg *config.Configuration) ([]config.Target, error) {
	if o.All {
		return cfg.Targets, nil
	}
	conf, hook, _ := strings.Cut(o.Target, "/")
	var out []config.Target
	for _, t := range cfg.Targets {
		if t.Configuration == conf && (hook == "" || t.Webhook == hook) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, cli.Usagef("%q is not a target of the configuration (%s)", o.Target, o.ConfigSource)
	}
	return out, nil
}

// groupByConfiguration groups targets by configuration, in their order.
func groupByConfiguration(targets []config.Target) []configuration {
	var out []configuration
	for _, t := range targets {
		found := false
		for i := range out {
			if out[i].kind == t.Kind && out[i].name == t.Configuration {
				out[i].webhooks = append(out[i].webhooks, t.Webhook)
				found = true
			}
		}
		if !found {
			out = append(out, configuration{kind: t.Kind, name: t.Configuration, webhooks: []string{t.Webhook}})
		}
	}
	return out
}

// stopLeader makes sure nobody leads: with ScaleDown it scales the
// Deployment to 0 (even without a leader now: its pods would elect one)
// and waits for the Lease to say that nobody leads; without, it refuses
// while someone leads. A dry run changes nothing and only says what it
// found.
func (o *Options) stopLeader(ctx context.Context, lease string) error {
	leaseNS := o.LeaseNamespace(ctx)
	holder, err := status.Leader(ctx, o.Client, leaseNS, lease)
	switch {
	case status.IsNoLeader(err) && (!o.ScaleDown || o.DryRun):
		return nil
	case err != nil && !status.IsNoLeader(err):
		return fmt.Errorf("finding out whether the installation has a leader, which would open the circuits again: %w", err)
	case o.DryRun:
		fmt.Fprintf(o.ErrOut, "note: %s leads (Lease %s/%s): without --dry-run, guard release would refuse until it is stopped\n", holder, leaseNS, lease)
		return nil
	case !o.ScaleDown:
		return fmt.Errorf("%s leads (Lease %s/%s) and would open the circuits again: stop the guard first (kubectl -n %s scale deployment %s --replicas 0), or pass --scale-down",
			holder, leaseNS, lease, o.GuardNamespace, o.Deployment)
	}
	scale := []byte(`{"spec":{"replicas":0}}`)
	if _, err := o.KubeClient.AppsV1().Deployments(o.GuardNamespace).Patch(ctx, o.Deployment, types.MergePatchType, scale, metav1.PatchOptions{FieldManager: FieldManager}, "scale"); err != nil {
		return fmt.Errorf("scaling Deployment %s/%s to 0: %w", o.GuardNamespace, o.Deployment, err)
	}
	fmt.Fprintf(o.Out, "deployment/%s scaled to 0\n", o.Deployment)
	deadline := time.Now().Add(o.Timeout)
	for {
		holder, err = status.Leader(ctx, o.Client, leaseNS, lease)
		if status.IsNoLeader(err) {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("%s still leads", holder)
			}
			return fmt.Errorf("waiting %s for the leader to go (Lease %s/%s): %w", o.Timeout, leaseNS, lease, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.poll):
		}
	}
}

// replicas returns the Deployment's replicas before --scale-down, to
// scale it back to if the release fails after it; nil without
// --scale-down.
func (o *Options) replicas(ctx context.Context) (*int32, error) {
	if !o.ScaleDown {
		return nil, nil
	}
	scale, err := o.KubeClient.AppsV1().Deployments(o.GuardNamespace).GetScale(ctx, o.Deployment, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the replicas of Deployment %s/%s before scaling it down: %w", o.GuardNamespace, o.Deployment, err)
	}
	return &scale.Spec.Replicas, nil
}

// scaleBack scales the Deployment back to replicas after the release
// failed with cause, so that the guard runs again: circuits left open and
// the guard policy in place need their breaker.
func (o *Options) scaleBack(ctx context.Context, replicas int32, cause error) error {
	if replicas == 0 {
		return cause
	}
	body := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	// A fresh context: ctx may be what ended the release.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := o.KubeClient.AppsV1().Deployments(o.GuardNamespace).Patch(ctx, o.Deployment, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "scale"); err != nil {
		return fmt.Errorf("%w; and scaling Deployment %s/%s back to %d replicas failed too, so nothing runs the circuits: scale it up yourself (kubectl -n %s scale deployment %s --replicas %d): %v",
			cause, o.GuardNamespace, o.Deployment, replicas, o.GuardNamespace, o.Deployment, replicas, err)
	}
	fmt.Fprintf(o.Out, "deployment/%s scaled back to %d: the release failed, and the guard runs again\n", o.Deployment, replicas)
	return fmt.Errorf("%w; Deployment %s/%s was scaled back to %d replicas, so the guard runs the circuits again", cause, o.GuardNamespace, o.Deployment, replicas)
}

// plan reads one configuration and plans its release; with print, it
// prints the plan's lines. It returns the configuration read (nil when
// there is none) and its plan.
func (o *Options) plan(ctx context.Context, c configuration, signer string, print bool) (*admissionregistrationv1.MutatingWebhookConfiguration, Plan, error) {
	obj := c.kind.New()
	if err := o.Client.Get(ctx, client.ObjectKey{Name: c.name}, obj); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, Plan{}, err
		}
		switch {
		case print && o.report != nil:
			o.report.Configurations = append(o.report.Configurations, planned(c, false, Plan{}))
		case print:
			for _, hook := range c.webhooks {
				fmt.Fprintln(o.Out, Line{Kind: c.kind, Configuration: c.name, Webhook: hook, Note: notFoundNote})
			}
		}
		return nil, Plan{}, nil
	}
	cur, err := circuit.View(obj)
	if err != nil {
		return nil, Plan{}, err
	}
	// The targets asked for, and every other webhook of this
	// installation's entries in this configuration.
	webhooks := c.webhooks
	if o.All {
		others, err := PlanRelease(c.kind, cur, signer, nil)
		if err != nil {
			return nil, Plan{}, err
		}
		for _, l := range others.Lines {
			webhooks = appendNew(webhooks, l.Webhook)
		}
	}
	plan, err := PlanRelease(c.kind, cur, signer, webhooks)
	if err != nil {
		return nil, Plan{}, err
	}
	if print && o.report != nil {
		o.report.Configurations = append(o.report.Configurations, planned(c, true, plan))
		return cur, plan, nil
	}
	if print {
		suffix := ""
		if o.DryRun {
			suffix = " (dry run)"
		}
		for _, n := range plan.Notes {
			fmt.Fprintln(o.Out, n+suffix)
		}
		for _, l := range plan.Lines {
			fmt.Fprintln(o.Out, l.String()+suffix)
		}
	}
	return cur, plan, nil
}

// release plans one configuration, prints its lines and writes it. It
// returns the webhooks whose marking a later write disarms (disarm).
func (o *Options) release(ctx context.Context, c configuration, signer string) ([]string, error) {
	cur, plan, err := o.plan(ctx, c, signer, true)
	if err != nil || plan.Next == nil {
		return nil, err
	}
	patches, err := PlanPatches(cur, plan.Next)
	if err != nil {
		return nil, err
	}
	written := c.kind.New()
	written.SetName(c.name)
	if err := o.Client.Patch(ctx, written, client.RawPatch(types.JSONPatchType, patches.Restore), client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("restoring the webhooks (the first of two patches; nothing was written): %w", err)
	}
	if patches.RemoveOverride == nil {
		return plan.Disarm, nil
	}
	if err := o.Client.Patch(ctx, written, client.RawPatch(types.JSONPatchType, patches.RemoveOverride(written.GetResourceVersion())), client.FieldOwner(FieldManager)); err != nil {
		return plan.Disarm, fmt.Errorf("removing the override annotation the first patch added (the webhooks are restored; remove it with kubectl annotate %s %s %s-): %w",
			c.kind.Singular(), c.name, circuit.OverrideAnnotation, err)
	}
	return plan.Disarm, nil
}

// disarm removes this installation's arming entries of hooks from one
// configuration, the release's later write (PlanDisarm). The arming
// entries are no owned field: the guard policy admits the write from
// anyone.
func (o *Options) disarm(ctx context.Context, c configuration, signer string, hooks []string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj := c.kind.New()
		if err := o.Client.Get(ctx, client.ObjectKey{Name: c.name}, obj); err != nil {
			return client.IgnoreNotFound(err)
		}
		cur, err := circuit.View(obj)
		if err != nil {
			return err
		}
		next, err := PlanDisarm(cur, signer, hooks)
		if err != nil || next == nil {
			return err
		}
		patch, err := circuit.Patch(cur, next)
		if err != nil {
			return err
		}
		if err := o.Client.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(FieldManager)); err != nil {
			return err
		}
		fmt.Fprintln(o.Out, disarmedLine(c, hooks))
		return nil
	})
}

// disarmedLine is the line the disarming write of c prints.
func disarmedLine(c configuration, hooks []string) string {
	return fmt.Sprintf("%s/%s: marking disarmed (%s)", c.kind.Singular(), c.name, strings.Join(hooks, ", "))
}

// owned is a cluster-scoped object the installation owns, to delete.
type owned struct {
	// kind is how kubectl names its resource, for the output.
	kind string
	// obj names the object.
	obj client.Object
	// marks, for a marking policy or binding, is the circuit it must mark
	// (circuit.MarksAnnotation) to be deleted: one of the same name that
	// marks another is not this installation's.
	marks string
}

// delete deletes o.obj if it is there (and, for a marking policy, marks
// the circuit it should), and prints what it did.
func (o *Options) delete(ctx context.Context, d owned) error {
	line := d.kind + "/" + d.obj.GetName()
	suffix := ""
	if o.DryRun {
		suffix = " (dry run)"
	}
	got := d.obj.DeepCopyObject().(client.Object)
	err := o.Client.Get(ctx, client.ObjectKeyFromObject(d.obj), got)
	if o.report != nil {
		return o.planDeletion(d, got, err)
	}
	switch {
	case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err):
		fmt.Fprintln(o.Out, line+" not found"+suffix)
		return nil
	case err != nil:
		fmt.Fprintf(o.Out, "%s not deleted: %v\n", line, err)
		return fmt.Errorf("reading %s: %w", line, err)
	case d.marks != "" && got.GetAnnotations()[circuit.MarksAnnotation] != d.marks:
		fmt.Fprintf(o.Out, "%s left alone (it marks %q, not %s)%s\n", line, got.GetAnnotations()[circuit.MarksAnnotation], d.marks, suffix)
		return nil
	case o.DryRun:
		fmt.Fprintln(o.Out, line+" deleted"+suffix)
		return nil
	}
	// The precondition: the object read is the one deleted.
	uid := got.GetUID()
	err = o.Client.Delete(ctx, got, client.Preconditions{UID: &uid})
	switch {
	case err == nil:
		fmt.Fprintln(o.Out, line+" deleted")
	case apierrors.IsNotFound(err):
		fmt.Fprintln(o.Out, line+" not found")
	default:
		fmt.Fprintf(o.Out, "%s not deleted: %v\n", line, err)
		return fmt.Errorf("deleting %s: %w", line, err)
	}
	return nil
}

// planDeletion adds to the dry run's report what delete would do to d,
// read as got with err: the same decisions as delete's lines.
func (o *Options) planDeletion(d owned, got client.Object, err error) error {
	del := deletion{Resource: d.kind, Name: d.obj.GetName(), Action: actionDelete}
	switch {
	case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err):
		del.Action = actionNotFound
	case err != nil:
		del.Action, del.Reason = actionUnread, err.Error()
		err = fmt.Errorf("reading %s/%s: %w", d.kind, d.obj.GetName(), err)
	case d.marks != "" && got.GetAnnotations()[circuit.MarksAnnotation] != d.marks:
		del.Action, del.Reason = actionLeftAlone, fmt.Sprintf("it marks %q, not %s", got.GetAnnotations()[circuit.MarksAnnotation], d.marks)
	}
	o.report.Deletions = append(o.report.Deletions, del)
	if del.Action == actionUnread {
		return err
	}
	return nil
}

func appendNew(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
