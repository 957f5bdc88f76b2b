// Package unmutated is "guard unmutated": it lists the objects a mutating
// target's marking policy marked while its circuit was open (admitted
// without the webhook's mutation), grouped by the workload that owns them,
// with the command that repairs each, and with --clear removes the marks.
// It refuses to clear while a circuit is open.
package unmutated

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

// markedObject is one object carrying the unmutated mark.
type markedObject struct {
	gvr       schema.GroupVersionResource
	kind      string
	namespace string
	name      string
	note      string
	// owner is the top of its controller chain ("Deployment team/web"),
	// or the object itself.
	ownerKind, ownerNamespace, ownerName string
}

// Options are the flags of "guard unmutated".
type Options struct {
	// Factory owns --config (default: the installed configuration),
	// -n/--namespace, --deployment, --kubeconfig and --context, and builds
	// the clients.
	*factory.Factory
	cli.IOStreams
	// Clear removes the mark from every listed object, once they are
	// repaired (--clear). Default false: list only.
	Clear bool

	// metadata and discovery list any kind the targets' webhooks match;
	// Complete builds them.
	metadata  metadata.Interface
	discovery discovery.DiscoveryInterface
}

// NewCmd returns "guard unmutated". It only binds flags.
func NewCmd(streams cli.IOStreams, f *factory.Factory) *cobra.Command {
	o := &Options{Factory: f, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "unmutated [--clear]",
		Short: "List the objects admitted without a webhook's mutation while its circuit was open",
		Long: `Lists the objects marked while a mutating target's circuit was open, grouped
by the workload that owns them, with the command that repairs each;
--clear removes the marks once repaired, and is refused while a circuit is
open. It runs as the administrator: listing every kind a webhook matches
is not part of the service's RBAC.`,
		Args: cli.NoArgs,
		RunE: cli.RunE(o),
	}
	fs := cmd.Flags()
	f.AddInstallationReaderFlags(fs, factory.InstalledConfigUsage)
	fs.BoolVar(&o.Clear, "clear", false, "Remove the mark from every listed object (after repairing them).")
	return cmd
}

// Validate reads the --config file, before anything reaches the cluster.
func (o *Options) Validate() error {
	return o.ReadConfigFile()
}

// Complete builds the clients.
func (o *Options) Complete() error {
	if err := o.Factory.Complete(); err != nil {
		return err
	}
	mc, err := metadata.NewForConfig(o.RESTConfig)
	if err != nil {
		return fmt.Errorf("creating a metadata client: %w", err)
	}
	o.metadata, o.discovery = mc, o.KubeClient.Discovery()
	return nil
}

// Run lists the marked objects and, with Clear, removes their marks.
func (o *Options) Run(ctx context.Context) error {
	if err := o.ReadInstalledConfig(ctx); err != nil {
		return fmt.Errorf("%w; pass --config FILE to read the configuration from a file", err)
	}
	c, mc, cfg := o.Client, o.metadata, o.Config
	if o.Clear {
		if err := refuseClearWhileOpen(ctx, c, cfg); err != nil {
			return err
		}
	}
	objs, err := listUnmutated(ctx, c, mc, o.discovery, cfg)
	if err != nil {
		return err
	}
	stdout := o.Out
	if len(objs) == 0 {
		fmt.Fprintln(stdout, "No object carries the mark "+circuit.UnmutatedLabel+": nothing was admitted without a mutation, or it was repaired and cleared.")
		return nil
	}
	printUnmutated(stdout, objs)
	if !o.Clear {
		fmt.Fprintf(stdout, "\nAfter repairing them, remove the marks with: guard unmutated --clear\n")
		return nil
	}
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
			return fmt.Errorf("clearing the mark of %s %s: %w", obj.kind, objectName(obj.namespace, obj.name), err)
		}
	}
	fmt.Fprintf(stdout, "\nCleared the marks of %d objects.\n", len(objs))
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

// listUnmutated lists, for every resource the mutating targets' webhooks
// match (found by discovery), the objects carrying one of their marks.
func listUnmutated(ctx context.Context, c client.Reader, mc metadata.Interface, dc discovery.DiscoveryInterface, cfg *config.Configuration) ([]markedObject, error) {
	var ids []string
	var rules []admissionregistrationv1.RuleWithOperations
	for _, t := range cfg.Targets {
		if t.Kind != circuit.KindMutating {
			continue
		}
		ids = append(ids, marking.ID(t.Configuration, t.Webhook))
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := c.Get(ctx, client.ObjectKey{Name: t.Configuration}, mwc); err != nil {
			continue // a configuration that is gone matches nothing now
		}
		for _, wh := range mwc.Webhooks {
			if wh.Name == t.Webhook {
				rules = append(rules, wh.Rules...)
			}
		}
	}
	if len(ids) == 0 {
		return nil, errors.New("the configuration has no mutating target")
	}
	req, err := labels.NewRequirement(circuit.UnmutatedLabel, selection.In, ids)
	if err != nil {
		return nil, err
	}
	selector := labels.NewSelector().Add(*req).String()
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("discovering the served resources: %w", err)
	}
	var out []markedObject
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !matchesAny(rules, gv, r.Name) {
				continue
			}
			gvr := gv.WithResource(r.Name)
			items, err := mc.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", gvr, err)
			}
			for _, it := range items.Items {
				u := markedObject{gvr: gvr, kind: r.Kind, namespace: it.Namespace, name: it.Name, note: it.Annotations[circuit.UnmutatedAnnotation]}
				u.ownerKind, u.ownerNamespace, u.ownerName = topOwner(ctx, mc, dc, r.Kind, it.Namespace, it.Name, it.OwnerReferences)
				out = append(out, u)
			}
		}
	}
	return out, nil
}

