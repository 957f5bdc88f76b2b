package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// checkTargetPermissions asks the apiserver, with SelfSubjectAccessReviews,
// whether this identity may patch every target configuration. The
// configuration and the RBAC resourceNames must not drift apart: a target
// the service could not write would fail only when its circuit needs to
// open, the worst moment. So the service refuses to start, naming each gap.
func checkTargetPermissions(ctx context.Context, rc *rest.Config, cfg *config.Configuration) error {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
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

// orphan is a circuit record entry for a webhook that is no longer a target.
type orphan struct {
	kind                       circuit.Kind
	configuration, webhook, by string
}

// orphanedRecords lists the record entries by identity, on configurations
// of both kinds, for webhooks that are not targets of cfg. Unreadable
// records are left out (the breaker reports them), and so are entries by
// another installation. An empty identity lists every installation's.
func orphanedRecords(ctx context.Context, c client.Reader, cfg *config.Configuration, identity string) ([]orphan, error) {
	targets := map[string]bool{}
	for _, t := range cfg.Targets {
		targets[t.Key()] = true
	}
	var out []orphan
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
				if !targets[t.Key()] && (identity == "" || rec[webhook].Mine(identity)) {
					out = append(out, orphan{kind: kind, configuration: obj.GetName(), webhook: webhook, by: rec[webhook].By})
				}
			}
		}
	}
	return out, nil
}

// checkOrphanedRecords refuses to start when a configuration carries an
// open circuit for a webhook that is no longer a target and this identity
// may not patch that configuration: the breaker closes such circuits, and
// nobody else would. It names each one and how to release it.
func checkOrphanedRecords(ctx context.Context, rc *rest.Config, cfg *config.Configuration, identity string) error {
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	orphans, err := orphanedRecords(ctx, c, cfg, identity)
	if err != nil {
		return fmt.Errorf("looking for circuit records of removed targets: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	var stuck []string
	for _, o := range orphans {
		review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: "admissionregistration.k8s.io", Resource: o.kind.Resource(), Verb: "patch", Name: o.configuration,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("checking permission to patch %s/%s: %w", o.kind.Resource(), o.configuration, err)
		}
		if !review.Status.Allowed {
			stuck = append(stuck, fmt.Sprintf("%s %s (webhook %s; release it with: kubectl annotate %s %s %s=\"<reason>\")",
				o.kind.Singular(), o.configuration, o.webhook, o.kind.Singular(), o.configuration, circuit.OverrideAnnotation))
		}
	}
	if len(stuck) > 0 {
		return fmt.Errorf("these configurations carry an open circuit for a webhook that is no longer a target, and this identity may not patch them to close it: %s. "+
			"Keep the target until its circuit closes, or release the configuration as shown, then restart",
			strings.Join(stuck, "; "))
	}
	return nil
}

// checkOtherInstances refuses to start when another installation's guard
// policy (a webhook-guard ValidatingAdmissionPolicy of another name)
// covers a configuration this one manages: each policy exempts only its
// own breaker, so two installations on one configuration would deny each
// other's writes. Installations on disjoint configurations coexist.
func checkOtherInstances(ctx context.Context, rc *rest.Config, cfg *config.Configuration, opts admission.Options) error {
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	policies := &admissionregistrationv1.ValidatingAdmissionPolicyList{}
	if err := c.List(ctx, policies, client.MatchingLabels{"app.kubernetes.io/managed-by": "webhook-guard"}); err != nil {
		return fmt.Errorf("listing other installations' guard policies: %w", err)
	}
	var clashes []string
	for _, p := range policies.Items {
		if p.Name == opts.Policy() || p.Spec.MatchConstraints == nil {
			continue
		}
		for _, rule := range p.Spec.MatchConstraints.ResourceRules {
			for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
				if !slices.Contains(rule.Resources, kind.Resource()) {
					continue
				}
				for _, name := range cfg.Names(kind) {
					if slices.Contains(rule.ResourceNames, name) {
						clashes = append(clashes, fmt.Sprintf("%s %s (ValidatingAdmissionPolicy %s)", kind.Singular(), name, p.Name))
					}
				}
			}
		}
	}
	if len(clashes) > 0 {
		return fmt.Errorf("another webhook-guard installation manages %s; two installations must not manage one configuration. "+
			"Remove it from one of them, or give this one another instance name, or, if that installation is gone, delete its policy with "+
			"kubectl delete validatingadmissionpolicy,validatingadmissionpolicybinding <name>", strings.Join(clashes, "; "))
	}
	return nil
}

// checkTargetRules refuses to start when a target probed with an
// AdmissionReview has rules that match no request the probe can send (a
// CREATE of a resource): only subresources, or only other operations. No
// probe could ever judge such a webhook, so it names the rule and the
// remedy. Targets whose configuration or webhook does not exist yet are
// left to the breaker, which reports them when they appear.
func checkTargetRules(ctx context.Context, rc *rest.Config, cfg *config.Configuration) error {
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
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
