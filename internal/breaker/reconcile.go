package breaker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakermetrics"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

// ConfigurationReconciler writes the circuit's transitions to the target webhook
// configurations of one kind, one JSON patch per step, with a
// resourceVersion precondition. It is level-based: from one snapshot of
// the object (seen through circuit.View) and the evidence, decide.NextStep
// says what to write, and the reconciler writes it, so a repeated or late
// reconcile is harmless.
type ConfigurationReconciler struct {
	// Kind is the kind of configuration it writes.
	Kind circuit.Kind
	// Client reads from the cache and writes.
	Client client.Client
	// Targets are the approved webhooks (those of other kinds are ignored).
	Targets []config.Target
	// State holds the probe counts.
	State *State
	// Recorder emits Events on the configuration.
	Recorder recorder.EventRecorder
	// Metrics count transitions, conflicts and errors.
	Metrics *breakermetrics.Metrics
	// Clock stamps openedAt. Default: the real clock.
	Clock clock.PassiveClock
	// Signer signs the entries it writes: the breaker's username (from
	// SelfSubjectReview) and, for a named instance, the instance
	// (identity/instance).
	Signer string
	// Marker, when set (mutating configurations, where the apiserver
	// serves MutatingAdmissionPolicies), checks before the write that
	// opens a circuit that its marking policy, installed by an
	// administrator and armed by that write, is in place and loaded.
	Marker *marking.Keeper

	mu sync.Mutex
	// memory holds what NextStep remembers of each configuration, by
	// name (decide.Memory).
	memory map[string]decide.Memory
	// ownWrites holds, by configuration name, the object as this
	// reconciler last wrote it, until the cache shows that write.
	ownWrites map[string]ownWrite
}

// ownWrite is an object as the reconciler wrote it, and the
// resourceVersions that write superseded: while the cache still shows one
// of those, the written object is the configuration as it is (no one
// else wrote since, or the write's precondition fails with a Conflict).
type ownWrite struct {
	obj        client.Object
	superseded []string
}

// Reconcile takes one step of one configuration (reconcileOnce). A conflict is
// decided again from the cache (retry.RetryOnConflict's backoff). An
// opening that waits for its marking policies to take effect is
// requeued, so the worker is free meanwhile.
func (r *ConfigurationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// A configuration with no target is reconciled too: if it carries a
	// record (a target removed while its circuit was open), Plan closes it.
	targets := targetsOf(r.Targets, r.Kind, req.Name)
	var wait time.Duration
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		wait, err = r.reconcileOnce(ctx, req.Name, targets)
		if apierrors.IsConflict(err) {
			// Someone else wrote: decide again from the cache, not from a
			// live read, which the outage's saturated apiserver would
			// hold. Until the cache shows that write each try conflicts,
			// and the write's watch event brings the next reconcile.
			r.Metrics.WriteConflicts.Inc()
			logf.FromContext(ctx).V(1).Info("Write conflict; reading again and deciding again")
			r.wrote(req.Name, nil, nil)
		}
		return err
	})
	if err != nil {
		r.Metrics.Reconciles.WithLabelValues(breakermetrics.ReconcileFailed).Inc()
		return ctrl.Result{}, fmt.Errorf("updating %s %s: %w", r.Kind.ObjectKind(), req.Name, err)
	}
	return ctrl.Result{RequeueAfter: wait}, nil
}

// reconcileOnce reads one snapshot of the configuration, asks
// decide.NextStep for the one step to take, and takes it: a write of
// transitions, a write that arms marking before an opening, or a wait. It
// returns how long to wait before deciding again.
func (r *ConfigurationReconciler) reconcileOnce(ctx context.Context, name string, targets []config.Target) (time.Duration, error) {
	cur, s, err := r.read(ctx, name)
	if err != nil || cur == nil {
		if cur == nil && err == nil {
			r.syncGauges(targets, nil)
		}
		return 0, err
	}
	in := r.State.Inputs(targets, now(r.Clock), r.Signer, Generation(s.View))
	step, err := r.nextStep(ctx, cur, s, in)
	if err != nil {
		return 0, err
	}
	switch {
	case step.Kind == decide.StepArm:
		return step.After, r.patch(ctx, cur, s.View, step, targets)
	case step.Kind == decide.StepWrite:
		return r.writeStep(ctx, cur, s.View, step, in)
	case step.Why == decide.WaitUnreadable:
		r.unreadable(cur, s, targets, step.Err)
	case step.Why == decide.WaitNothing:
		r.Metrics.Reconciles.WithLabelValues(breakermetrics.ReconcileUnchanged).Inc()
		r.syncGauges(targets, &s)
	default:
		logf.FromContext(ctx).V(1).Info("Waiting", "why", step.Why, "for", step.After, "transitions", step.Coalesced)
	}
	return step.After, nil
}

