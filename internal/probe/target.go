package probe

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/discovery"

	"github.com/webhook-guard/webhook-guard/internal/rulematch"
)

// Discovery lists the resources kube-apiserver serves: a client-go
// discovery client (DiscoveryInterface has this method).
type Discovery interface {
	ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error)
}

// probeTarget is the group/version/resource and object identity a probe
// pretends to CREATE.
type probeTarget struct {
	gvr       metav1.GroupVersionResource
	kind      string
	namespace string // empty for cluster-scoped objects
}

// RulesProbeable returns why no request an AdmissionReview probe can send
// (a CREATE of a resource, not of a subresource) matches any of rules, or
// nil. It needs no cluster: it reads the rules' shape only. A webhook whose
// rules only match subresources, or only other operations, cannot be
// probed with an AdmissionReview; it needs an HTTPGet probe.
func RulesProbeable(rules []admissionregistrationv1.RuleWithOperations) error {
	if len(rules) == 0 {
		return errors.New("it has no rules, so kube-apiserver never calls it")
	}
	for _, r := range rules {
		if ruleCreates(r) && len(mainResources(r.Resources)) > 0 {
			return nil
		}
	}
	descs := make([]string, 0, len(rules))
	for i, r := range rules {
		descs = append(descs, fmt.Sprintf("rules[%d] (operations %v, resources %v)", i, r.Operations, r.Resources))
	}
	return fmt.Errorf("no rule matches a CREATE of a resource, the only request an AdmissionReview probe sends: %s", strings.Join(descs, ", "))
}

// ruleCreates reports whether r matches CREATE.
func ruleCreates(r admissionregistrationv1.RuleWithOperations) bool {
	return slices.ContainsFunc(r.Operations, func(op admissionregistrationv1.OperationType) bool {
		return op == admissionregistrationv1.OperationAll || op == admissionregistrationv1.Create
	})
}

// mainResources returns the entries of a rule's resources that match a
// resource itself rather than only its subresources, as kube-apiserver's
// rules.Matcher matches them (internal/rulematch): plain names, and any
// "<name>/*", whose "*" matches the empty subresource too ("*", "*/*",
// "pods/*"); "*/status" matches subresources only.
func mainResources(resources []string) []string {
	var out []string
	for _, r := range resources {
		name, sub, hasSub := strings.Cut(r, "/")
		if !hasSub || sub == "*" {
			out = append(out, name)
		}
	}
	return out
}

// catalog caches what discovery says kube-apiserver serves. It is read
// for every probe and refreshed when stale, or sooner when a rule finds
// nothing (a CRD may just have been installed). Once it knows anything,
// a refresh runs in the background and probes go on with what it knew:
// on the bad day discovery waits in the same saturated apiserver as
// everything else, and a probe's verdict must not wait with it.
type catalog struct {
	mu         sync.Mutex
	groups     []servedGroup
	fetched    time.Time
	err        error
	refreshing bool
}

// catalogTTL is how long discovery's answer is used; a CRD that is added,
// removed or changes scope is seen within it.
const catalogTTL = 5 * time.Minute

// catalogRetry is the shortest time between two discovery reads.
const catalogRetry = 10 * time.Second

type servedGroup struct {
	name      string
	preferred string
	versions  []string                        // discovery order
	resources map[string][]metav1.APIResource // by version; creatable resources only, sorted by name
}

func (c *catalog) get(d Discovery, miss bool) ([]servedGroup, error) {
	c.mu.Lock()
	age := time.Since(c.fetched)
	// A failed read with nothing known is a miss for every rule: it is
	// read again after catalogRetry, not catalogTTL.
	miss = miss || c.err != nil
	if !c.fetched.IsZero() && age < catalogTTL && (!miss || age < catalogRetry) {
		defer c.mu.Unlock()
		return c.groups, c.err
	}
	if c.groups != nil {
		// Known: refresh beside the probes, which use what is known.
		if !c.refreshing {
			c.refreshing = true
			go c.refresh(d)
		}
		defer c.mu.Unlock()
		return c.groups, nil
	}
	c.mu.Unlock()
	// Nothing known yet (the first probes): nothing to go on with.
	c.refresh(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups, c.err
}

// refresh reads discovery once and keeps its answer. A failed read keeps
// what was known, and is an error only when nothing is.
func (c *catalog) refresh(d Discovery) {
	groups, lists, err := d.ServerGroupsAndResources()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = false
	c.fetched = time.Now()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		if c.groups == nil {
			c.err = fmt.Errorf("listing the resources kube-apiserver serves: %w", err)
		}
		return
	}
	c.groups, c.err = index(groups, lists), nil
}

// index turns discovery's answer into servedGroups, keeping only the
// resources a CREATE can be sent for.
func index(groups []*metav1.APIGroup, lists []*metav1.APIResourceList) []servedGroup {
	byName := map[string]*servedGroup{}
	var out []*servedGroup
	for _, g := range groups {
		sg := &servedGroup{name: g.Name, preferred: g.PreferredVersion.Version, resources: map[string][]metav1.APIResource{}}
		for _, v := range g.Versions {
			sg.versions = append(sg.versions, v.Version)
		}
		byName[g.Name] = sg
		out = append(out, sg)
	}
	for _, l := range lists {
		if l == nil {
			continue
		}
		gv, err := parseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		sg := byName[gv.Group]
		if sg == nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "create") {
				continue
			}
			sg.resources[gv.Version] = append(sg.resources[gv.Version], r)
		}
		slices.SortFunc(sg.resources[gv.Version], func(a, b metav1.APIResource) int { return strings.Compare(a.Name, b.Name) })
	}
	res := make([]servedGroup, 0, len(out))
	for _, g := range out {
		res = append(res, *g)
	}
	return res
}

