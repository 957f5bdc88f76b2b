package unmutated

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/webhook-guard/webhook-guard/internal/cli"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

// report is what "guard unmutated" found; -o json|yaml|jsonpath prints it,
// and -o name its ObjectNames.
type report struct {
	// Objects are the objects carrying a mark, sorted by group, kind,
	// namespace and name; empty, not null, when there are none.
	Objects []objectRow `json:"objects"`
	// Cleared is true once --clear removed the marks of every object.
	Cleared bool `json:"cleared"`
	// Unavailable names what could not be read, and why: marks there are
	// not listed.
	Unavailable []string `json:"unavailable,omitempty"`
}

var _ cli.Named = report{}

// ObjectNames are the marked objects, in the report's order, as kubectl's
// -o name prints them (without the namespace).
func (r report) ObjectNames() []string {
	names := make([]string, 0, len(r.Objects))
	for _, o := range r.Objects {
		names = append(names, cli.ObjectName(schema.GroupKind{Group: o.Group, Kind: o.Kind}, o.Name))
	}
	return names
}

// objectRow is one marked object.
type objectRow struct {
	Group     string `json:"group"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// CircuitID is the mark (the label's value): the marking.ID of the
	// circuit whose marking policy marked it.
	CircuitID string `json:"circuitID"`
	// Configuration and Webhook are that circuit's target.
	Configuration string `json:"configuration"`
	Webhook       string `json:"webhook"`
	// Note is the annotation: "<configuration>/<webhook> since <openedAt>".
	Note string `json:"note"`
	// Owner is the top of its controller chain, the object itself when
	// nothing controls it.
	Owner ownerRow `json:"owner"`
}

// ownerRow names an object's top owner.
type ownerRow struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// newReport is res as -o json|yaml|name|jsonpath prints it, with the
// target of each mark from cfg.
func newReport(res found, cfg *config.Configuration) report {
	targets := map[string]config.Target{}
	for _, t := range cfg.Targets {
		targets[marking.ID(t.Configuration, t.Webhook)] = t
	}
	rep := report{Objects: make([]objectRow, 0, len(res.objects)), Unavailable: res.unavailable}
	for _, o := range res.objects {
		t := targets[o.id]
		rep.Objects = append(rep.Objects, objectRow{
			Group: o.gvk.Group, Version: o.gvk.Version, Kind: o.gvk.Kind, Namespace: o.namespace, Name: o.name,
			CircuitID: o.id, Configuration: t.Configuration, Webhook: t.Webhook, Note: o.note,
			Owner: ownerRow{Kind: o.ownerKind, Namespace: o.ownerNamespace, Name: o.ownerName},
		})
	}
	return rep
}

// printUnmutated prints objs grouped by owner, each group with the
// command that repairs it.
func printUnmutated(w io.Writer, objs []markedObject) {
	groups := map[string][]markedObject{}
	for _, o := range objs {
		key := o.ownerKind + " " + objectName(o.ownerNamespace, o.ownerName)
		if o.ownerKind == o.gvk.Kind && o.ownerName == o.name && !ownerRepairable(o.gvk.Kind) {
			// Objects nobody controls are repaired one by one, with one hint.
			key = o.gvk.Kind + " objects without a controller"
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
		sort.Slice(g, func(i, j int) bool { return g[i].gvk.Kind+g[i].name < g[j].gvk.Kind+g[j].name })
		for _, o := range g {
			fmt.Fprintf(w, "  %s %s  skipped %s\n", o.gvk.Kind, objectName(o.namespace, o.name), o.note)
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
