package admission

import (
	"fmt"
	"sort"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// Options configures the ownership rule, and so everything in this package
// that decides, renders or enforces it: Decide, RenderPolicy,
// RenderStaticWebhook, Handler, PolicyChecker and PolicyEnforced. The
// zero value is the default installation with no managed configuration,
// and its defaults are applied by the methods below.
type Options struct {
	// BreakerUsername is the identity allowed to change owned fields (from
	// SelfSubjectReview at runtime). Empty means circuit.DefaultUsername.
	BreakerUsername string
	// ReleaserUsername is the release identity: the ServiceAccount that
	// "guard release" runs as in the Helm chart's pre-delete hook. Its
	// UPDATEs of a managed configuration may change only what a release
	// changes (the owned fields, a managed failurePolicy only back to its
	// record's originalFailurePolicy, the record only by removing entries,
	// the arming annotation and the override annotation), and it may
	// create none. Empty means circuit.ReleaseUsername of the breaker:
	// the ServiceAccount <breaker's name>-release in the breaker's
	// namespace, which is how the chart names the hook's ServiceAccount
	// beside the breaker's.
	// Equal to the breaker's username, it is ignored: the breaker is the
	// breaker.
	ReleaserUsername string
	// Managed maps MutatingWebhookConfiguration name -> managed webhook
	// names in it. A configuration is managed when its name is a key, even
	// with an empty list: its bypass markers and circuit annotation are then
	// still owned. config.Configuration.Managed builds it, without the
	// targets in Observe mode, whose fields nobody but their owners change.
	Managed map[string][]string
	// ManagedValidating is Managed for ValidatingWebhookConfigurations.
	// With neither, no configuration is managed, and the rule matches none.
	ManagedValidating map[string][]string
	// Instance names one of several installations in a cluster (config
	// instance); empty is the default installation. It names the policy.
	Instance string
}

// Policy returns the name of the instance's ValidatingAdmissionPolicy and
// binding: PolicyName, or PolicyName-<instance>.
func (o Options) Policy() string {
	if o.Instance == "" {
		return PolicyName
	}
	return PolicyName + "-" + o.Instance
}

// managed returns the managed configurations of kind.
func (o Options) managed(kind circuit.Kind) map[string][]string {
	if kind == circuit.KindValidating {
		return o.ManagedValidating
	}
	return o.Managed
}

// Breaker returns the effective breaker username: BreakerUsername, or
// circuit.DefaultUsername when it is empty.
func (o Options) Breaker() string {
	if o.BreakerUsername == "" {
		return circuit.DefaultUsername
	}
	return o.BreakerUsername
}

// Releaser returns the effective release identity's username:
// ReleaserUsername, or circuit.ReleaseUsername(Breaker()) when it is
// empty.
func (o Options) Releaser() string {
	if o.ReleaserUsername == "" {
		return circuit.ReleaseUsername(o.Breaker())
	}
	return o.ReleaserUsername
}

// ConfigNames returns the names of kind's managed configurations, sorted.
func (o Options) ConfigNames(kind circuit.Kind) []string {
	names := make([]string, 0, len(o.managed(kind)))
	for name := range o.managed(kind) {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// summary counts the managed configurations for Events and logs; an
// Event names no list that grows with the configuration.
func (o Options) summary() string {
	return fmt.Sprintf("managed configurations: %d mutating, %d validating", len(o.Managed), len(o.ManagedValidating))
}

// managedWebhooks returns configuration's managed webhook names, sorted
// and without repeats: the order in which both renderings list notes.
func (o Options) managedWebhooks(kind circuit.Kind, configuration string) []string {
	sorted := append([]string(nil), o.managed(kind)[configuration]...)
	sort.Strings(sorted)
	out := sorted[:0]
	for i, v := range sorted {
		if i == 0 || sorted[i-1] != v {
			out = append(out, v)
		}
	}
	return out
}
