package unmutated

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/internal/rulematch"
)

// markedObject is one object carrying the unmutated mark.
type markedObject struct {
	// gvr and gvk are the resource it was listed from and its kind, in
	// the group's preferred version.
	gvr       schema.GroupVersionResource
	gvk       schema.GroupVersionKind
	namespace string
	name      string
	// id is the mark, the circuit's marking.ID; note is the annotation.
	id   string
	note string
	// owner is the top of its controller chain ("Deployment team/web"),
	// or the object itself.
	ownerKind, ownerNamespace, ownerName string
}

// found is what finder.find found: the marked objects, sorted by group,
// kind, namespace and name, and what could not be read.
type found struct {
	objects []markedObject
	// unavailable names each configuration, group or resource that could
	// not be read, and why: marks there are not listed.
	unavailable []string
}

// serverResources lists the served resources (a discovery client).
type serverResources interface {
	ServerGroupsAndResourcesWithContext(ctx context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error)
}

// finder finds the marked objects: the webhook configurations through c,
// the served resources through dc and mapper (one cached discovery read),
// the objects and their owners through mc. Each owner is read once.
type finder struct {
	c      client.Reader
	mc     metadata.Interface
	dc     serverResources
	mapper meta.RESTMapperWithContext
	owners map[string]ownerRead
}

// ownerRead is one owner's read, kept for the next object it owns.
type ownerRead struct {
	obj *metav1.PartialObjectMetadata
	err error
}

// find lists, in every resource where the mutating targets' webhooks
// let their marking policies leave a mark (markableKinds), the objects
// carrying one of their marks.
func (f *finder) find(ctx context.Context, cfg *config.Configuration) (found, error) {
	var res found
	var ids []string
	var rules []admissionregistrationv1.RuleWithOperations
	for _, t := range cfg.Targets {
		if t.Kind != circuit.KindMutating {
			continue
		}
		ids = append(ids, marking.ID(t.Configuration, t.Webhook))
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := f.c.Get(ctx, client.ObjectKey{Name: t.Configuration}, mwc); err != nil {
			if !apierrors.IsNotFound(err) { // a configuration that is gone matches nothing now
				res.unavailable = append(res.unavailable, fmt.Sprintf("%s %s, whose webhook's rules say where to look: %v", t.Kind.Singular(), t.Configuration, err))
			}
			continue
		}
		for _, wh := range mwc.Webhooks {
			if wh.Name == t.Webhook {
				rules = append(rules, markedRules(wh)...)
			}
		}
	}
	if len(ids) == 0 {
		return found{}, errNoMutatingTarget
	}
	slices.Sort(ids)
	req, err := labels.NewRequirement(circuit.UnmutatedLabel, selection.In, slices.Compact(ids))
	if err != nil {
		return found{}, err
	}
	selector := labels.NewSelector().Add(*req).String()
	_, lists, err := f.dc.ServerGroupsAndResourcesWithContext(ctx)
	if err != nil {
		if len(lists) == 0 {
			return found{}, fmt.Errorf("discovering the served resources: %w", err)
		}
		res.unavailable = append(res.unavailable, discoveryFailures(err)...)
	}
	seen := map[types.UID]bool{}
	for _, gk := range markableKinds(rules, lists) {
		m, err := f.mapper.RESTMappingWithContext(ctx, gk)
		if err != nil {
			res.unavailable = append(res.unavailable, fmt.Sprintf("kind %s: %v", gk, err))
			continue
		}
		items, err := f.mc.Resource(m.Resource).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			res.unavailable = append(res.unavailable, fmt.Sprintf("listing %s: %v", m.Resource, err))
			continue
		}
		for _, it := range items.Items {
			// Events are served in two groups (core and events.k8s.io):
			// each object once.
			if seen[it.UID] {
				continue
			}
			seen[it.UID] = true
			u := markedObject{gvr: m.Resource, gvk: m.GroupVersionKind, namespace: it.Namespace, name: it.Name,
				id: it.Labels[circuit.UnmutatedLabel], note: it.Annotations[circuit.UnmutatedAnnotation]}
			u.ownerKind, u.ownerNamespace, u.ownerName = f.topOwner(ctx, u.gvk.Kind, it.Namespace, it.Name, it.OwnerReferences)
			res.objects = append(res.objects, u)
		}
	}
	slices.SortFunc(res.objects, func(a, b markedObject) int {
		return cmp.Or(strings.Compare(a.gvk.Group, b.gvk.Group), strings.Compare(a.gvk.Kind, b.gvk.Kind),
			strings.Compare(a.namespace, b.namespace), strings.Compare(a.name, b.name))
	})
	return res, nil
}

