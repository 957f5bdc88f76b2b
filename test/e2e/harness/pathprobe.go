package harness

import (
	"context"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/rbac"
)

// pathProbeConfig is a configuration whose targets name services for the
// path probe, one each, with the apiserver signal on.
func pathProbeConfig(services ...config.Service) *config.Configuration {
	cfg := &config.Configuration{}
	for _, svc := range services {
		t := config.Target{Kind: "Mutating", Configuration: "c", Webhook: "w"}
		t.APIServerSignal.Enabled = true
		t.APIServerSignal.PathProbe.Service = &svc
		cfg.Targets = append(cfg.Targets, t)
	}
	return cfg
}

// PathProbeRule is the rule the installed RBAC gives the guard's path
// probe for the given Services, all in one namespace: exactly the rule of
// the Role internal/rbac renders in that namespace from their
// apiserverSignal.pathProbe (get on services/proxy, by
// "https:<service>:<port>"). GuardRules leaves it out because it depends
// on the Services, not the configuration names, and is not cluster-wide.
func PathProbeRule(services ...config.Service) (rbacv1.PolicyRule, error) {
	grants := rbac.RenderPathProbeGrants(pathProbeConfig(services...), rbacv1.Subject{})
	if len(grants) != 1 || len(grants[0].Role.Rules) != 1 {
		return rbacv1.PolicyRule{}, fmt.Errorf("internal/rbac renders %d path probe Roles for %v, want one with one rule", len(grants), services)
	}
	return grants[0].Role.Rules[0], nil
}

// GrantPathProbe creates what "guard manifests rbac" renders for the path
// probe of the given Services with the identity as --breaker: in each
// Service's namespace, a Role with get on services/proxy by name and a
// RoleBinding of it to the identity's ServiceAccount. It waits until RBAC
// lets the identity GET through the service proxy to each of them.
func (e *Env) GrantPathProbe(ctx context.Context, id *Identity, services ...config.Service) error {
	for _, g := range rbac.RenderPathProbeGrants(pathProbeConfig(services...), rbac.Subject(id.Username)) {
		for _, obj := range []client.Object{g.Role, g.Binding} {
			if err := e.Client.Create(ctx, obj); err != nil {
				return fmt.Errorf("creating %s %s/%s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName(), err)
			}
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, svc := range services {
		for {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: svc.Namespace, Verb: "get", Resource: "services", Subresource: "proxy", Name: svc.ProxyName(),
			}}}
			if err := id.Client.Create(ctx, review); err == nil && review.Status.Allowed {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("RBAC for %s's path probe to %s/%s never took effect", id.Username, svc.Namespace, svc.ProxyName())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}
