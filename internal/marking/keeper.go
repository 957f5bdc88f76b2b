package marking

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// Open is one open circuit to mark: the bypassed webhook as it is now in
// its configuration, and when its circuit opened.
type Open struct {
	Webhook  admissionregistrationv1.MutatingWebhook
	OpenedAt time.Time
}

// Keeper keeps the marking policies of one breaker in line with the open
// circuits. It only ever changes or deletes policies whose "by"
// annotation (circuit.MarkedByAnnotation) is its Breaker. It is safe for
// concurrent use.
type Keeper struct {
	// Client reads (the manager's cache) and writes the policies.
	Client client.Client
	// APIReader reads the policies from the apiserver when the cache
	// lags it: a policy the cache does not have yet, or no longer, may
	// still exist. Nil means Client.
	APIReader client.Reader
	// Breaker signs the policies, as it signs record entries.
	Breaker string
	// Settle is how long a policy this breaker wrote needs to take
	// effect: the apiserver applies a new policy once its informer has
	// it, and the opening write must not reach the apiserver's webhook
	// informer first, or a request could be bypassed unmarked. Default
	// DefaultSettle.
	Settle time.Duration

	mu      sync.Mutex
	written map[string]time.Time
}

// DefaultSettle is Keeper.Settle's default. kube-apiserver rebuilds its
// admission policies once a second (k8s.io/apiserver
// policy/generic/policy_source.go, policyRefreshIntervalDefault), while a
// webhook configuration takes effect as soon as its informer has it: a
// new marking policy needs up to a second more. Measured: with 250 ms, 15
// of 33 creates across an opening escaped both the mutation and the mark;
// with 1.5 s, none.
const DefaultSettle = 1500 * time.Millisecond

// Ensure puts the marking policy and binding of configuration's open
// circuit in place, creating them or putting back what was changed, and
// returns when they take effect: Settle after this breaker last wrote
// either. It never waits itself, so that the caller can wait for many
// circuits at once without holding a worker. The zero time means now:
// the webhook matches no CREATE or UPDATE and there is nothing to mark.
func (k *Keeper) Ensure(ctx context.Context, configuration string, o Open) (time.Time, error) {
	policy, binding := Render(configuration, o.Webhook, o.OpenedAt, k.Breaker)
	if policy == nil {
		return time.Time{}, nil // the webhook matches no CREATE or UPDATE: nothing to mark
	}
	var last time.Time
	for _, want := range []client.Object{policy, binding} {
		at, err := k.apply(ctx, want)
		if err != nil {
			return time.Time{}, err
		}
		if at.After(last) {
			last = at
		}
	}
	if last.IsZero() {
		return last, nil
	}
	return last.Add(k.settle()), nil
}

func (k *Keeper) apiReader() client.Reader {
	if k.APIReader != nil {
		return k.APIReader
	}
	return k.Client
}

func (k *Keeper) settle() time.Duration {
	if k.Settle > 0 {
		return k.Settle
	}
	return DefaultSettle
}

// apply makes the live object want. It returns when this breaker last
// wrote it: now when it creates or changes it; otherwise the time this
// process remembers, or, after a restart, the newest managedFields time
// of the guard's field manager, rounded up (it has one-second
// resolution); the zero time when there is none.
func (k *Keeper) apply(ctx context.Context, want client.Object) (time.Time, error) {
	kind := want.GetObjectKind().GroupVersionKind().Kind
	live := want.DeepCopyObject().(client.Object)
	err := k.Client.Get(ctx, client.ObjectKeyFromObject(want), live)
	if apierrors.IsNotFound(err) {
		err = k.Client.Create(ctx, want.DeepCopyObject().(client.Object), client.FieldOwner(circuit.FieldManager))
		if err == nil {
			return k.wrote(kind, want.GetName()), nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return time.Time{}, fmt.Errorf("creating %s %s: %w", kind, want.GetName(), err)
		}
		// The cache lags the apiserver (a quick re-opening finds the
		// object a close just deleted, or one it has not seen yet): read
		// it there, and go on as if the cache had had it.
		err = k.apiReader().Get(ctx, client.ObjectKeyFromObject(want), live)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("reading %s %s: %w", kind, want.GetName(), err)
	}
	if live.GetAnnotations()[circuit.MarkedByAnnotation] != k.Breaker {
		return time.Time{}, fmt.Errorf("%s %s exists and is not kept by this breaker (%s=%q); webhook-guard leaves it alone",
			kind, want.GetName(), circuit.MarkedByAnnotation, live.GetAnnotations()[circuit.MarkedByAnnotation])
	}
	if sameSpec(live, want) && equality.Semantic.DeepEqual(live.GetAnnotations(), want.GetAnnotations()) {
		return k.lastWrite(kind, live), nil
	}
	next := want.DeepCopyObject().(client.Object)
	next.SetResourceVersion(live.GetResourceVersion())
	if err := k.Client.Update(ctx, next, client.FieldOwner(circuit.FieldManager)); err != nil {
		return time.Time{}, fmt.Errorf("restoring %s %s: %w", kind, want.GetName(), err)
	}
	return k.wrote(kind, want.GetName()), nil
}

