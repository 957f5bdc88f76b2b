package status

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	statusapi "github.com/webhook-guard/webhook-guard/internal/status"
)

// objectRow reads a target's circuit state from its configuration.
func objectRow(ctx context.Context, c client.Reader, t config.Target) statusapi.Row {
	row := statusapi.Row{Kind: string(t.Kind), Configuration: t.Configuration, Webhook: t.Webhook, State: stateClosed, Mode: string(t.Mode)}
	obj := t.Kind.New()
	if err := c.Get(ctx, client.ObjectKey{Name: t.Configuration}, obj); err != nil {
		row.State = "Unknown"
		if apierrors.IsNotFound(err) {
			row.State, row.Problem = stateMissing, "configuration not found"
		} else {
			row.Problem = err.Error()
		}
		return row
	}
	annotations := obj.GetAnnotations()
	if annotations[circuit.OverrideAnnotation] != "" {
		row.State = "HandedOff"
		row.Problem = fmt.Sprintf("override: %s", annotations[circuit.OverrideAnnotation])
		// The entry keeps the original until a write puts it back; a
		// configuration handed off by a version that dropped the entry
		// has it only in the HandedOff Event.
		if rec, err := circuit.Decode(annotations); err == nil {
			if e, open := rec[t.Webhook]; open {
				row.Owner, row.Original = e.By, decide.HandOffOriginal(e)
				if e.HandedOff() {
					row.Problem += fmt.Sprintf("; handed off at %s, the record keeps the %s", e.HandedOffAt.UTC().Format(time.RFC3339), row.Original)
				} else {
					row.Problem += "; not released by the breaker yet; " + row.Original
				}
				return row
			}
		}
		original, ignored, err := handedOffOriginal(ctx, c, t, obj.GetUID())
		switch {
		case err != nil:
			row.Problem += fmt.Sprintf("; the original failurePolicy is in its HandedOff Event, which could not be read (%v): %s", err, handedOffEventsCommand(t))
		case original != "":
			row.Original = original
			row.Problem += "; " + original
		}
		if ignored > 0 {
			row.Problem += fmt.Sprintf("; warning: ignored %d HandedOff Events not reported by %s for this configuration's UID %s: %s",
				ignored, circuit.ReportingController, obj.GetUID(), handedOffEventsCommand(t))
		}
		return row
	}
	rec, err := circuit.Decode(annotations)
	if err != nil {
		row.State, row.Problem = "Unknown", err.Error()
		return row
	}
	if e, open := rec[t.Webhook]; open {
		row.State, row.Mode, row.OpenedBy, row.Owner = stateOpen, string(e.Mode), e.Signal, e.By
		row.Since = fmt.Sprintf("%s (%s)", e.OpenedAt.UTC().Format(time.RFC3339), time.Since(e.OpenedAt.Time).Round(time.Second))
		if e.HandedOff() {
			row.Original = decide.HandOffOriginal(e)
			row.Problem = fmt.Sprintf("handed back after a handoff at %s: held open in Ignore until the webhook is healthy, then its %s is restored",
				e.HandedOffAt.UTC().Format(time.RFC3339), row.Original)
		}
	}
	return row
}

// handedOffOriginal finds the latest HandedOff Event about t's webhook on
// its configuration (in circuit.EventsNamespace, where the service puts
// Events about cluster-scoped objects; releases before it put them in
// default, which it does not read) and returns what it says the original was
// (decide.HandOffOriginal), followed by where it read that: "" when there
// is none (Events expire, an hour after the handoff by default). It
// believes only an Event about this configuration, by UID, reported by
// the guard (circuit.ReportingController): anyone who may create Events
// in that namespace can write one with the reason and the name, and an earlier
// configuration of that name has its own. It counts the HandedOff Events
// about that name it ignored for either reason. Neither field is
// authenticated by the API: the result names the Event, so that a
// doubtful reader can check who created it in the audit log.
func handedOffOriginal(ctx context.Context, c client.Reader, t config.Target, uid types.UID) (original string, ignored int, err error) {
	events := &corev1.EventList{}
	if err := c.List(ctx, events, client.InNamespace(circuit.EventsNamespace), client.MatchingFields{
		"involvedObject.kind": t.Kind.ObjectKind(), "involvedObject.name": t.Configuration, "reason": string(decide.HandedOff),
	}); err != nil {
		return "", 0, err
	}
	var latest *corev1.Event
	var latestAt time.Time
	what := ""
	for i := range events.Items {
		ev := &events.Items[i]
		if uid == "" || ev.InvolvedObject.UID != uid || ev.ReportingController != circuit.ReportingController {
			ignored++
			continue
		}
		_, rest, ok := strings.Cut(ev.Message, " released "+t.Webhook+" ("+decide.OriginalPrefix)
		if !ok {
			continue // about another webhook of the configuration
		}
		if at := eventTime(*ev); latest == nil || at.After(latestAt) {
			latest, latestAt = ev, at
			what, _, _ = strings.Cut(rest, ")")
		}
	}
	if latest == nil {
		return "", ignored, nil
	}
	return fmt.Sprintf("%s%s (from Event %s/%s, reported by %s at %s)", decide.OriginalPrefix, what,
		latest.Namespace, latest.Name, latest.ReportingController, latestAt.UTC().Format(time.RFC3339)), ignored, nil
}

// eventTime is when ev last happened, whichever API wrote it.
func eventTime(ev corev1.Event) time.Time {
	at := ev.CreationTimestamp.Time
	for _, t := range []time.Time{ev.EventTime.Time, ev.LastTimestamp.Time} {
		if t.After(at) {
			at = t
		}
	}
	if ev.Series != nil && ev.Series.LastObservedTime.After(at) {
		at = ev.Series.LastObservedTime.Time
	}
	return at
}

// handedOffEventsCommand is the kubectl command that lists t's HandedOff
// Events.
func handedOffEventsCommand(t config.Target) string {
	return fmt.Sprintf("kubectl get events -n %s --field-selector involvedObject.kind=%s,involvedObject.name=%s,reason=%s",
		circuit.EventsNamespace, t.Kind.ObjectKind(), t.Configuration, decide.HandedOff)
}
