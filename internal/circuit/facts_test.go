package circuit

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"
)

const hook = "slow.mutator.example.com"

// encoded returns the annotation text the breaker writes for rec.
func encoded(t *testing.T, rec Record) string {
	t.Helper()
	text, err := rec.Text()
	require.NoError(t, err)
	return text
}

func randomEntry(r *rand.Rand) Entry {
	policies := []*admissionregistrationv1.FailurePolicyType{nil, ptr.To(admissionregistrationv1.Fail), ptr.To(admissionregistrationv1.Ignore)}
	modes := []Mode{ModeIgnore, ModeBypass}
	reasons := []string{"timeout", "refused", "tls", "http-status", "bad-response", "no-route", ""}
	return Entry{
		UID:                   types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", r.Uint32(), r.Uint64()&0xffffffffffff)),
		Mode:                  modes[r.IntN(len(modes))],
		OpenedAt:              metav1.NewTime(time.Unix(r.Int64N(4e9), 0).UTC()),
		Reason:                reasons[r.IntN(len(reasons))],
		OriginalFailurePolicy: policies[r.IntN(len(policies))],
	}
}

// TestFact_Read_agreesWithTheCodec checks, on records written by the real
// encoder, that every fact read from the text is the value the codec
// decodes: the accessors and the Entry type describe one schema.
func TestFact_Read_agreesWithTheCodec(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	names := []string{hook, "other.mutator.example.com", "a.b.c", "slowxmutator.example.com"}
	for i := 0; i < 500; i++ {
		rec := Record{}
		for _, n := range names[:1+r.IntN(len(names))] {
			rec[n] = randomEntry(r)
		}
		text := encoded(t, rec)
		decoded, err := Decode(map[string]string{Annotation: text})
		require.NoError(t, err)
		for _, n := range names {
			e, ok := decoded[n]
			require.Equal(t, ok, HasEntry(text, n), "HasEntry(%s) in %s", n, text)
			if !ok {
				assert.Empty(t, EntryText(text, n))
				continue
			}
			entry := EntryText(text, n)
			assert.Equal(t, e.OpenedAt.UTC().Format(time.RFC3339), FactOpenedAt.Read(entry))
			assert.Equal(t, PolicyString(e.OriginalFailurePolicy), FactOriginalFailurePolicy.Show(entry))
			assert.Equal(t, string(e.Mode), FactMode.Read(entry))
			assert.Equal(t, e.Reason, FactReason.Read(entry))
		}
	}
}

func TestNote_renders(t *testing.T) {
	text := encoded(t, Record{hook: {
		UID: "u", Mode: ModeBypass, Reason: "timeout",
		OpenedAt: metav1.NewTime(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)),
	}})
	assert.Equal(t, "webhooks[name="+hook+"]: circuit open since 2026-11-30T10:00:00Z, original failurePolicy unset, mode Bypass, reason timeout", Note(EntryText(text, hook), hook))
	assert.Equal(t, "webhooks[name=x.y.z]: circuit open since an unknown time, original failurePolicy unset, mode unknown, reason unknown", Note(EntryText(`{"x.y.z":{}}`, "x.y.z"), "x.y.z"))
}

// hostileRecords are texts someone could write by hand into the annotation.
var hostileRecords = []string{
	``,
	`garbage`,
	`{}`,
	`null`,
	`{"` + hook + `":null}`,
	`{"` + hook + `":{"openedAt":"x\ny","mode":"Bypass"}}`,
	`{"` + hook + `":{"openedAt":"` + strings.Repeat("9", 65) + `","mode":"Ignore"}}`,
	`{"` + hook + `":{"openedAt":"` + strings.Repeat("9", 64) + `","mode":"Ignore"}}`,
	`{"` + hook + `":{"reason":"a\"b","originalFailurePolicy":"Fail"}}`,
	`{"` + hook + `":{"reason":"été ✓","originalFailurePolicy":null}}`,
	`{"slowxmutator.example.com":{"mode":"Bypass"}}`,
	`{"` + hook + `": {"mode":"Bypass"}}`,
	`{"` + hook + `":{"mode":"Bypass","mode":"Ignore"}}`,
	`{"` + hook + `":{"nested":{"mode":"Bypass"},"reason":"timeout"}}`,
}

