package marking

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Circuit names one mutating webhook's circuit.
type Circuit struct {
	Configuration, Webhook string
}

// Events creates events.k8s.io Events in one namespace; the canary is a
// dry-run create (see CanaryLabel). The service may create Events there
// already, for its own Events.
type Events interface {
	Create(ctx context.Context, event *eventsv1.Event, opts metav1.CreateOptions) (*eventsv1.Event, error)
}

// Keeper checks, before a circuit opens, that its marking policy is in
// place: installed as Render renders it, loaded by kube-apiserver, and
// armed by the configuration it reads. It
// writes nothing; the policies are installed by an administrator (guard
// manifests marking). It keeps no state, so it is safe for concurrent use.
type Keeper struct {
	// Reader reads the installed policies and bindings (the manager's
	// cache).
	Reader client.Reader
	// Canary sends the canary: a dry-run Event create.
	Canary Events
}

// CanaryNamespace is where the canary Event is created (dry run): the
// namespace where the service already creates Events about
// cluster-scoped objects.
const CanaryNamespace = "default"

// InstallHint says how to install the marking policies.
const InstallHint = "install them with \"guard manifests marking --config <file> | kubectl apply -f -\" (a user overlay includes them; the Helm chart renders them from its targets: upgrade the release)"

// Check returns nil when c's marking policy and binding are installed as
// Render renders them, and an error that says what differs otherwise.
func (k *Keeper) Check(ctx context.Context, c Circuit) error {
	wantPolicy, wantBinding := Render(c.Configuration, c.Webhook)
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	for _, obj := range []client.Object{policy, binding} {
		if err := k.Reader.Get(ctx, client.ObjectKey{Name: wantPolicy.Name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("the marking policy of %s/%s is not installed (%T %s not found): %s",
					c.Configuration, c.Webhook, obj, wantPolicy.Name, InstallHint)
			}
			return fmt.Errorf("reading the marking policy %s: %w", wantPolicy.Name, err)
		}
	}
	if digestOfSpec(policy, policy.Spec) != specDigest(wantPolicy.Spec) || digestOfSpec(binding, binding.Spec) != specDigest(wantBinding.Spec) {
		return fmt.Errorf("the marking policy %s of %s/%s differs from what this release renders (changed by hand, or rendered by another release): %s",
			wantPolicy.Name, c.Configuration, c.Webhook, InstallHint)
	}
	return nil
}

// Armed returns the circuits of cs whose marking policy kube-apiserver
// does not yet show armed: a fresh canary (a dry-run Event) must carry
// the policy's LoadedAnnotation with this release's Digest and its
// ArmedAnnotation. It checks each policy first (an error when one is not
// installed as Render renders it). Arming depends on the configuration,
// not on the policy, so every call sends one canary for all of cs.
func (k *Keeper) Armed(ctx context.Context, cs []Circuit) ([]Circuit, error) {
	for _, c := range cs {
		if err := k.Check(ctx, c); err != nil {
			return nil, err
		}
	}
	review, err := k.Canary.Create(ctx, CanaryEvent(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return nil, fmt.Errorf("sending the marking canary (a dry-run Event): %w", err)
	}
	var notYet []Circuit
	for _, c := range cs {
		if review.Annotations[LoadedAnnotation(c.Configuration, c.Webhook)] != Digest(c.Configuration, c.Webhook) ||
			review.Annotations[ArmedAnnotation(c.Configuration, c.Webhook)] != "true" {
			notYet = append(notYet, c)
		}
	}
	return notYet, nil
}

// CanaryEvent is the dry-run Event that the marking policies answer:
// valid, so that the dry run succeeds, and about nothing in particular.
func CanaryEvent() *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: "webhook-guard-marking-canary-", Labels: map[string]string{CanaryLabel: "true"}},
		EventTime:           metav1.NowMicro(),
		ReportingController: "webhook-guard.io/marking-canary",
		ReportingInstance:   "webhook-guard",
		Action:              "Canary",
		Reason:              "MarkingCanary",
		Type:                corev1.EventTypeNormal,
		Note:                "a dry run: asks the marking policies whether kube-apiserver has loaded them",
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: "default"},
	}
}
