package circuit

import (
	"fmt"
	"unicode/utf8"
)

// EventNoteLimit is the most bytes kube-apiserver accepts in an Event's
// note (message). It rejects a longer Event as invalid, and the Event is
// lost; client-go's recorders do not shorten it.
const EventNoteLimit = 1024

// truncatedMark ends a note EventNote had to shorten.
const truncatedMark = " … (truncated)"

// EventNote formats an Event note and bounds it to EventNoteLimit bytes,
// whatever its arguments hold (error texts, names, annotation values): a
// longer note is cut on a UTF-8 boundary and ends with truncatedMark. Put
// what must survive the cut (the object, a count) before anything
// unbounded.
func EventNote(format string, args ...any) string {
	note := fmt.Sprintf(format, args...)
	if len(note) <= EventNoteLimit {
		return note
	}
	cut := EventNoteLimit - len(truncatedMark)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + truncatedMark
}
