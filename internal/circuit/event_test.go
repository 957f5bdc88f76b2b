package circuit

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

func TestEventNote_boundsAnyNoteToTheApiserversLimit(t *testing.T) {
	short := EventNote("webhook-guard %s %d", "created", 3)
	assert.Equal(t, "webhook-guard created 3", short, "a short note is left as it is")

	exact := strings.Repeat("x", EventNoteLimit)
	assert.Equal(t, exact, EventNote("%s", exact), "a note of exactly the limit is left as it is")

	for _, filler := range []string{"x", "é", "€", "𝄞", "a€"} {
		for _, n := range []int{EventNoteLimit, 100_000} {
			long := EventNote("closed %s: %s", "hook.example.com", strings.Repeat(filler, n))
			assert.LessOrEqual(t, len(long), EventNoteLimit, "filler %q × %d", filler, n)
			assert.Greater(t, len(long), EventNoteLimit-len(truncatedMark)-utf8.UTFMax, "cut no shorter than needed")
			assert.True(t, utf8.ValidString(long), "cut on a rune boundary: filler %q × %d", filler, n)
			assert.True(t, strings.HasPrefix(long, "closed hook.example.com: "), "what comes first survives")
			assert.True(t, strings.HasSuffix(long, truncatedMark), "a shortened note says so")
		}
	}
}
