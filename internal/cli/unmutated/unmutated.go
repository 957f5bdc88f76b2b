// Package unmutated is "guard unmutated": it lists the objects a mutating
// target's marking policy marked while its circuit was open (admitted
// without the webhook's mutation), grouped by the workload that owns them,
// with the command that repairs each, and with --clear removes the marks.
// It refuses to clear while a circuit is open. It looks for marks
// wherever the webhook's rules let its marking policy leave one, matched
// as kube-apiserver matches them (internal/rulematch).
package unmutated

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// ExitMarked is the exit status of --exit-code when objects carry a
// mark. 1 is a failure and 2 a mistake on the command line, so a script
// cannot take either for a finding.
const ExitMarked = 3

const long = `Lists the objects marked while a mutating target's circuit was open, grouped
by the workload that owns them, with the command that repairs each;
--clear removes the marks once repaired, and is refused while a circuit is
open. It runs as the administrator: listing every kind a webhook matches
is not part of the service's RBAC.

It looks wherever a target's marking policy can leave a mark: in every
served resource where a CREATE or UPDATE of the object, or of one of its
subresources, matches the webhook's rules as kube-apiserver matches them
(groups; resources such as "*", "*/*", "pods/*" or "*/status"; scope
Namespaced, Cluster or "*"; any version, unless the webhook's matchPolicy
is Exact). A resource it cannot discover or list is named on stderr, the
rest is printed, and the command then fails: a list with a hole in it is
not "nothing is marked".

-o json|yaml prints, for scripts, {objects, cleared, unavailable}: for each
object its group, version, kind, namespace, name, circuitID (the value of
the label webhook-guard.io/unmutated), configuration and webhook, note (the
annotation webhook-guard.io/unmutated-by) and owner (the top of its
controller chain); cleared is true once --clear removed their marks.
-o jsonpath=TEMPLATE runs a template on it, as kubectl's -o jsonpath does
(-o jsonpath='{range .objects[*]}{.namespace}/{.name}{"\n"}{end}'), and
-o name prints one line per marked object as kubectl's -o name does, kind
and group without the namespace (pod/web-1-a, deployment.apps/web).

With --exit-code, the exit status says what it found: 0 when no object
carries a mark (with --clear: once their marks are removed), 3 when some
do. It is a flag, as with "guard status --exit-code", so that a listing
that found something is still a success for people and for scripts that
only check that it ran. 3 because 1 means the command failed (a resource
could not be read, a --clear was refused) and 2 a mistake on the command
line, which prints nothing on stdout.`

// Options are the flags of "guard unmutated".
type Options struct {
	// Factory owns --config (default: the installed configuration),
	// -n/--namespace, --deployment and kubectl's connection flags, and builds
	// the clients.
	*factory.Factory
	cli.IOStreams
	// Clear removes the mark from every listed object, once they are
	// repaired (--clear). Default false: list only.
	Clear bool
	// Output is the format (-o, --output): table, json, yaml, name,
	// jsonpath=TEMPLATE or jsonpath-as-json=TEMPLATE (cli.AddOutputFlag).
	// Default table.
	Output string
	// ExitCode makes the exit status ExitMarked when objects carry a mark
	// after the command (--exit-code). Default false: 0 whenever the
	// command ran.
	ExitCode bool

	// metadata lists and reads any kind; discovery and mapper say which
	// resources are served, from one cached discovery read. Complete
	// builds them.
	metadata  metadata.Interface
	discovery discovery.CachedDiscoveryInterfaceWithContext
	mapper    meta.RESTMapperWithContext
}

// NewCmd returns "guard unmutated". It only binds flags.
func NewCmd(streams cli.IOStreams, f *factory.Factory) *cobra.Command {
	o := &Options{Factory: f, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "unmutated [--clear] [-o json|yaml|name|jsonpath=TEMPLATE] [--exit-code]",
		Short: "List the objects admitted without a webhook's mutation while its circuit was open",
		Long:  long,
		Args:  cli.NoArgs,
		RunE:  cli.RunE(o),
	}
	fs := cmd.Flags()
	f.AddInstallationReaderFlags(fs, factory.InstalledConfigUsage)
	fs.BoolVar(&o.Clear, "clear", false, "Remove the mark from every listed object (after repairing them).")
	cli.AddOutputFlag(fs, &o.Output)
	fs.BoolVar(&o.ExitCode, "exit-code", false, "Exit 3 when objects carry a mark (see above).")
	f.RegisterCompletions(cmd)
	return cmd
}

// Validate checks the flags and reads the --config file, before anything
// reaches the cluster.
func (o *Options) Validate() error {
	if err := cli.ValidateOutput(o.Output); err != nil {
		return err
	}
	return o.ReadConfigFile()
}

// Complete builds the clients: a metadata client, and a discovery client
// that reads discovery once, with a REST mapper on it.
func (o *Options) Complete(ctx context.Context) error {
	if err := o.Factory.Complete(ctx); err != nil {
		return err
	}
	// Listing every kind a */* webhook matches lists deprecated ones
	// (v1 ComponentStatus, v1 Endpoints) too: their deprecation warnings
	// would only be noise.
	rc := rest.CopyConfig(o.RESTConfig)
	rc.WarningHandlerWithContext = rest.NoWarnings{}
	mc, err := metadata.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("creating a metadata client: %w", err)
	}
	o.metadata = mc
	o.discovery = memory.NewMemCacheClientWithContext(discovery.ToDiscoveryInterfaceWithContext(o.KubeClient.Discovery()))
	o.mapper = restmapper.NewDeferredDiscoveryRESTMapperWithContext(o.discovery)
	return nil
}