// nextStep gathers what decide.NextStep needs besides the snapshot and
// the evidence (whether each marking policy is in place), asks it, keeps
// its memory and reports each marking policy not in place. When the step
// is to ask a canary, it sends that canary and asks once more.
func (r *ConfigurationReconciler) nextStep(ctx context.Context, cur client.Object, s decide.Snapshot, in decide.Inputs) (decide.Step, error) {
	if s.ArmedErr != nil && r.Marker != nil {
		// Only the breaker writes them, and they only arm marking: the
		// step rewrites them.
		logf.FromContext(ctx).Info("Rewriting unreadable arming entries", "error", s.ArmedErr)
	}
	mem := r.remembered(s.View.Name)
	mk := r.marking(ctx, s, in)
	step, err := decide.NextStep(s, in, mem, mk)
	if err == nil && step.Why == decide.WaitCanary {
		mem = r.canary(ctx, s.View, step.Ask, step.AskTimeout, mem)
		mk.Asked = true
		step, err = decide.NextStep(s, in, mem, mk)
	}
	if err != nil {
		return step, err
	}
	r.remember(s.View.Name, step.Memory)
	for _, hook := range slices.Sorted(maps.Keys(step.MarkingFailed)) {
		r.markingFailed(cur, step.MarkingFailed[hook])
	}
	return step, nil
}

// unreadable reports a record NextStep cannot read: nothing is changed on
// the configuration until it is repaired or handed over.
func (r *ConfigurationReconciler) unreadable(cur client.Object, s decide.Snapshot, targets []config.Target, err error) {
	r.Metrics.Reconciles.WithLabelValues(breakermetrics.ReconcileUnreadable).Inc()
	r.Recorder.Eventf(cur, nil, corev1.EventTypeWarning, "RecordUnreadable", "Reconcile",
		"webhook-guard changes nothing on this configuration until the record is repaired: %v", err)
	r.syncGauges(targets, &s)
}

// writeStep writes step; an invalid write is written one webhook at a
// time (writeOneByOne).
func (r *ConfigurationReconciler) writeStep(ctx context.Context, cur client.Object, view *circuit.ConfigView, step decide.Step, in decide.Inputs) (time.Duration, error) {
	err := r.write(ctx, cur, view, step, in.Targets)
	switch {
	case err == nil:
		return step.After, nil
	case !apierrors.IsInvalid(err):
		return 0, err
	}
	return 0, r.writeOneByOne(ctx, view.Name, step.Changes, in)
}

// writeOneByOne writes changes one webhook at a time. The apiserver
// refused them together as invalid (for example the bypass marker would
// exceed a webhook's matchConditions limit); retrying them as they are
// would fail forever and hold back every other webhook of the
// configuration, so the refused ones are left as they are until the
// configuration changes.
func (r *ConfigurationReconciler) writeOneByOne(ctx context.Context, name string, changes []decide.Change, in decide.Inputs) error {
	for _, c := range changes {
		if c.Webhook == "" {
			continue
		}
		cur, s, err := r.read(ctx, name)
		if err != nil || cur == nil {
			return err
		}
		one := in
		one.Only = c.Webhook
		step, err := r.nextStep(ctx, cur, s, one)
		if err != nil || step.Kind != decide.StepWrite || len(step.Changes) == 0 {
			continue // armed and written by the next reconcile
		}
		err = r.write(ctx, cur, s.View, step, in.Targets)
		switch {
		case apierrors.IsInvalid(err):
			for _, t := range in.Targets {
				if t.Webhook == c.Webhook {
					r.State.Refuse(t.Key(), Generation(s.View))
				}
			}
			r.Metrics.WriteErrors.Inc()
			r.Recorder.Eventf(cur, nil, corev1.EventTypeWarning, "WriteRefused", "Update",
				"the apiserver refused %s for %s as invalid; webhook-guard leaves this webhook as it is until the configuration changes: %v", c.Kind, c.Webhook, err)
		case err != nil:
			return err
		}
	}
	return nil
}

// remembered is what NextStep remembers of the configuration name.
func (r *ConfigurationReconciler) remembered(name string) decide.Memory {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.memory[name]
}

// remember keeps m as what NextStep remembers of the configuration name.
func (r *ConfigurationReconciler) remember(name string, m decide.Memory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.memory == nil {
		r.memory = map[string]decide.Memory{}
	}
	r.memory[name] = m
}

