package startcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// Run makes the checks "guard run" makes before it starts, in order, and
// returns the first that fails: the targets' permissions and rules, other
// installations (taking over the circuits of one that no longer runs),
// open circuits of removed targets, and the marking policies. opts names
// this installation's breaker identity and instance. c must be a direct
// client (no cache); nothing else has started yet.
func Run(ctx context.Context, c client.Client, cs kubernetes.Interface, cfg *config.Configuration, opts admission.Options) error {
	if err := checkTargetPermissions(ctx, cs, cfg); err != nil {
		return err
	}
	if err := checkTargetRules(ctx, c, cfg); err != nil {
		return err
	}
	if err := checkOtherInstances(ctx, c, cs, cfg, opts); err != nil {
		return err
	}
	if err := checkOrphanedRecords(ctx, c, cs, cfg, Signer(opts.Breaker(), opts.Instance)); err != nil {
		return err
	}
	return checkMarkingPolicies(ctx, c, cfg)
}

// Signer is what an installation signs its circuit record entries with:
// its breaker identity and, for a named instance, the instance, as
// "identity/instance". Two installations never judge each other's
// circuits, even under one ServiceAccount.
func Signer(identity, instance string) string {
	if instance == "" {
		return identity
	}
	return identity + "/" + instance
}

// checkTargetPermissions asks the apiserver, with SelfSubjectAccessReviews,
// whether this identity may patch every target configuration. The
// configuration and the RBAC resourceNames must not drift apart: a target
// the service could not write would fail only when its circuit needs to
// open, the worst moment. So the service refuses to start, naming each gap.
func checkTargetPermissions(ctx context.Context, cs kubernetes.Interface, cfg *config.Configuration) error {
	var gaps []string
	for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
		var missing []string
		for _, name := range cfg.Names(kind) {
			review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Group: "admissionregistration.k8s.io", Resource: kind.Resource(), Verb: "patch", Name: name,
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("checking permission to patch %s/%s: %w", kind.Resource(), name, err)
			}
			if !review.Status.Allowed {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			gaps = append(gaps, kind.Resource()+" "+strings.Join(missing, ", "))
		}
	}
	if len(gaps) > 0 {
		return fmt.Errorf("this identity may not patch %s, which the configuration lists as targets; "+
			"add them to the resourceNames of the ClusterRole webhook-guard-targets (make manifests regenerates it from the configuration) or remove the targets",
			strings.Join(gaps, "; "))
	}
	return nil
}

// Orphan is a circuit record entry for a webhook that is no longer a
// target.
type Orphan struct {
	// Kind and Configuration name the webhook configuration, Webhook the
	// webhook in it.
	Kind                   circuit.Kind
	Configuration, Webhook string
	// By is the entry's signer.
	By string
}

// OrphanedRecords lists the record entries signed by signer, on
// configurations of both kinds, for webhooks that are not targets of cfg.
// Unreadable records are left out (the breaker reports them), and so are
// entries by another installation. An empty signer lists every
// installation's ("guard status" shows them all).
func OrphanedRecords(ctx context.Context, c client.Reader, cfg *config.Configuration, signer string) ([]Orphan, error) {
	targets := map[string]bool{}
	for _, t := range cfg.Targets {
		targets[t.Key()] = true
	}
	var out []Orphan
	for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
		list := &admissionregistrationv1.MutatingWebhookConfigurationList{}
		var objs client.ObjectList = list
		if kind == circuit.KindValidating {
			objs = &admissionregistrationv1.ValidatingWebhookConfigurationList{}
		}
		if err := c.List(ctx, objs); err != nil {
			return nil, fmt.Errorf("listing %s: %w", kind.Resource(), err)
		}
		items, err := apimeta.ExtractList(objs)
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			obj := item.(client.Object)
			rec, err := circuit.Decode(obj.GetAnnotations())
			if err != nil {
				continue
			}
			for _, webhook := range rec.Webhooks() {
				t := config.Target{Kind: kind, Configuration: obj.GetName(), Webhook: webhook}
				if !targets[t.Key()] && (signer == "" || rec[webhook].Mine(signer)) {
					out = append(out, Orphan{Kind: kind, Configuration: obj.GetName(), Webhook: webhook, By: rec[webhook].By})
				}
			}
		}
	}
	return out, nil
}