// Run lists the marked objects and, with Clear, removes their marks.
func (o *Options) Run(ctx context.Context) error {
	if err := o.ReadInstalledConfig(ctx); err != nil {
		return fmt.Errorf("%w; pass --config FILE to read the configuration from a file", err)
	}
	cfg := o.Config
	if o.Clear {
		if err := refuseClearWhileOpen(ctx, o.Client, cfg); err != nil {
			return err
		}
	}
	f := &finder{c: o.Client, mc: o.metadata, dc: o.discovery, mapper: o.mapper}
	res, err := f.find(ctx, cfg)
	if err != nil {
		return err
	}
	for _, u := range res.unavailable {
		fmt.Fprintf(o.ErrOut, "guard unmutated: not listed: %s\n", u)
	}
	if o.Output == cli.OutputTable {
		err = o.writeTable(ctx, res)
	} else {
		err = o.writeReport(ctx, cfg, res)
	}
	return exitStatus(err, res, o.Clear, o.ExitCode)
}

// exitStatus is Run's result once it has printed res: err, else a failure
// when something could not be read, else with exitCode ExitMarked when
// objects still carry a mark.
func exitStatus(err error, res found, cleared, exitCode bool) error {
	switch {
	case err != nil:
		return err
	case len(res.unavailable) > 0:
		return fmt.Errorf("%d resources or configurations could not be read (named above): objects marked there are not listed", len(res.unavailable))
	case exitCode && !cleared && len(res.objects) > 0:
		return cli.ExitError{Code: ExitMarked, Err: fmt.Errorf("%d objects carry the mark %s", len(res.objects), circuit.UnmutatedLabel)}
	}
	return nil
}

// writeTable prints res for people, then with Clear removes the marks.
func (o *Options) writeTable(ctx context.Context, res found) error {
	stdout := o.Out
	if len(res.objects) == 0 {
		if len(res.unavailable) > 0 {
			fmt.Fprintln(stdout, "No object carries the mark "+circuit.UnmutatedLabel+" in the resources that could be read.")
			return nil
		}
		fmt.Fprintln(stdout, "No object carries the mark "+circuit.UnmutatedLabel+": nothing was admitted without a mutation, or it was repaired and cleared.")
		return nil
	}
	printUnmutated(stdout, res.objects)
	if !o.Clear {
		fmt.Fprintf(stdout, "\nAfter repairing them, remove the marks with: guard unmutated --clear\n")
		return nil
	}
	if err := clearMarks(ctx, o.metadata, res.objects); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nCleared the marks of %d objects.\n", len(res.objects))
	return nil
}

// writeReport removes the marks with Clear, then prints res in the
// format -o names.
func (o *Options) writeReport(ctx context.Context, cfg *config.Configuration, res found) error {
	rep := newReport(res, cfg)
	if o.Clear {
		if err := clearMarks(ctx, o.metadata, res.objects); err != nil {
			return err
		}
		rep.Cleared = true
	}
	return cli.PrintObject(o.Out, o.Output, rep)
}

// clearMarks removes the unmutated label and annotation from objs.
func clearMarks(ctx context.Context, mc metadata.Interface, objs []markedObject) error {
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null},"annotations":{%q:null}}}`, circuit.UnmutatedLabel, circuit.UnmutatedAnnotation))
	for _, obj := range objs {
		res := mc.Resource(obj.gvr)
		var err error
		if obj.namespace != "" {
			_, err = res.Namespace(obj.namespace).Patch(ctx, obj.name, types.MergePatchType, patch, metav1.PatchOptions{})
		} else {
			_, err = res.Patch(ctx, obj.name, types.MergePatchType, patch, metav1.PatchOptions{})
		}
		if err != nil {
			return fmt.Errorf("clearing the mark of %s %s: %w", obj.gvk.Kind, objectName(obj.namespace, obj.name), err)
		}
	}
	return nil
}

// refuseClearWhileOpen refuses "guard unmutated --clear" while a mutating
// target's circuit is open, or its record cannot be read: its marking
// policy then marks every object it admits again, the clearing patch
// included, so the marks would come back at once, and objects admitted
// after the clear would be marked as well. A mark is a hint, not a
// ledger: clearing is for after the close and the repair.
func refuseClearWhileOpen(ctx context.Context, c client.Reader, cfg *config.Configuration) error {
	var open []string
	for _, t := range cfg.Targets {
		if t.Kind != circuit.KindMutating {
			continue
		}
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: t.Configuration}, mwc); err != nil {
			if apierrors.IsNotFound(err) {
				continue // no configuration, no circuit, no marking
			}
			return fmt.Errorf("--clear: reading %s %s to see whether its circuit is open: %w; nothing was changed", t.Kind.Singular(), t.Configuration, err)
		}
		rec, err := circuit.Decode(mwc.Annotations)
		if err != nil {
			open = append(open, fmt.Sprintf("%s %s (its circuit record cannot be read: %v)", t.Kind.Singular(), t.Configuration, err))
			continue
		}
		if e, ok := rec[t.Webhook]; ok {
			open = append(open, fmt.Sprintf("%s %s webhook %s (open since %s)", t.Kind.Singular(), t.Configuration, t.Webhook, e.OpenedAt.UTC().Format(time.RFC3339)))
		}
	}
	if len(open) == 0 {
		return nil
	}
	return fmt.Errorf("--clear refused, nothing was changed: a circuit is open on %s. While it is open its marking policy marks every object it admits, "+
		"a cleared one included, so the marks would come back at once. Wait until it closes (guard status shows it), repair the objects, then clear",
		strings.Join(open, "; "))
}

// errNoMutatingTarget: nothing to look for.
var errNoMutatingTarget = errors.New("the configuration has no mutating target")
