package circuit

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Fact is one value of a record Entry, read from the record's text. The Go
// accessor (Read) and the CEL accessor (CEL) apply the same RE2 patterns
// and the same string operations, so they agree on any text, including a
// record someone wrote by hand. A value longer than maxFactLength, or one
// with a quote, backslash or control character, reads as absent.
type Fact struct {
	// Key is the Entry field's JSON name.
	Key string
	// Absent is how the fact renders when the entry lacks it (or holds
	// null, or a value the pattern refuses).
	Absent string
}

// maxFactLength bounds every value a message quotes from a record.
const maxFactLength = 64

// The facts messages quote from an entry.
var (
	FactOpenedAt              = Fact{Key: "openedAt", Absent: "an unknown time"}
	FactOriginalFailurePolicy = Fact{Key: "originalFailurePolicy", Absent: Unset}
	FactMode                  = Fact{Key: "mode", Absent: "unknown"}
	FactReason                = Fact{Key: "reason", Absent: "unknown"}
	// FactUID is the configuration's UID when the circuit opened; the
	// marking policies compare it with their param's.
	FactUID = Fact{Key: "uid"}
	// FactHandedOffAt is set on an entry an administrator's override
	// took over (Entry.HandedOffAt).
	FactHandedOffAt = Fact{Key: "handedOffAt"}
)

func (f Fact) prefix() string { return `"` + f.Key + `":"` }

// pattern matches `"key":"value"` with a value of at most maxFactLength
// characters and no quote, backslash or control character.
func (f Fact) pattern() string {
	return regexp.QuoteMeta(f.prefix()) + fmt.Sprintf(`[^"\\\x00-\x1f]{0,%d}"`, maxFactLength)
}

// entryPattern matches webhook's entry in the record text. Webhook names
// are DNS subdomains, so '.' is the only character to escape; CEL has no
// QuoteMeta, so Go escapes exactly as the CEL accessor does.
func entryPattern(webhook string) string {
	return `"` + strings.ReplaceAll(webhook, ".", `\.`) + `":\{[^}]*\}`
}

const entryPatternSuffix = `":\{[^}]*\}`

func entryPatternCEL(webhook string) string {
	return QuoteCEL(`"`) + " + " + webhook + ".replace('.', " + QuoteCEL(`\.`) + ") + " + QuoteCEL(entryPatternSuffix)
}

// HasEntry reports whether the record text holds an entry for webhook.
func HasEntry(record, webhook string) bool {
	re, err := regexp.Compile(entryPattern(webhook))
	return err == nil && re.MatchString(record)
}

// HasEntryCEL is HasEntry in CEL; record and webhook are CEL string
// expressions.
func HasEntryCEL(record, webhook string) string {
	return fmt.Sprintf("%s.matches(%s)", record, entryPatternCEL(webhook))
}

// EntryText returns webhook's entry in the record text, "" when absent.
func EntryText(record, webhook string) string {
	re, err := regexp.Compile(entryPattern(webhook))
	if err != nil {
		return ""
	}
	return re.FindString(record)
}

// EntryTextOfCEL is EntryText in CEL for a webhook named when the
// expression is written; namePattern is its NamePattern (or a placeholder
// that is replaced by one). Its pattern is a constant, which
// kube-apiserver compiles once with the expression (k8s.io/apiserver's
// FindRegexOptimization), where EntryTextCEL's is compiled again at every
// evaluation: in a marking policy that is every write in the cluster.
func EntryTextOfCEL(record, namePattern string) string {
	return fmt.Sprintf("%s.find(%s)", record, QuoteCEL(`"`+namePattern+entryPatternSuffix))
}

// EntryKey is the text that begins webhook's entry in a record: a record
// without it holds no entry for webhook (EntryText finds none), so a plain
// substring test rules an entry out before any regular expression runs.
// Names hold no quote, and a quote inside a JSON string is escaped, so the
// text cannot come from inside another entry's values.
func EntryKey(webhook string) string { return `"` + webhook + `":{` }

// NamePattern is an RE2 pattern that matches exactly webhook, a DNS
// subdomain: each '.' is written [.], which matches as \. does (entryPattern)
// but holds no backslash, so a template can put a name into it by plain
// replacement.
func NamePattern(webhook string) string { return strings.ReplaceAll(webhook, ".", "[.]") }

// EntryTextCEL is EntryText in CEL.
func EntryTextCEL(record, webhook string) string {
	return fmt.Sprintf("%s.find(%s)", record, entryPatternCEL(webhook))
}

