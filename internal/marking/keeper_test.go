package marking

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// answers is a fake kube-apiserver for the canary: it answers for the
// policies in loaded, with the digest each was loaded with.
type answers struct {
	mu     sync.Mutex
	loaded map[Circuit]string
	// armed are the circuits whose policy the configuration arms.
	armed map[Circuit]bool
	sent  []*corev1.Event
	opts  []metav1.CreateOptions
	// release, when set, holds every canary until it is closed; held
	// counts the circuits the canaries held meanwhile ask for.
	release chan struct{}
	held    int
}

// Create answers as kube-apiserver does: each loaded policy that the
// canary asks for (CanaryLabelFor) adds its annotations.
func (a *answers) Create(ctx context.Context, e *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error) {
	if a.release != nil {
		a.mu.Lock()
		a.held += len(e.Labels) - 1 // the circuits it asks for
		a.mu.Unlock()
		select {
		case <-a.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sent = append(a.sent, e)
	a.opts = append(a.opts, opts)
	out := e.DeepCopy()
	out.Annotations = map[string]string{}
	for c, digest := range a.loaded {
		if e.Labels[CanaryLabelFor(c.Configuration, c.Webhook)] != "true" {
			continue
		}
		out.Annotations[LoadedAnnotation(c.Configuration, c.Webhook)] = digest
		if a.armed[c] {
			out.Annotations[ArmedAnnotation(c.Configuration, c.Webhook)] = "true"
		}
	}
	return out, nil
}

func installed(t *testing.T, cs ...Circuit) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	b := fake.NewClientBuilder().WithScheme(scheme)
	for _, c := range cs {
		p, pb := Render(c.Configuration, c.Webhook)
		b = b.WithObjects(p, pb)
	}
	return b.Build()
}

func TestKeeper_Check(t *testing.T) {
	ctx := context.Background()
	a := Circuit{"injector", "inject.example.com"}
	t.Run("installed as rendered", func(t *testing.T) {
		k := &Keeper{Reader: installed(t, a)}
		require.NoError(t, k.Check(ctx, a))
	})
	t.Run("not installed: says which and how to install it", func(t *testing.T) {
		k := &Keeper{Reader: installed(t)}
		err := k.Check(ctx, a)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "the marking policy of injector/inject.example.com is not installed")
		assert.Contains(t, err.Error(), "guard manifests marking --config")
	})
	t.Run("edited: refused", func(t *testing.T) {
		c := installed(t, a)
		p := &admissionregistrationv1.MutatingAdmissionPolicy{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: Name(a.Configuration, a.Webhook)}, p))
		p.Spec.MatchConditions[0].Expression = "true"
		require.NoError(t, c.Update(ctx, p))
		err := (&Keeper{Reader: c}).Check(ctx, a)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "differs from what this release renders")
	})
	t.Run("the binding re-pointed: refused", func(t *testing.T) {
		c := installed(t, a)
		b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: Name(a.Configuration, a.Webhook)}, b))
		b.Spec.ParamRef.Name = "another"
		require.NoError(t, c.Update(ctx, b))
		err := (&Keeper{Reader: c}).Check(ctx, a)
		require.Error(t, err)
	})
}

// Armed asks a fresh canary every time (arming follows the configuration,
// not the policy), and counts a policy armed only when the canary shows
// this release's digest and the armed annotation.
func TestKeeper_Armed(t *testing.T) {
	ctx := context.Background()
	a, b, c := Circuit{"injector", "a.example.com"}, Circuit{"injector", "b.example.com"}, Circuit{"injector", "c.example.com"}
	fake := &answers{
		loaded: map[Circuit]string{a: Digest(a.Configuration, a.Webhook), b: Digest(b.Configuration, b.Webhook), c: "another-release"},
		armed:  map[Circuit]bool{a: true, c: true},
	}
	k := &Keeper{Reader: installed(t, a, b, c), Canary: fake}

	t.Run("loaded and armed, loaded only, armed by another release", func(t *testing.T) {
		notYet, err := k.Armed(ctx, []Circuit{a, b, c})
		require.NoError(t, err)
		assert.Equal(t, []Circuit{b, c}, notYet)
		require.Len(t, fake.sent, 1, "one canary for all")
		assert.Equal(t, []string{metav1.DryRunAll}, fake.opts[0].DryRun)
	})
	t.Run("each call asks again", func(t *testing.T) {
		fake.armed[b] = true
		notYet, err := k.Armed(ctx, []Circuit{a, b})
		require.NoError(t, err)
		assert.Empty(t, notYet)
		assert.Len(t, fake.sent, 2)
	})
	t.Run("a policy not installed is an error, and no canary", func(t *testing.T) {
		_, err := k.Armed(ctx, []Circuit{{"injector", "d.example.com"}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "is not installed")
		assert.Len(t, fake.sent, 2)
	})
}

// Calls of Armed that come together share canaries: one is in flight at
// a time, and the next carries every circuit asked for meanwhile, so that
// a hundred configurations opening at once send a few canaries, not a
// hundred. Each call still gets the answer for its own circuits.
func TestKeeper_Armed_callsTogetherShareCanaries(t *testing.T) {
	ctx := context.Background()
	const n = 100
	var cs []Circuit
	fake := &answers{loaded: map[Circuit]string{}, armed: map[Circuit]bool{}, release: make(chan struct{})}
	for i := range n {
		c := Circuit{fmt.Sprintf("configuration-%d", i), "hook.example.com"}
		cs = append(cs, c)
		fake.loaded[c] = Digest(c.Configuration, c.Webhook)
		fake.armed[c] = i%2 == 0
	}
	k := &Keeper{Reader: installed(t, cs...), Canary: fake, CanaryGap: time.Millisecond}
	var wg sync.WaitGroup
	results := make([][]Circuit, n)
	errs := make([]error, n)
	for i, c := range cs {
		wg.Go(func() { results[i], errs[i] = k.Armed(ctx, []Circuit{c}) })
	}
	// The first canary is held in flight until every call has asked.
	require.Eventually(t, func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		fake.mu.Lock()
		defer fake.mu.Unlock()
		return k.next != nil && fake.held+len(k.next.circuits) == n
	}, 10*time.Second, time.Millisecond)
	close(fake.release)
	wg.Wait()
	for i, c := range cs {
		require.NoError(t, errs[i])
		if fake.armed[c] {
			assert.Empty(t, results[i], "%s is armed", c.Configuration)
		} else {
			assert.Equal(t, []Circuit{c}, results[i], "%s is loaded but not armed", c.Configuration)
		}
	}
	assert.Len(t, fake.sent, 2, "canaries for %d calls together: the one in flight, and the next", n)
}