// matchesAny reports whether a webhook rule matches resource in gv.
func matchesAny(rules []admissionregistrationv1.RuleWithOperations, gv schema.GroupVersion, resource string) bool {
	in := func(list []string, v string) bool { return slices.Contains(list, "*") || slices.Contains(list, v) }
	for _, r := range rules {
		if in(r.APIGroups, gv.Group) && in(r.APIVersions, gv.Version) && in(r.Resources, resource) {
			return true
		}
	}
	return false
}

// maxOwnerDepth bounds how many controller references topOwner follows:
// Pod → ReplicaSet → Deployment is two; five leaves room for operators
// that own Deployments, and stops at a reference cycle.
const maxOwnerDepth = 5

// topOwner follows controller owner references (Pod → ReplicaSet →
// Deployment) to the top, within the object's namespace.
func topOwner(ctx context.Context, mc metadata.Interface, dc discovery.DiscoveryInterface, kind, namespace, name string, refs []metav1.OwnerReference) (string, string, string) {
	for range maxOwnerDepth {
		var ctrl *metav1.OwnerReference
		for i := range refs {
			if refs[i].Controller != nil && *refs[i].Controller {
				ctrl = &refs[i]
			}
		}
		if ctrl == nil {
			break
		}
		gvr, ok := resourceFor(dc, ctrl.APIVersion, ctrl.Kind)
		if !ok {
			break
		}
		owner, err := mc.Resource(gvr).Namespace(namespace).Get(ctx, ctrl.Name, metav1.GetOptions{})
		if err != nil {
			kind, name = ctrl.Kind, ctrl.Name // gone, or not readable: the reference still names it
			break
		}
		kind, name, refs = ctrl.Kind, owner.Name, owner.OwnerReferences
	}
	return kind, namespace, name
}

// resourceFor finds the resource of apiVersion and kind by discovery.
func resourceFor(dc discovery.DiscoveryInterface, apiVersion, kind string) (schema.GroupVersionResource, bool) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionResource{}, false
	}
	list, err := dc.ServerResourcesForGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionResource{}, false
	}
	for _, r := range list.APIResources {
		if r.Kind == kind && !strings.Contains(r.Name, "/") {
			return gv.WithResource(r.Name), true
		}
	}
	return schema.GroupVersionResource{}, false
}

// printUnmutated prints objs grouped by owner, each group with the
// command that repairs it.
func printUnmutated(w io.Writer, objs []markedObject) {
	groups := map[string][]markedObject{}
	for _, o := range objs {
		key := o.ownerKind + " " + objectName(o.ownerNamespace, o.ownerName)
		if o.ownerKind == o.kind && o.ownerName == o.name && !ownerRepairable(o.kind) {
			// Objects nobody controls are repaired one by one, with one hint.
			key = o.kind + " objects without a controller"
			if o.namespace != "" {
				key += " in " + o.namespace
			}
		}
		groups[key] = append(groups[key], o)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "%d objects were admitted without a webhook's mutation while its circuit was open:\n", len(objs))
	for _, k := range keys {
		g := groups[k]
		fmt.Fprintf(w, "\n%s\n  repair: %s\n", k, repairHint(g[0].ownerKind, g[0].ownerNamespace, g[0].ownerName))
		sort.Slice(g, func(i, j int) bool { return g[i].kind+g[i].name < g[j].kind+g[j].name })
		for _, o := range g {
			fmt.Fprintf(w, "  %s %s  skipped %s\n", o.kind, objectName(o.namespace, o.name), o.note)
		}
	}
}

// ownerRepairable reports whether kind's repair is one command for the
// whole group (a rollout restart).
func ownerRepairable(kind string) bool {
	return kind == "Deployment" || kind == "StatefulSet" || kind == "DaemonSet"
}

func repairHint(kind, namespace, name string) string {
	ns := ""
	if namespace != "" {
		ns = " -n " + namespace
	}
	switch kind {
	case "Deployment", "StatefulSet", "DaemonSet":
		return fmt.Sprintf("kubectl rollout restart %s/%s%s", strings.ToLower(kind), name, ns)
	case "Pod":
		return fmt.Sprintf("delete the pod so it is re-created through the webhook: kubectl delete pod %s%s", name, ns)
	}
	return "re-apply it (kubectl apply -f <its manifest>) so that the webhook mutates it, if the webhook handles UPDATE; otherwise delete and re-create it"
}

func objectName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}
