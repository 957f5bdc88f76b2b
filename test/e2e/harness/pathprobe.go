package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/rbac"
)

// PathProbeRule is the rule the installed RBAC gives the guard's path
// probe for the given targets: exactly the rule internal/rbac renders
// into the targets ClusterRole from their apiserverSignal.pathProbe
// (get on services/proxy, by "https:<service>:<port>"). GuardRules leaves
// it out because it depends on the Services, not the configuration names.
func PathProbeRule(services ...config.Service) (rbacv1.PolicyRule, error) {
	cfg := &config.Configuration{}
	for _, svc := range services {
		t := config.Target{Kind: "Mutating", Configuration: "c", Webhook: "w"}
		t.APIServerSignal.Enabled = true
		t.APIServerSignal.PathProbe.Service = &svc
		cfg.Targets = append(cfg.Targets, t)
	}
	for _, r := range rbac.RenderTargetsRole(cfg).Rules {
		if len(r.Resources) == 1 && r.Resources[0] == "services/proxy" {
			return r, nil
		}
	}
	return rbacv1.PolicyRule{}, fmt.Errorf("internal/rbac renders no path probe rule for %v", services)
}

// GrantPathProbe binds PathProbeRule(services...) to the identity's
// ServiceAccount in namespace, and waits until RBAC lets it GET through
// the service proxy to the first of them.
func (e *Env) GrantPathProbe(ctx context.Context, namespace string, id *Identity, services ...config.Service) error {
	rule, err := PathProbeRule(services...)
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "guard-path-probe-" + namespace}, Rules: []rbacv1.PolicyRule{rule}}
	if err := e.Client.Create(ctx, role); err != nil {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	sa := id.Username[strings.LastIndex(id.Username, ":")+1:]
	if err := e.Bind(ctx, role.Name, role.Name, namespace, sa); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: services[0].Namespace, Verb: "get", Resource: "services", Subresource: "proxy", Name: services[0].ProxyName(),
		}}}
		if err := id.Client.Create(ctx, review); err == nil && review.Status.Allowed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("RBAC for %s's path probe never took effect", id.Username)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