// discoveryFailures names the groups discovery could not read.
func discoveryFailures(err error) []string {
	var failed *discovery.ErrGroupDiscoveryFailed
	if !errors.As(err, &failed) {
		return []string{fmt.Sprintf("discovering the served resources: %v", err)}
	}
	out := make([]string, 0, len(failed.Groups))
	for gv, gerr := range failed.Groups {
		out = append(out, fmt.Sprintf("group %s: %v", gv, gerr))
	}
	slices.Sort(out)
	return out
}

// markedRules are the rules under which wh's marking policy marks, as it
// reads them (internal/marking): wh's rules, with any version unless its
// matchPolicy is Exact (Equivalent, the default, matches every version
// of a group and resource).
func markedRules(wh admissionregistrationv1.MutatingWebhook) []admissionregistrationv1.RuleWithOperations {
	exact := wh.MatchPolicy != nil && *wh.MatchPolicy == admissionregistrationv1.Exact
	out := make([]admissionregistrationv1.RuleWithOperations, 0, len(wh.Rules))
	for _, r := range wh.Rules {
		if !exact {
			r.APIVersions = []string{"*"} // r is a copy; wh's slice is untouched
		}
		out = append(out, r)
	}
	return out
}

// markableKinds returns the kinds of the served resources where a marking
// policy under rules can leave a mark, each once, in discovery's order:
// the resources that can be listed, where a CREATE or UPDATE
// (marking.Operations) of the object, or of one of its subresources,
// matches one of rules, as kube-apiserver matches them (rulematch). A
// write through a subresource (an update of pods/status) may leave its
// mark on the object itself, so a rule on subresources only ("*/status")
// has its objects listed too: a list too many costs a request, a list too
// few loses marks.
func markableKinds(rules []admissionregistrationv1.RuleWithOperations, lists []*metav1.APIResourceList) []schema.GroupKind {
	var out []schema.GroupKind
	seen := map[schema.GroupKind]bool{}
	for _, l := range lists {
		if l == nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		subresources := map[string][]string{}
		for _, r := range l.APIResources {
			if name, sub, ok := strings.Cut(r.Name, "/"); ok {
				subresources[name] = append(subresources[name], sub)
			}
		}
		for _, r := range l.APIResources {
			gk := schema.GroupKind{Group: gv.Group, Kind: r.Kind}
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || seen[gk] {
				continue
			}
			if marks(rules, gv.WithResource(r.Name), r.Namespaced, subresources[r.Name]) {
				seen[gk] = true
				out = append(out, gk)
			}
		}
	}
	return out
}

// marks reports whether a CREATE or UPDATE of an object of gvr, or of
// one of its subresources, matches one of rules.
func marks(rules []admissionregistrationv1.RuleWithOperations, gvr schema.GroupVersionResource, namespaced bool, subresources []string) bool {
	for _, op := range marking.Operations() {
		for _, sub := range append([]string{""}, subresources...) {
			if rulematch.Any(rules, rulematch.Request{Operation: admission.Operation(op), Resource: gvr, Subresource: sub, Namespaced: namespaced}) {
				return true
			}
		}
	}
	return false
}

// maxOwnerDepth bounds how many controller references topOwner follows:
// Pod → ReplicaSet → Deployment is two; five leaves room for operators
// that own Deployments, and stops at a reference cycle.
const maxOwnerDepth = 5

// topOwner follows controller owner references (Pod → ReplicaSet →
// Deployment) to the top: in the object's namespace, or cluster-scoped
// when the owner's kind is. Kinds map to resources through the mapper, so
// no owner costs a discovery request.
func (f *finder) topOwner(ctx context.Context, kind, namespace, name string, refs []metav1.OwnerReference) (string, string, string) {
	ns := namespace
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
		gv, err := schema.ParseGroupVersion(ctrl.APIVersion)
		if err != nil {
			break
		}
		m, err := f.mapper.RESTMappingWithContext(ctx, gv.WithKind(ctrl.Kind).GroupKind(), gv.Version)
		if err != nil {
			break
		}
		ownerNS := namespace
		if m.Scope.Name() == meta.RESTScopeNameRoot {
			ownerNS = ""
		}
		owner, err := f.readOwner(ctx, m.Resource, ownerNS, ctrl.Name)
		if err != nil {
			kind, ns, name = ctrl.Kind, ownerNS, ctrl.Name // gone, or not readable: the reference still names it
			break
		}
		kind, ns, name, refs = ctrl.Kind, ownerNS, owner.Name, owner.OwnerReferences
	}
	return kind, ns, name
}

// readOwner reads an owner's metadata, once per run.
func (f *finder) readOwner(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	key := gvr.String() + "|" + namespace + "|" + name
	if r, ok := f.owners[key]; ok {
		return r.obj, r.err
	}
	var r ownerRead
	if namespace != "" {
		r.obj, r.err = f.mc.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	} else {
		r.obj, r.err = f.mc.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
	}
	if f.owners == nil {
		f.owners = map[string]ownerRead{}
	}
	f.owners[key] = r
	return r.obj, r.err
}