func parseGroupVersion(s string) (metav1.GroupVersion, error) {
	if s == "v1" {
		return metav1.GroupVersion{Version: "v1"}, nil
	}
	group, version, ok := strings.Cut(s, "/")
	if !ok {
		return metav1.GroupVersion{Version: s}, nil
	}
	if group == "" || version == "" {
		return metav1.GroupVersion{}, fmt.Errorf("bad groupVersion %q", s)
	}
	return metav1.GroupVersion{Group: group, Version: version}, nil
}

// targetFor chooses the resource an AdmissionReview probe pretends to
// create: a resource kube-apiserver serves, that accepts CREATE, and that
// the webhook's rules match, as kube-apiserver matches them (groups,
// versions, resources, scope and operations). Never a group and resource
// pair that does not exist.
//
// The first rule with a match wins. Within a rule, groups are tried in
// the order listed (the webhook's own groups first; "*" means the core
// group, then every other in discovery's order), resources in the order
// listed ("*" and "*/*" mean configmaps in the core group, then every
// creatable resource by name), and versions in the order listed ("*" means
// the group's preferred version, then the others).
func targetFor(wh admissionregistrationv1.MutatingWebhook, d Discovery, c *catalog) (probeTarget, error) {
	if d == nil {
		return probeTarget{}, errors.New("the prober has no discovery client to find a resource the webhook's rules match")
	}
	if err := RulesProbeable(wh.Rules); err != nil {
		return probeTarget{}, err
	}
	for _, miss := range []bool{false, true} {
		groups, err := c.get(d, miss)
		if err != nil {
			return probeTarget{}, err
		}
		if t, ok := choose(wh.Rules, groups); ok {
			return t, nil
		}
	}
	return probeTarget{}, fmt.Errorf("no resource kube-apiserver serves matches the rules of webhook %q (%s); nothing to probe it with until one does", wh.Name, describeRules(wh.Rules))
}

func choose(rules []admissionregistrationv1.RuleWithOperations, groups []servedGroup) (probeTarget, bool) {
	for _, r := range rules {
		if !ruleCreates(r) {
			continue
		}
		for _, g := range groupsFor(r.APIGroups, groups) {
			for _, v := range versionsFor(r.APIVersions, g) {
				for _, res := range resourcesFor(mainResources(r.Resources), g, v) {
					// The loops propose in order of preference; kube-apiserver's
					// matcher decides (scope included).
					gvr := schema.GroupVersionResource{Group: g.name, Version: v, Resource: res.Name}
					if !rulematch.Matches(r, rulematch.Request{Operation: admission.Create, Resource: gvr, Namespaced: res.Namespaced}) {
						continue
					}
					t := probeTarget{gvr: metav1.GroupVersionResource(gvr), kind: res.Kind}
					if res.Namespaced {
						t.namespace = probeNamespace
					}
					return t, true
				}
			}
		}
	}
	return probeTarget{}, false
}

func groupsFor(names []string, groups []servedGroup) []servedGroup {
	var out []servedGroup
	seen := map[string]bool{}
	add := func(g servedGroup) {
		if !seen[g.name] {
			seen[g.name] = true
			out = append(out, g)
		}
	}
	for _, n := range names {
		if n == "*" {
			for _, g := range groups {
				if g.name == "" {
					add(g)
				}
			}
			for _, g := range groups {
				add(g)
			}
			continue
		}
		for _, g := range groups {
			if g.name == n {
				add(g)
			}
		}
	}
	return out
}

func versionsFor(names []string, g servedGroup) []string {
	var out []string
	for _, n := range names {
		if n == "*" {
			out = append(out, g.preferred)
			out = append(out, g.versions...)
			continue
		}
		if slices.Contains(g.versions, n) {
			out = append(out, n)
		}
	}
	return slices.Compact(out)
}

func resourcesFor(names []string, g servedGroup, version string) []metav1.APIResource {
	served := g.resources[version]
	var out []metav1.APIResource
	for _, n := range names {
		if n == "*" {
			if g.name == "" {
				if i := slices.IndexFunc(served, func(r metav1.APIResource) bool { return r.Name == "configmaps" }); i >= 0 {
					out = append(out, served[i])
				}
			}
			out = append(out, served...)
			continue
		}
		if i := slices.IndexFunc(served, func(r metav1.APIResource) bool { return r.Name == n }); i >= 0 {
			out = append(out, served[i])
		}
	}
	return out
}

func describeRules(rules []admissionregistrationv1.RuleWithOperations) string {
	descs := make([]string, 0, len(rules))
	for i, r := range rules {
		descs = append(descs, fmt.Sprintf("rules[%d]: groups %v, versions %v, resources %v", i, r.APIGroups, r.APIVersions, r.Resources))
	}
	return strings.Join(descs, "; ")
}
