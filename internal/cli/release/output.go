package release

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/webhook-guard/webhook-guard/internal/cli"
)

// dryRunReport is what "guard release --dry-run" would do, for -o
// json|yaml|jsonpath; -o name prints its ObjectNames. The table is the
// lines a release prints.
type dryRunReport struct {
	// Configurations are the webhook configurations planned, in the
	// targets' order.
	Configurations []configurationPlan `json:"configurations"`
	// Deletions are the marking policies and bindings of the mutating
	// targets released and, with --all, the guard policy and its binding,
	// and what would become of each.
	Deletions []deletion `json:"deletions"`
}

// configurationPlan is what releasing one webhook configuration would do.
type configurationPlan struct {
	// Kind is Mutating or Validating; Name the configuration's.
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Found is false when there is no such configuration.
	Found bool `json:"found"`
	// Write is true when the release would write it: something of this
	// installation's is handed back.
	Write bool `json:"write"`
	// Webhooks are one per webhook: what is handed back, or why nothing.
	Webhooks []webhookPlan `json:"webhooks"`
	// Notes are what the release does to the configuration as a whole.
	Notes []string `json:"notes,omitempty"`
	// DisarmLater are the webhooks whose arming entries a later write
	// removes, circuit.DisarmAfter after the first.
	DisarmLater []string `json:"disarmLater,omitempty"`
}

// webhookPlan is a Line, for scripts.
type webhookPlan struct {
	Webhook string `json:"webhook"`
	// Changes are what is handed back, in order; empty when nothing is.
	Changes []string `json:"changes,omitempty"`
	// Note says why nothing, or not everything, is handed back.
	Note string `json:"note,omitempty"`
}

// The actions of a deletion.
const (
	actionDelete    = "delete"
	actionNotFound  = "not found"
	actionLeftAlone = "left alone"
	actionUnread    = "unreadable"
)

// deletion is what would become of one object the installation owns.
type deletion struct {
	// Resource is the object's resource, as kubectl names it
	// (mutatingadmissionpolicy); Name its name.
	Resource string `json:"resource"`
	Name     string `json:"name"`
	// Action is delete, not found, left alone (it marks another circuit)
	// or unreadable.
	Action string `json:"action"`
	// Reason says why it is left alone or unreadable.
	Reason string `json:"reason,omitempty"`
}

var _ cli.Named = dryRunReport{}

// ObjectNames are the objects the release would change: the webhook
// configurations it would write, then the objects it would delete, as
// kubectl's -o name prints them (kubectl delete --dry-run -o name prints
// the same kind of line).
func (r dryRunReport) ObjectNames() []string {
	var names []string
	for _, c := range r.Configurations {
		if c.Write {
			names = append(names, cli.ObjectName(admissionregistrationv1.SchemeGroupVersion.WithKind(c.Kind+"WebhookConfiguration").GroupKind(), c.Name))
		}
	}
	for _, d := range r.Deletions {
		if d.Action == actionDelete {
			// The resource's singular is its kind in lower case.
			names = append(names, cli.ObjectName(schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: d.Resource}, d.Name))
		}
	}
	return names
}

// planned is c's plan as the report shows it; found is false when there
// is no such configuration.
func planned(c configuration, found bool, plan Plan) configurationPlan {
	cp := configurationPlan{Kind: string(c.kind), Name: c.name, Found: found, Write: plan.Next != nil, Notes: plan.Notes, DisarmLater: plan.Disarm,
		Webhooks: []webhookPlan{}}
	if !found {
		for _, hook := range c.webhooks {
			cp.Webhooks = append(cp.Webhooks, webhookPlan{Webhook: hook, Note: notFoundNote})
		}
		return cp
	}
	for _, l := range plan.Lines {
		cp.Webhooks = append(cp.Webhooks, webhookPlan{Webhook: l.Webhook, Changes: l.Changes, Note: l.Note})
	}
	return cp
}
