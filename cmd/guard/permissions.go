package main

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// checkTargetPermissions asks the apiserver, with SelfSubjectAccessReviews,
// whether this identity may update every target configuration. The
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
					Group: "admissionregistration.k8s.io", Resource: kind.Resource(), Verb: "update", Name: name,
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("checking permission to update %s/%s: %w", kind.Resource(), name, err)
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
		return fmt.Errorf("this identity may not update %s, which the configuration lists as targets; "+
			"add them to the resourceNames of the ClusterRole webhook-guard-targets (make manifests regenerates it from the configuration) or remove the targets",
			strings.Join(gaps, "; "))
	}
	return nil
}