// checkOrphanedRecords refuses to start when a configuration carries an
// open circuit for a webhook that is no longer a target and this identity
// may not patch that configuration: the breaker closes such circuits, and
// nobody else would. For each such configuration it prints the one
// command that closes them as the breaker would (restorePatch), for an
// administrator to run. A configuration handed to its administrators (the
// override annotation) is theirs, and does not hold the start.
func checkOrphanedRecords(ctx context.Context, c client.Reader, cs kubernetes.Interface, cfg *config.Configuration, signer string) error {
	orphans, err := OrphanedRecords(ctx, c, cfg, signer)
	if err != nil {
		return fmt.Errorf("looking for circuit records of removed targets: %w", err)
	}
	type key struct {
		kind circuit.Kind
		name string
	}
	stuck := map[key][]string{}
	var order []key
	for _, o := range orphans {
		review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: "admissionregistration.k8s.io", Resource: o.Kind.Resource(), Verb: "patch", Name: o.Configuration,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("checking permission to patch %s/%s: %w", o.Kind.Resource(), o.Configuration, err)
		}
		if !review.Status.Allowed {
			k := key{o.Kind, o.Configuration}
			if stuck[k] == nil {
				order = append(order, k)
			}
			stuck[k] = append(stuck[k], o.Webhook)
		}
	}
	var problems []string
	for _, k := range order {
		obj := k.kind.New()
		if err := c.Get(ctx, client.ObjectKey{Name: k.name}, obj); err != nil {
			return fmt.Errorf("reading %s %s: %w", k.kind.Singular(), k.name, err)
		}
		if obj.GetAnnotations()[circuit.OverrideAnnotation] != "" {
			continue
		}
		patch, err := restorePatch(obj, stuck[k], signer)
		if err != nil {
			return fmt.Errorf("%s %s: %w", k.kind.Singular(), k.name, err)
		}
		problems = append(problems, fmt.Sprintf("%s %s (webhooks %s); close them with: kubectl patch %s %s --type=json -p %s && kubectl annotate %s %s %s-",
			k.kind.Singular(), k.name, strings.Join(stuck[k], ", "), k.kind.Singular(), k.name, shellQuote(string(patch)),
			k.kind.Singular(), k.name, circuit.OverrideAnnotation))
	}
	if len(problems) > 0 {
		return fmt.Errorf("these configurations carry an open circuit for a webhook that is no longer a target, and this identity may not patch them to close it: %s. "+
			"Keep the target until its circuit closes, or run the commands shown as an administrator: the patch restores each original failurePolicy and removes the bypass marker "+
			"and the record entry in one write, under the override annotation %s (the guard policy may still protect these fields), and fails if the configuration changed since this check; "+
			"the annotate removes the override again. Then restart",
			strings.Join(problems, "; "), circuit.OverrideAnnotation)
	}
	return nil
}

// RemedyOverride is the override annotation's value in the write of the
// printed remedy for an orphaned open circuit (restorePatch): the guard
// policy lets an administrator change the owned fields under it.
const RemedyOverride = "closing the open circuits of webhooks that are no longer targets"

// restorePatch returns the JSON patch that closes the circuits of
// webhooks on obj as the breaker's closing would: each webhook's
// original failurePolicy back from its entry signed by signer, its bypass
// marker removed and its entry gone, in one write, on the condition of
// obj's resourceVersion (circuit.Patch), under the override annotation
// (RemedyOverride) that lets an administrator write them. An entry of a
// webhook that is gone, or copied from another configuration (another
// UID), only goes.
func restorePatch(obj client.Object, webhooks []string, signer string) ([]byte, error) {
	cur, err := circuit.ReadView(obj)
	if err != nil {
		return nil, err
	}
	rec, err := circuit.Decode(cur.Annotations)
	if err != nil {
		return nil, err
	}
	next := cur.DeepCopy()
	for _, hook := range webhooks {
		entry, ok := rec.Mine(hook, signer)
		if !ok {
			continue
		}
		if wh := circuit.FindWebhook(next, hook); wh != nil && entry.UID == cur.UID {
			circuit.Restore(wh, entry)
		}
		delete(rec, hook)
	}
	if next.Annotations, err = circuit.Encode(next.Annotations, rec); err != nil {
		return nil, err
	}
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[circuit.OverrideAnnotation] = RemedyOverride
	return circuit.Patch(cur, next)
}

// shellQuote quotes s for a POSIX shell, in single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// checkTargetRules refuses to start when a target probed with an
// AdmissionReview has rules that match no request the probe can send (a
// CREATE of a resource): only subresources, or only other operations. No
// probe could ever judge such a webhook, so it names the rule and the
// remedy. Targets whose configuration or webhook does not exist yet are
// left to the breaker, which reports them when they appear.
func checkTargetRules(ctx context.Context, c client.Reader, cfg *config.Configuration) error {
	var problems []string
	for _, t := range cfg.Targets {
		if t.Probe.Kind != config.ProbeAdmissionReview {
			continue
		}
		obj := t.Kind.New()
		if err := c.Get(ctx, client.ObjectKey{Name: t.Configuration}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("reading %s %s: %w", t.Kind.Singular(), t.Configuration, err)
		}
		view, err := circuit.ReadView(obj)
		if err != nil {
			return err
		}
		for _, wh := range view.Webhooks {
			if wh.Name != t.Webhook {
				continue
			}
			if err := probe.RulesProbeable(wh.Rules); err != nil {
				problems = append(problems, fmt.Sprintf("%s %s webhook %s: %v", t.Kind.Singular(), t.Configuration, t.Webhook, err))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("these targets cannot be probed with an AdmissionReview: %s. Give each one probe.kind: HTTPGet with a health path, or remove it",
			strings.Join(problems, "; "))
	}
	return nil
}

// checkMarkingPolicies refuses to start while a mutating target's marking
// policy is missing or not what this release renders: the service cannot
// create or repair them (its token may not write admission policies), and
// an opening without one would admit objects unmarked. Where the
// apiserver does not serve MutatingAdmissionPolicy, marking is
// unavailable and the breaker says so at run time instead.
func checkMarkingPolicies(ctx context.Context, c client.Client, cfg *config.Configuration) error {
	if _, err := c.RESTMapper().RESTMapping(schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: "MutatingAdmissionPolicy"}, "v1"); err != nil {
		if apimeta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("finding out whether the apiserver serves MutatingAdmissionPolicy: %w", err)
	}
	keeper := &marking.Keeper{Reader: c}
	var problems []string
	for _, t := range cfg.Targets {
		if t.Kind != circuit.KindMutating || t.Observes() {
			continue // an Observe target never opens, so marks nothing
		}
		if err := keeper.Check(ctx, marking.Circuit{Configuration: t.Configuration, Webhook: t.Webhook}); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return errors.New("the marking policies of the mutating targets are not in place; webhook-guard does not start without them:\n  " + strings.Join(problems, "\n  "))
	}
	return nil
}