// TestFact_CEL_agreesWithGo evaluates the CEL accessors with
// kube-apiserver's own CEL environment (which provides the regex library)
// and compares them with the Go accessors, on encoded and hostile texts.
func TestFact_CEL_agreesWithGo(t *testing.T) {
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	require.NoError(t, err)
	env, err = env.Extend(cel.Variable("record", cel.StringType), cel.Variable("webhook", cel.StringType))
	require.NoError(t, err)
	eval := func(expr string, record, webhook string) any {
		t.Helper()
		ast, iss := env.Compile(expr)
		require.NoError(t, iss.Err(), expr)
		prg, err := env.Program(ast)
		require.NoError(t, err)
		out, _, err := prg.Eval(map[string]any{"record": record, "webhook": webhook})
		require.NoError(t, err, expr)
		return out.Value()
	}

	r := rand.New(rand.NewPCG(3, 4))
	texts := append([]string(nil), hostileRecords...)
	for i := 0; i < 20; i++ {
		texts = append(texts, encoded(t, Record{hook: randomEntry(r), "other.example.com": randomEntry(r)}))
	}
	for _, text := range texts {
		for _, n := range []string{hook, "other.example.com"} {
			assert.Equal(t, HasEntry(text, n), eval(HasEntryCEL("record", "webhook"), text, n), "HasEntry %q in %s", n, text)
			entry := EntryText(text, n)
			assert.Equal(t, entry, eval(EntryTextCEL("record", "webhook"), text, n), "entry %q in %s", n, text)
			assert.Equal(t, entry, eval(EntryTextOfCEL("record", NamePattern(n)), text, n), "entry %q in %s, constant pattern", n, text)
			// [.] is no wildcard: an entry whose name has an x where n
			// has a '.' is not n's.
			renamed := strings.ReplaceAll(text, `"`+n+`"`, `"`+strings.Replace(n, ".", "x", 1)+`"`)
			assert.Equal(t, EntryText(renamed, n), eval(EntryTextOfCEL("record", NamePattern(n)), renamed, n), "entry %q in %s", n, renamed)
			for _, f := range []Fact{FactOpenedAt, FactOriginalFailurePolicy, FactMode, FactReason} {
				assert.Equal(t, f.Read(entry), eval(f.CEL(EntryTextCEL("record", "webhook")), text, n), "%s of %q in %s", f.Key, n, text)
				assert.Equal(t, f.Show(entry), eval(f.ShowCEL(EntryTextCEL("record", "webhook")), text, n), "%s of %q in %s", f.Key, n, text)
			}
			assert.Equal(t, Note(entry, n), eval(NoteCEL(EntryTextCEL("record", "webhook"), "webhook"), text, n), "note of %q in %s", n, text)
		}
	}
}