// A caller waits no longer than its context allows, and the next call
// asks again.
func TestKeeper_Armed_aCallerWaitsNoLongerThanItsContext(t *testing.T) {
	a := Circuit{"injector", "a.example.com"}
	fake := &answers{loaded: map[Circuit]string{a: Digest(a.Configuration, a.Webhook)}, armed: map[Circuit]bool{a: true}, release: make(chan struct{})}
	k := &Keeper{Reader: installed(t, a), Canary: fake}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := k.Armed(ctx, []Circuit{a})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(fake.release)
	notYet, err := k.Armed(context.Background(), []Circuit{a})
	require.NoError(t, err)
	assert.Empty(t, notYet)
}

// cachedThrough returns c's policy and binding of a as the guard's cache
// holds them (CacheTransform), in a new reader.
func cachedThrough(t *testing.T, c client.Client, a Circuit) client.Client {
	t.Helper()
	return cachedThroughTimes(t, c, a, 1)
}

// cachedThroughTimes is cachedThrough with the transform applied times
// times to each object, as an informer may.
func cachedThroughTimes(t *testing.T, c client.Client, a Circuit, times int) client.Client {
	t.Helper()
	ctx := context.Background()
	p := &admissionregistrationv1.MutatingAdmissionPolicy{}
	b := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	var objs []client.Object
	for _, o := range []client.Object{p, b} {
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: Name(a.Configuration, a.Webhook)}, o))
		o.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
		var out any = o
		for range times {
			var err error
			out, err = CacheTransform(out)
			require.NoError(t, err)
		}
		objs = append(objs, out.(client.Object))
	}
	assert.Empty(t, p.Spec.Variables, "the cache keeps the policy's spec")
	assert.Empty(t, p.ManagedFields, "the cache keeps managedFields")
	assert.Empty(t, b.Spec.PolicyName, "the cache keeps the binding's spec")
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	for _, o := range objs {
		o.SetResourceVersion("")
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

// Through the cache transform, which drops the specs, Check still tells
// an installed policy from an edited one.
func TestKeeper_Check_throughTheCacheTransform(t *testing.T) {
	ctx := context.Background()
	a := Circuit{"injector", "inject.example.com"}
	require.NoError(t, (&Keeper{Reader: cachedThrough(t, installed(t, a), a)}).Check(ctx, a))
	require.NoError(t, (&Keeper{Reader: cachedThroughTimes(t, installed(t, a), a, 2)}).Check(ctx, a),
		"transformed twice, as an informer may: the digest of the dropped spec is kept")

	edited := installed(t, a)
	p := &admissionregistrationv1.MutatingAdmissionPolicy{}
	require.NoError(t, edited.Get(ctx, client.ObjectKey{Name: Name(a.Configuration, a.Webhook)}, p))
	p.Spec.MatchConditions[0].Expression = "true"
	require.NoError(t, edited.Update(ctx, p))
	err := (&Keeper{Reader: cachedThrough(t, edited, a)}).Check(ctx, a)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "differs from what this release renders")

	other, err := CacheTransform(&admissionregistrationv1.MutatingWebhookConfiguration{Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "a"}}})
	require.NoError(t, err)
	assert.Len(t, other.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks, 1, "other objects pass unchanged")
}