// read returns name's object and its snapshot; nil and no error when it
// does not exist. Read from the cache (r.Client), it is the object as
// this reconciler last wrote it while the cache has not caught up with
// that write: deciding from the cache's older copy would only earn a
// Conflict, and a mass failure's reconciles follow each other faster than
// the watch delivers their writes.
func (r *ConfigurationReconciler) read(ctx context.Context, name string) (client.Object, decide.Snapshot, error) {
	cur := r.Kind.New()
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, cur); err != nil {
		if apierrors.IsNotFound(err) {
			r.wrote(name, nil, nil)
			return nil, decide.Snapshot{}, nil
		}
		return nil, decide.Snapshot{}, fmt.Errorf("reading: %w", err)
	}
	if own := r.ownWrite(name, cur.GetResourceVersion()); own != nil {
		cur = own
	}
	view, err := circuit.View(cur)
	if err != nil {
		return nil, decide.Snapshot{}, err
	}
	return cur, decide.Read(view), nil
}

// wrote notes written, name's object as this reconciler wrote it over
// from, the object it read; nil forgets name's last write.
func (r *ConfigurationReconciler) wrote(name string, from, written client.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if written == nil {
		delete(r.ownWrites, name)
		return
	}
	if r.ownWrites == nil {
		r.ownWrites = map[string]ownWrite{}
	}
	w := ownWrite{obj: written.DeepCopyObject().(client.Object)}
	if prev, ok := r.ownWrites[name]; ok && prev.obj.GetResourceVersion() == from.GetResourceVersion() {
		// Written over the previous write, which the cache may not show
		// either.
		w.superseded = prev.superseded
	}
	w.superseded = append(slices.Clip(w.superseded), from.GetResourceVersion())
	r.ownWrites[name] = w
}

// ownWrite returns a copy of name's object as this reconciler last wrote
// it when the cache, at cached, shows a version that write superseded;
// otherwise nil, and the cache has caught up (or someone else wrote).
func (r *ConfigurationReconciler) ownWrite(name, cached string) client.Object {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.ownWrites[name]
	if !ok {
		return nil
	}
	if slices.Contains(w.superseded, cached) {
		return w.obj.DeepCopyObject().(client.Object)
	}
	delete(r.ownWrites, name)
	return nil
}

// SetupWithManager watches the target configurations of its kind, every
// configuration of its kind that carries a circuit record (so that a record
// left by a removed target is closed), and the probe runner's triggers. The controller is named
// "breaker" for mutating configurations and "breaker-validating" for
// validating ones.
func (r *ConfigurationReconciler) SetupWithManager(mgr ctrl.Manager, trigger <-chan event.GenericEvent) error {
	names := map[string]bool{}
	for _, t := range r.Targets {
		if t.Kind == r.Kind {
			names[t.Configuration] = true
		}
	}
	isTarget := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, record := o.GetAnnotations()[circuit.Annotation]
		return names[o.GetName()] || record
	})
	name := "breaker"
	if r.Kind == circuit.KindValidating {
		name = "breaker-validating"
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named(name).
		// Configurations are independent (one is never reconciled twice
		// at once), and an opening may wait for its marking policy: many
		// configurations failing together must not queue behind one worker.
		WithOptions(controller.Options{MaxConcurrentReconciles: MaxConcurrentReconciles}).
		For(r.Kind.New(), builder.WithPredicates(isTarget)).
		WatchesRawSource(source.Channel(trigger, &handler.EnqueueRequestForObject{}))
	if r.Marker != nil {
		// A marking policy installed, changed or deleted brings its
		// configuration's reconcile: an opening that waited for it goes
		// on, or is refused.
		toConfiguration := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []ctrl.Request {
			a := o.GetAnnotations()
			configuration, _, ok := strings.Cut(a[circuit.MarksAnnotation], "/")
			if !ok {
				return nil
			}
			return []ctrl.Request{{NamespacedName: types.NamespacedName{Name: configuration}}}
		})
		b = b.Watches(&admissionregistrationv1.MutatingAdmissionPolicy{}, toConfiguration).
			Watches(&admissionregistrationv1.MutatingAdmissionPolicyBinding{}, toConfiguration)
	}
	return b.Complete(r)
}

// MaxConcurrentReconciles is how many configurations of one kind the
// breaker writes at once.
const MaxConcurrentReconciles = 16

// now reads c, or the real clock when c is nil.
func now(c clock.PassiveClock) time.Time {
	if c == nil {
		return time.Now()
	}
	return c.Now()
}
