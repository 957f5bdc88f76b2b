package marking

import (
	"context"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Circuit names one mutating webhook's circuit.
type Circuit struct {
	Configuration, Webhook string
}

// Events creates core/v1 Events in one namespace; the canary is a
// dry-run create (see CanaryLabel). The service's own Events, in the same
// namespace, are events.k8s.io Events: the marking policies leave those
// out before any of their CEL runs, and cannot leave out the canary.
type Events interface {
	Create(ctx context.Context, event *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error)
}

// Keeper checks, before a circuit opens, that its marking policy is in
// place: installed as Render renders it, loaded by kube-apiserver, and
// armed by the configuration it reads. It writes nothing; the policies
// are installed by an administrator (guard manifests marking). It is
// safe for concurrent use: concurrent calls of Armed share canaries.
type Keeper struct {
	// Reader reads the installed policies and bindings (the manager's
	// cache).
	Reader client.Reader
	// Canary sends the canary: a dry-run Event create.
	Canary Events
	// CanaryGap is the least time from one canary to the next
	// (DefaultCanaryGap when zero).
	CanaryGap time.Duration

	// mu guards next, last and sending; sending holds a token while a
	// canary is in flight, so that one is at a time.
	mu      sync.Mutex
	next    *canaryBatch
	last    time.Time
	sending chan struct{}

	// renders holds each circuit's renderedSpecs, by Circuit.
	renders sync.Map
}

// DefaultCanaryGap bounds the canaries to four a second, however many
// circuits open at once. A canary goes through admission, where every
// marking policy of the cluster evaluates its match condition: at 1,000
// policies a canary per configuration and probe interval was most of
// kube-apiserver's CPU in a mass failure (docs/performance.md).
const DefaultCanaryGap = 250 * time.Millisecond

// canaryBatch is one canary and the circuits it asks about: every call of
// Armed that comes while it waits for its turn joins it.
type canaryBatch struct {
	circuits map[Circuit]struct{}
	done     chan struct{}
	review   *corev1.Event
	err      error
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
	want := k.rendered(c)
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	for _, obj := range []client.Object{policy, binding} {
		if err := k.Reader.Get(ctx, client.ObjectKey{Name: want.name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("the marking policy of %s/%s is not installed (%T %s not found): %s",
					c.Configuration, c.Webhook, obj, want.name, InstallHint)
			}
			return fmt.Errorf("reading the marking policy %s: %w", want.name, err)
		}
	}
	if digestOfSpec(policy, policy.Spec) != want.policy || digestOfSpec(binding, binding.Spec) != want.binding {
		return fmt.Errorf("the marking policy %s of %s/%s differs from what this release renders (changed by hand, or rendered by another release): %s",
			want.name, c.Configuration, c.Webhook, InstallHint)
	}
	return nil
}

// renderedSpecs are the name and spec digests of a circuit's policy and
// binding as Render renders them.
type renderedSpecs struct{ name, policy, binding string }

// rendered returns c's renderedSpecs, rendered once per circuit: Check
// runs at every opening and closing, and rendering a policy (its CEL) was
// 9% of the guard's CPU while 1,000 circuits opened.
func (k *Keeper) rendered(c Circuit) renderedSpecs {
	if v, ok := k.renders.Load(c); ok {
		return v.(renderedSpecs)
	}
	policy, binding := Render(c.Configuration, c.Webhook)
	r := renderedSpecs{name: policy.Name, policy: specDigest(policy.Spec), binding: specDigest(binding.Spec)}
	k.renders.Store(c, r)
	return r
}

// Armed returns the circuits of cs whose marking policy kube-apiserver
// does not yet show armed: a fresh canary (a dry-run Event) must carry
// the policy's LoadedAnnotation with this release's Digest and its
// ArmedAnnotation. It checks each policy first (an error when one is not
// installed as Render renders it). Arming depends on the configuration,
// not on the policy, so every call waits for a canary sent after it: the
// next one, which carries the circuits of every call meanwhile, at most
// one at a time and CanaryGap apart. The first call to ask for a canary
// sends it, within its own context.
func (k *Keeper) Armed(ctx context.Context, cs []Circuit) ([]Circuit, error) {
	for _, c := range cs {
		if err := k.Check(ctx, c); err != nil {
			return nil, err
		}
	}
	b, first := k.join(cs)
	if first {
		k.send(ctx, b)
	} else {
		select {
		case <-b.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the marking canary (a dry-run Event): %w", ctx.Err())
		}
	}
	if b.err != nil {
		return nil, fmt.Errorf("sending the marking canary (a dry-run Event): %w", b.err)
	}
	var notYet []Circuit
	for _, c := range cs {
		if b.review.Annotations[LoadedAnnotation(c.Configuration, c.Webhook)] != Digest(c.Configuration, c.Webhook) ||
			b.review.Annotations[ArmedAnnotation(c.Configuration, c.Webhook)] != "true" {
			notYet = append(notYet, c)
		}
	}
	return notYet, nil
}

// join adds cs to the next canary, and reports whether they are the first
// to ask for it: that call sends it.
func (k *Keeper) join(cs []Circuit) (*canaryBatch, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sending == nil {
		k.sending = make(chan struct{}, 1)
	}
	b, first := k.next, false
	if b == nil {
		b, first = &canaryBatch{circuits: map[Circuit]struct{}{}, done: make(chan struct{})}, true
		k.next = b
	}
	for _, c := range cs {
		b.circuits[c] = struct{}{}
	}
	return b, first
}

// send sends b's canary, within ctx, once the canary before it has
// answered and CanaryGap has passed since that one was sent; the calls
// that come meanwhile join b. When ctx ends first, b fails for all who
// joined it, and they ask again on their next look.
func (k *Keeper) send(ctx context.Context, b *canaryBatch) {
	defer close(b.done)
	k.mu.Lock()
	sending := k.sending
	k.mu.Unlock()
	// A free turn is taken even when ctx has just ended (a select with
	// both ready picks at random), as a single call without a batch would.
	select {
	case sending <- struct{}{}:
	default:
		select {
		case sending <- struct{}{}:
		case <-ctx.Done():
			b.err = k.abandon(ctx, b)
			return
		}
	}
	defer func() { <-sending }()
	k.mu.Lock()
	gap := k.CanaryGap
	if gap == 0 {
		gap = DefaultCanaryGap
	}
	wait := gap - time.Since(k.last)
	k.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			b.err = k.abandon(ctx, b)
			return
		}
	}
	k.mu.Lock()
	k.next = nil
	k.last = time.Now()
	cs := make([]Circuit, 0, len(b.circuits))
	for c := range b.circuits {
		cs = append(cs, c)
	}
	k.mu.Unlock()
	b.review, b.err = k.Canary.Create(ctx, CanaryEvent(cs...), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

// abandon takes b out of turn, unsent, and returns why.
func (k *Keeper) abandon(ctx context.Context, b *canaryBatch) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.next == b {
		k.next = nil
	}
	return ctx.Err()
}

// CanaryEvent is the dry-run Event that the marking policies of cs
// answer (CanaryLabelFor): valid, so that the dry run succeeds, and about
// nothing in particular.
func CanaryEvent(cs ...Circuit) *corev1.Event {
	labels := map[string]string{CanaryLabel: "true"}
	for _, c := range cs {
		labels[CanaryLabelFor(c.Configuration, c.Webhook)] = "true"
	}
	return &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: "webhook-guard-marking-canary-", Labels: labels},
		EventTime:           metav1.NowMicro(),
		ReportingController: "webhook-guard.io/marking-canary",
		ReportingInstance:   "webhook-guard",
		Action:              "Canary",
		Reason:              "MarkingCanary",
		Type:                corev1.EventTypeNormal,
		Message:             "a dry run: asks the marking policies whether kube-apiserver has loaded them",
		InvolvedObject:      corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: "default"},
	}
}
