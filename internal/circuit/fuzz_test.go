package circuit

import (
	"reflect"
	"testing"
)

// FuzzDecode: any annotation text either fails to decode or round-trips
// through Encode unchanged, and reading facts from it never panics.
func FuzzDecode(f *testing.F) {
	f.Add(`{"a.example.com":{"uid":"u","mode":"Bypass","openedAt":"2026-11-30T10:00:00Z","reason":"timeout","originalFailurePolicy":"Fail","by":"me"}}`)
	f.Add(`{"a.example.com":{"originalFailurePolicy":null}}`)
	f.Add(`null`)
	f.Add(`{`)
	f.Add(`{"a":{"openedAt":"` + "\x00" + `"}}`)
	f.Fuzz(func(t *testing.T, text string) {
		for _, hook := range []string{"a.example.com", "a"} {
			entry := EntryText(text, hook)
			for _, fact := range []Fact{FactOpenedAt, FactOriginalFailurePolicy, FactMode, FactReason} {
				_ = fact.Show(entry)
			}
			_ = Note(entry, hook)
		}
		rec, err := Decode(map[string]string{Annotation: text})
		if err != nil {
			return
		}
		out, err := Encode(nil, rec)
		if err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		again, err := Decode(out)
		if err != nil {
			t.Fatalf("an encoded record does not decode: %v", err)
		}
		if len(rec) == 0 {
			return
		}
		first, _ := rec.Text()
		second, _ := again.Text()
		if first != second || !reflect.DeepEqual(rec.Webhooks(), again.Webhooks()) {
			t.Fatalf("round trip changed the record:\n%s\n%s", first, second)
		}
	})
}
