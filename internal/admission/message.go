package admission

import (
	"fmt"
	"strings"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
)

// The denial message is written twice, once here in Go and once in CEL for
// the ValidatingAdmissionPolicy (messageCEL below), side by side so that a
// change to one is a change to the other. TestPolicy_CEL_agreesWithGo
// evaluates both on every case of the admissiontest table and requires the
// same string.

// Paths of the owned fields, as the messages name them.
const circuitPath = "metadata.annotations[" + circuit.Annotation + "]"

func failurePolicyPath(webhook string) string {
	return "webhooks[name=" + webhook + "].failurePolicy"
}

func bypassPath(webhook string) string {
	return "webhooks[name=" + webhook + "].matchConditions[name=" + circuit.BypassCondition + "]"
}

// denial holds the facts of one denial.
type denial struct {
	kind                             circuit.Kind
	configuration, username, breaker string
	// changes are the owned fields changed, "path (what happened)".
	changes []string
	// notes describe the open circuits of managed webhooks (circuit.Note).
	notes []string
	// overwrite is whether the stored object already carries the override
	// annotation, so kubectl annotate needs --overwrite.
	overwrite bool
}

// message renders the denial on one line.
func (d denial) message() string {
	var b strings.Builder
	fmt.Fprintf(&b, `%s "%s": user "%s" may not change fields owned by webhook-guard (%s): %s.`,
		d.kind.Singular(), d.configuration, d.username, d.breaker, strings.Join(d.changes, ", "))
	if len(d.notes) > 0 {
		b.WriteString(" " + strings.Join(d.notes, "; ") + ".")
	}
	fmt.Fprintf(&b, " To hand this configuration over, run: %s and retry; remove the annotation to give it back to webhook-guard.",
		AnnotateCommand(d.kind, d.configuration, d.overwrite))
	return oneLine(b.String())
}

// messageCEL is message in CEL, from the policy's variables.
func messageCEL(breaker string) string {
	return oneLineCEL(strings.Join([]string{
		`variables.kindName + ' "' + object.metadata.name + '": user "' + request.userInfo.username + '" may not change fields owned by webhook-guard (' + ` + circuit.QuoteCEL(breaker) + ` + '): ' + variables.ownedChanges.join(', ') + '.'`,
		`(size(variables.openNotes) > 0 ? ' ' + variables.openNotes.join('; ') + '.' : '')`,
		`' To hand this configuration over, run: ' + ` + annotateCommandCEL(`variables.kindName`, `object.metadata.name`, `(variables.overrideKey in variables.oldAnnotations)`),
		`' and retry; remove the annotation to give it back to webhook-guard.'`,
	}, "\n+ "))
}

// breakerOwns lists, in a denial of the breaker's identity, what it may
// change.
const breakerOwns = "the failurePolicy and the bypass matchCondition of managed webhooks (its approved targets), and no metadata but its record (" + circuitPath + ")"

// breakerDenial is the message for the breaker's identity changing more
// than it owns; other lists what else the request changes, as
// breakerChanges does.
func breakerDenial(kind circuit.Kind, name, breaker string, other []string) string {
	return oneLine(fmt.Sprintf(`%s "%s": webhook-guard's own identity (%s) may change only the fields it owns: %s; this request also changes %s.`,
		kind.Singular(), name, breaker, breakerOwns, strings.Join(other, ", ")))
}

// breakerDenialCEL is breakerDenial in CEL, from the policy's variables.
func breakerDenialCEL(breaker string) string {
	return oneLineCEL(`variables.kindName + ' "' + object.metadata.name + '": webhook-guard\'s own identity (' + ` + circuit.QuoteCEL(breaker) +
		` + ') may change only the fields it owns: ' + ` + circuit.QuoteCEL(breakerOwns) + ` + '; this request also changes ' + variables.breakerChanges.join(', ') + '.'`)
}

// releaserOwns lists, in a denial of the release identity, what it may
// change: what "guard release" changes.
const releaserOwns = "the failurePolicy of managed webhooks, only back to the originalFailurePolicy of their circuit record entry, " +
	"the bypass matchCondition of managed webhooks, and no metadata but the circuit record (" + circuitPath + "), only removing entries, " +
	"the arming annotation (metadata.annotations[" + circuit.ArmingAnnotation + "]) " +
	"and the override annotation (metadata.annotations[" + circuit.OverrideAnnotation + "])"

// releaserCreates ends a denial of the release identity's CREATE.
const releaserCreates = "; it creates no configuration."

// releaserDenial is the message for the release identity creating a
// managed configuration (other is nil) or changing more than a release
// changes; other lists what else the request changes, as releaserChanges
// does.
func releaserDenial(kind circuit.Kind, name, releaser string, other []string) string {
	tail := releaserCreates
	if other != nil {
		tail = "; this request also changes " + strings.Join(other, ", ") + "."
	}
	return oneLine(fmt.Sprintf(`%s "%s": webhook-guard's release identity (%s) may change only what a release restores: %s%s`,
		kind.Singular(), name, releaser, releaserOwns, tail))
}

// releaserDenialCEL is releaserDenial in CEL, from the policy's variables:
// oldObject is null on CREATE.
func releaserDenialCEL(releaser string) string {
	return oneLineCEL(`variables.kindName + ' "' + object.metadata.name + '": webhook-guard\'s release identity (' + ` + circuit.QuoteCEL(releaser) +
		` + ') may change only what a release restores: ' + ` + circuit.QuoteCEL(releaserOwns) +
		` + (oldObject == null ? ` + circuit.QuoteCEL(releaserCreates) + ` : '; this request also changes ' + variables.releaserChanges.join(', ') + '.')`)
}

// AnnotateCommand returns the kubectl command that hands configuration name
// of kind over to its administrators. overwrite adds --overwrite, needed
// when the stored object already carries the annotation (for example with
// an empty value).
func AnnotateCommand(kind circuit.Kind, name string, overwrite bool) string {
	cmd := fmt.Sprintf(`kubectl annotate %s %s %s="<reason>"`, kind.Singular(), name, circuit.OverrideAnnotation)
	if overwrite {
		cmd += " --overwrite"
	}
	return cmd
}

func annotateCommandCEL(kind, name, overwrite string) string {
	return fmt.Sprintf(`'kubectl annotate ' + %s + ' ' + %s + ' %s="<reason>"' + (%s ? ' --overwrite' : '')`,
		kind, name, circuit.OverrideAnnotation, overwrite)
}

// oneLine keeps a message on one line: the apiserver drops a CEL message
// with a line break, and both renderings must say the same.
func oneLine(s string) string {
	return strings.NewReplacer("\n", " ", "\r", " ", "\t", " ").Replace(s)
}

func oneLineCEL(expr string) string {
	return "(" + expr + `).replace('\n', ' ').replace('\r', ' ').replace('\t', ' ')`
}