// entryShape matches one entry of a record as Record.Text writes it:
// "name":{...}, its name a webhook name (kube-apiserver requires a
// lower-case DNS subdomain), its value an object with no '}' in it.
const entryShape = `"[a-z0-9.-]+":\{[^}]*\}`

// recordShape matches a record text made of entries only, as Record.Text
// writes it: {} or {E,E,...}, each E an entryShape.
const recordShape = `^\{(` + entryShape + `(,` + entryShape + `)*)?\}$`

var (
	entryShapeRE  = regexp.MustCompile(entryShape)
	recordShapeRE = regexp.MustCompile(recordShape)
)

// OnlyEntriesOf reports whether the record text holds only entries that
// the stored record text holds, byte for byte: what is left when entries
// are removed from stored and Record.Text writes the rest. A text that is
// not made of entries only, as the encoder writes them, is not: a space
// before a colon or an escaped character reads in JSON as an entry that
// no entry pattern finds, and so could carry an entry stored never held.
// In a record the encoder wrote, values hold no quote, so an entry's text
// is found in it only as that whole entry.
func OnlyEntriesOf(record, stored string) bool {
	if !recordShapeRE.MatchString(record) {
		return false
	}
	for _, e := range entryShapeRE.FindAllString(record, -1) {
		if !strings.Contains(stored, e) {
			return false
		}
	}
	return true
}

// OnlyEntriesOfCEL is OnlyEntriesOf in CEL; record and stored are CEL
// string expressions.
func OnlyEntriesOfCEL(record, stored string) string {
	return fmt.Sprintf("%s.matches(%s)\n  && %s.findAll(%s).all(e, %s.contains(e))", record, QuoteCEL(recordShape), record, QuoteCEL(entryShape), stored)
}

// Read returns the fact's value in an entry's text (EntryText), or ""
// when it is absent. The value cannot hold a quote, so removing the
// prefix and every quote leaves exactly the value.
func (f Fact) Read(entry string) string {
	m := regexp.MustCompile(f.pattern()).FindString(entry)
	return strings.ReplaceAll(strings.ReplaceAll(m, f.prefix(), ""), `"`, "")
}

// CEL is Read in CEL; entry is a CEL string expression.
func (f Fact) CEL(entry string) string {
	return fmt.Sprintf("%s.find(%s).replace(%s, '').replace('\"', '')", entry, QuoteCEL(f.pattern()), QuoteCEL(f.prefix()))
}

// Show returns the fact for a message: its value, or Absent.
func (f Fact) Show(entry string) string {
	if v := f.Read(entry); v != "" {
		return v
	}
	return f.Absent
}

// ShowCEL is Show in CEL: the first non-empty of the value and Absent.
func (f Fact) ShowCEL(entry string) string {
	return fmt.Sprintf("([%s].filter(v, v != '') + [%s])[0]", f.CEL(entry), QuoteCEL(f.Absent))
}

// Note describes an open circuit from webhook's entry text, for a denial:
// "webhooks[name=W]: circuit open since T, original failurePolicy P, mode
// M, reason R".
func Note(entry, webhook string) string {
	return "webhooks[name=" + webhook + "]: circuit open since " + FactOpenedAt.Show(entry) +
		", original failurePolicy " + FactOriginalFailurePolicy.Show(entry) +
		", mode " + FactMode.Show(entry) +
		", reason " + FactReason.Show(entry)
}

// NoteCEL is Note in CEL; entry and webhook are CEL string expressions.
func NoteCEL(entry, webhook string) string {
	return strings.Join([]string{
		"'webhooks[name=' + " + webhook + " + ']: circuit open since '",
		FactOpenedAt.ShowCEL(entry),
		"', original failurePolicy '",
		FactOriginalFailurePolicy.ShowCEL(entry),
		"', mode '",
		FactMode.ShowCEL(entry),
		"', reason '",
		FactReason.ShowCEL(entry),
	}, " + ")
}

// QuoteCEL returns s as a single-quoted CEL string literal. Backslashes and
// single quotes are escaped, common control characters use their short
// escapes, and any other non-printable rune is written as \uXXXX or
// \UXXXXXXXX; invalid UTF-8 becomes U+FFFD.
func QuoteCEL(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for _, r := range s {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '\'':
			b.WriteString(`\'`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			switch {
			case unicode.IsPrint(r):
				b.WriteRune(r)
			case r <= 0xFFFF:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		}
	}
	b.WriteByte('\'')
	return b.String()
}