// wrote remembers that this breaker wrote kind/name now.
func (k *Keeper) wrote(kind, name string) time.Time {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.written == nil {
		k.written = map[string]time.Time{}
	}
	k.written[kind+"/"+name] = now
	return now
}

// lastWrite is when this breaker last wrote live, as apply returns it.
func (k *Keeper) lastWrite(kind string, live client.Object) time.Time {
	k.mu.Lock()
	at, ok := k.written[kind+"/"+live.GetName()]
	k.mu.Unlock()
	if ok {
		return at
	}
	var last time.Time
	for _, f := range live.GetManagedFields() {
		if f.Manager == circuit.FieldManager && f.Time != nil && f.Time.After(last) {
			last = f.Time.Time
		}
	}
	if last.IsZero() {
		return last
	}
	return last.Add(time.Second)
}

func sameSpec(live, want client.Object) bool {
	switch w := want.(type) {
	case *admissionregistrationv1.MutatingAdmissionPolicy:
		return equality.Semantic.DeepEqual(live.(*admissionregistrationv1.MutatingAdmissionPolicy).Spec, w.Spec)
	case *admissionregistrationv1.MutatingAdmissionPolicyBinding:
		return equality.Semantic.DeepEqual(live.(*admissionregistrationv1.MutatingAdmissionPolicyBinding).Spec, w.Spec)
	}
	return false
}

// Sync makes configuration's marking policies exactly those of its open
// circuits (by webhook name): each is ensured, and every other policy
// this breaker keeps for configuration is deleted, binding first. open
// may come from a cache that lags the breaker's own last write, so before
// deleting anything Sync asks fresh for the open circuits as the
// apiserver has them, and deletes only what is closed there too: a
// marking policy never goes while its circuit is open. It returns how
// many objects it deleted.
func (k *Keeper) Sync(ctx context.Context, configuration string, open map[string]Open, fresh func(context.Context) (map[string]Open, error)) (int, error) {
	for _, o := range open {
		// The circuit is open already: a repaired policy is not waited for.
		if _, err := k.Ensure(ctx, configuration, o); err != nil {
			return 0, err
		}
	}
	keep := map[string]bool{}
	for name := range open {
		keep[Name(configuration, name)] = true
	}
	deleted := 0
	bindings := &admissionregistrationv1.MutatingAdmissionPolicyBindingList{}
	policies := &admissionregistrationv1.MutatingAdmissionPolicyList{}
	for _, list := range []client.ObjectList{bindings, policies} {
		if err := k.Client.List(ctx, list, client.MatchingLabels(Labels())); err != nil {
			return deleted, fmt.Errorf("listing marking policies: %w", err)
		}
	}
	var stale []client.Object
	for i := range bindings.Items {
		stale = append(stale, &bindings.Items[i])
	}
	for i := range policies.Items {
		stale = append(stale, &policies.Items[i])
	}
	stale = slices.DeleteFunc(stale, func(obj client.Object) bool {
		a := obj.GetAnnotations()
		return a[circuit.MarkedByAnnotation] != k.Breaker || keep[obj.GetName()] || !isOf(a[circuit.MarksAnnotation], configuration)
	})
	if len(stale) == 0 {
		return 0, nil
	}
	confirmed, err := fresh(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading %s again before removing marking policies: %w", configuration, err)
	}
	for name := range confirmed {
		keep[Name(configuration, name)] = true
	}
	for _, obj := range stale {
		if keep[obj.GetName()] {
			continue
		}
		if err := k.Client.Delete(ctx, obj, client.Preconditions{UID: ptrUID(obj)}); err != nil && !apierrors.IsNotFound(err) {
			return deleted, fmt.Errorf("deleting %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
		deleted++
	}
	return deleted, nil
}

func isOf(target, configuration string) bool {
	return len(target) > len(configuration) && target[:len(configuration)+1] == configuration+"/"
}

func ptrUID(obj client.Object) *types.UID {
	uid := obj.GetUID()
	return &uid
}