// TestOnlyEntriesOf: a record holds only entries of the stored one when
// the encoder could have written it by removing entries from it; the CEL
// rendering, evaluated with kube-apiserver's environment, agrees on these
// and on every pair of hostile and encoded texts.
func TestOnlyEntriesOf(t *testing.T) {
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	require.NoError(t, err)
	env, err = env.Extend(cel.Variable("record", cel.StringType), cel.Variable("stored", cel.StringType))
	require.NoError(t, err)
	ast, iss := env.Compile(OnlyEntriesOfCEL("record", "stored"))
	require.NoError(t, iss.Err())
	prg, err := env.Program(ast)
	require.NoError(t, err)
	onlyEntriesOfCEL := func(record, stored string) any {
		t.Helper()
		out, _, err := prg.Eval(map[string]any{"record": record, "stored": stored})
		require.NoError(t, err)
		return out.Value()
	}

	r := rand.New(rand.NewPCG(5, 6))
	a, b := randomEntry(r), randomEntry(r)
	forged := a
	forged.OriginalFailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	if a.OriginalFailurePolicy != nil && *a.OriginalFailurePolicy == admissionregistrationv1.Ignore {
		forged.OriginalFailurePolicy = ptr.To(admissionregistrationv1.Fail)
	}
	two := encoded(t, Record{hook: a, "other.example.com": b})
	one := encoded(t, Record{hook: a})
	other := encoded(t, Record{"other.example.com": b})
	for name, c := range map[string]struct {
		record, stored string
		want           bool
	}{
		"the stored record itself":                          {two, two, true},
		"one entry removed":                                 {one, two, true},
		"the other entry removed":                           {other, two, true},
		"every entry removed, as {}":                        {`{}`, two, true},
		"the entries reordered":                             {"{" + strings.TrimPrefix(strings.TrimSuffix(other, "}"), "{") + "," + strings.TrimPrefix(strings.TrimSuffix(one, "}"), "{") + "}", two, true},
		"an entry twice":                                    {"{" + strings.Trim(one, "{}") + "}," + strings.Trim(one, "{}") + "}}", one, true},
		"an entry added":                                    {two, one, false},
		"an entry's original changed":                       {encoded(t, Record{hook: forged}), one, false},
		"an entry moved to another webhook":                 {strings.Replace(one, hook, "other.example.com", 1), two, false},
		"a space before an entry's colon":                   {strings.Replace(one, `":{`, `" :{`, 1), two, false},
		"a space after the opening brace":                   {"{ " + strings.TrimPrefix(one, "{"), two, false},
		"an escaped character in a name":                    {strings.Replace(one, "slow.", `slow\u002e`, 1), two, false},
		"an upper-case name":                                {strings.Replace(one, "slow.", "SLOW.", 1), strings.Replace(two, "slow.", "SLOW.", 1), false},
		"a nested object":                                   {`{"` + hook + `":{"x":{}}}`, `{"` + hook + `":{"x":{}}}`, false},
		"no record text at all":                             {``, two, false},
		"not a record":                                      {`garbage`, `garbage`, false},
		"null":                                              {`null`, two, false},
		"an entry of a stored text the codec did not write": {`{"a.b.c":{"mode":"Bypass"}}`, `{"x.y.z":{"note":"q"a.b.c":{"mode":"Bypass"}}`, true},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, c.want, OnlyEntriesOf(c.record, c.stored))
			assert.Equal(t, c.want, onlyEntriesOfCEL(c.record, c.stored))
		})
	}

	texts := append([]string{two, one, other}, hostileRecords...)
	for _, record := range texts {
		for _, stored := range texts {
			assert.Equal(t, OnlyEntriesOf(record, stored), onlyEntriesOfCEL(record, stored), "%s of %s", record, stored)
		}
	}
}

func TestFact_Read_boundsAndRefusals(t *testing.T) {
	read := func(f Fact, i int) string { return f.Read(EntryText(hostileRecords[i], hook)) }
	assert.Equal(t, strings.Repeat("9", 64), read(FactOpenedAt, 7))
	assert.Empty(t, read(FactOpenedAt, 6), "longer than the bound reads as absent")
	assert.Empty(t, read(FactOpenedAt, 5), "a control character reads as absent")
	assert.Empty(t, read(FactReason, 8), "an escaped quote reads as absent")
	assert.Equal(t, "été ✓", read(FactReason, 9))
	assert.False(t, HasEntry(hostileRecords[10], hook), "'.' in a name matches only '.'")
}

func TestQuoteCEL(t *testing.T) {
	for in, want := range map[string]string{
		"":                          `''`,
		"plain.example.com":         `'plain.example.com'`,
		`it's`:                      `'it\'s'`,
		`back\slash`:                `'back\\slash'`,
		`\'`:                        `'\\\''`,
		`"double"`:                  `'"double"'`,
		"line\nbreak\r\ttab":        `'line\nbreak\r\ttab'`,
		"nul\x00bell\x07":           `'nul\u0000bell\u0007'`,
		"unicode é ✓":               `'unicode é ✓'`,
		"zero\u200bwidth":           `'zero\u200bwidth'`,
		"bad\xffutf8":               `'bad` + "\ufffd" + `utf8'`,
		"${not} #{interpolated} %s": `'${not} #{interpolated} %s'`,
	} {
		assert.Equal(t, want, QuoteCEL(in), "input %q", in)
	}
}
