package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

// checkMarkingPolicies refuses to start while a mutating target's marking
// policy is missing or not what this release renders: the service cannot
// create or repair them (its token may not write admission policies), and
// an opening without one would admit objects unmarked. Where the
// apiserver does not serve MutatingAdmissionPolicy, marking is
// unavailable and the breaker says so at run time instead.
func checkMarkingPolicies(ctx context.Context, rc *rest.Config, cfg *config.Configuration) error {
	c, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	if _, err := c.RESTMapper().RESTMapping(schema.GroupKind{Group: admissionregistrationv1.GroupName, Kind: "MutatingAdmissionPolicy"}, "v1"); err != nil {
		if meta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("finding out whether the apiserver serves MutatingAdmissionPolicy: %w", err)
	}
	keeper := &marking.Keeper{Reader: c}
	var problems []string
	for _, t := range cfg.Targets {
		if t.Kind != circuit.KindMutating {
			continue
		}
		if _, err := keeper.Check(ctx, marking.Circuit{Configuration: t.Configuration, Webhook: t.Webhook}); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return errors.New("the marking policies of the mutating targets are not in place; webhook-guard does not start without them:\n  " + strings.Join(problems, "\n  "))
	}
	return nil
}
