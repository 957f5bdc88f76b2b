package circuit

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func sampleEntry(policy *admissionregistrationv1.FailurePolicyType) Entry {
	return Entry{
		UID:                   "0b1c2d3e-0000-4000-8000-000000000001",
		Mode:                  ModeBypass,
		OpenedAt:              metav1.NewTime(time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)),
		Reason:                "timeout",
		OriginalFailurePolicy: policy,
	}
}

// assertEntryEqual compares entries; OpenedAt is compared as an instant
// because metav1.Time decodes into the local zone.
func assertEntryEqual(t *testing.T, want, got Entry) {
	t.Helper()
	assert.Equal(t, want.UID, got.UID, "uid")
	assert.Equal(t, want.Mode, got.Mode, "mode")
	assert.Equal(t, want.Reason, got.Reason, "reason")
	assert.True(t, want.OpenedAt.Equal(&got.OpenedAt), "openedAt: want %s, got %s", want.OpenedAt, got.OpenedAt)
	assert.Equal(t, want.OriginalFailurePolicy, got.OriginalFailurePolicy, "originalFailurePolicy")
}

func TestRecord_roundTrip_table(t *testing.T) {
	cases := map[string]struct {
		policy   *admissionregistrationv1.FailurePolicyType
		wantJSON string
	}{
		"an unset original failurePolicy comes back nil and is written as null": {policy: nil, wantJSON: `"originalFailurePolicy":null`},
		"an original failurePolicy Fail comes back Fail":                        {policy: ptr.To(admissionregistrationv1.Fail), wantJSON: `"originalFailurePolicy":"Fail"`},
		"an original failurePolicy Ignore comes back Ignore":                    {policy: ptr.To(admissionregistrationv1.Ignore), wantJSON: `"originalFailurePolicy":"Ignore"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			want := sampleEntry(tc.policy)
			ann, err := Encode(map[string]string{"other": "value"}, Record{"a.example.com": want})
			require.NoError(t, err)
			raw := ann[Annotation]
			assert.Contains(t, raw, tc.wantJSON)
			assert.Contains(t, raw, `"openedAt":"2025-03-04T05:06:07Z"`)
			assert.Contains(t, raw, `"uid":"0b1c2d3e-0000-4000-8000-000000000001"`)
			assert.Contains(t, raw, `"mode":"Bypass"`)
			assert.Contains(t, raw, `"reason":"timeout"`)
			assert.Equal(t, "value", ann["other"])

			got, err := Decode(ann)
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Contains(t, got, "a.example.com")
			assertEntryEqual(t, want, got["a.example.com"])
		})
	}
}

func TestRecord_roundTrip_nilPolicyAndMatchConditions(t *testing.T) {
	rec := Record{
		"nil.example.com":  sampleEntry(nil),
		"fail.example.com": sampleEntry(ptr.To(admissionregistrationv1.Fail)),
	}
	ann, err := Encode(nil, rec)
	require.NoError(t, err)

	var generic map[string]map[string]any
	require.NoError(t, json.Unmarshal([]byte(ann[Annotation]), &generic))
	require.Contains(t, generic["nil.example.com"], "originalFailurePolicy", "the key is present, not omitted")
	assert.Nil(t, generic["nil.example.com"]["originalFailurePolicy"], "an unset policy is JSON null")
	assert.Equal(t, "Fail", generic["fail.example.com"]["originalFailurePolicy"])

	got, err := Decode(ann)
	require.NoError(t, err)
	assert.Equal(t, []string{"fail.example.com", "nil.example.com"}, got.Webhooks())
	assert.Nil(t, got["nil.example.com"].OriginalFailurePolicy)
	require.NotNil(t, got["fail.example.com"].OriginalFailurePolicy)
	assert.Equal(t, admissionregistrationv1.Fail, *got["fail.example.com"].OriginalFailurePolicy)
}

func TestDecode_table(t *testing.T) {
	cases := map[string]struct {
		annotations map[string]string
		wantErr     bool
		wantLen     int
	}{
		"nil annotations are an empty record":                {annotations: nil},
		"a missing annotation is an empty record":            {annotations: map[string]string{"other": "x"}},
		"an empty object is an empty record":                 {annotations: map[string]string{Annotation: `{}`}},
		"one entry decodes":                                  {annotations: map[string]string{Annotation: `{"a":{"uid":"u","mode":"Ignore","openedAt":"2025-01-01T00:00:00Z","reason":"tls","originalFailurePolicy":null}}`}, wantLen: 1},
		"truncated JSON is an error":                         {annotations: map[string]string{Annotation: `{"a":{"uid":`}, wantErr: true},
		"an empty value is an error":                         {annotations: map[string]string{Annotation: ``}, wantErr: true},
		"a JSON array is an error":                           {annotations: map[string]string{Annotation: `[]`}, wantErr: true},
		"a JSON string is an error":                          {annotations: map[string]string{Annotation: `"open"`}, wantErr: true},
		"an entry that is not an object is an error":         {annotations: map[string]string{Annotation: `{"a":1}`}, wantErr: true},
		"a bad openedAt is an error":                         {annotations: map[string]string{Annotation: `{"a":{"openedAt":"yesterday"}}`}, wantErr: true},
		"a failurePolicy of the wrong JSON type is an error": {annotations: map[string]string{Annotation: `{"a":{"originalFailurePolicy":3}}`}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rec, err := Decode(tc.annotations)
			if tc.wantErr {
				require.Error(t, err)
				assert.Contains(t, err.Error(), Annotation)
				assert.Nil(t, rec)
				return
			}
			require.NoError(t, err)
			require.NotNil(t, rec, "an empty record is usable, not nil")
			assert.Len(t, rec, tc.wantLen)
		})
	}
}

// A record that decodes without error must be a usable (non-nil) map: Plan
// writes new entries into it. The JSON literal null is accepted by
// encoding/json and would otherwise leave a nil map behind.
func TestDecode_nullIsErrorOrUsableRecord(t *testing.T) {
	rec, err := Decode(map[string]string{Annotation: `null`})
	if err != nil {
		assert.Nil(t, rec)
		return
	}
	require.NotNil(t, rec, "Decode(%q) returned a nil record and no error", "null")
	assert.Empty(t, rec)
}

func TestEncode_table(t *testing.T) {
	entry := sampleEntry(ptr.To(admissionregistrationv1.Fail))
	cases := map[string]struct {
		annotations map[string]string
		rec         Record
		wantKeys    []string
		wantCircuit bool
		wantNil     bool
	}{
		"an empty record removes the annotation and keeps the others": {
			annotations: map[string]string{Annotation: `{"a":{}}`, "keep": "me", OverrideAnnotation: "reason"},
			rec:         Record{},
			wantKeys:    []string{"keep", OverrideAnnotation},
		},
		"a nil record removes the annotation": {
			annotations: map[string]string{Annotation: `{"a":{}}`, "keep": "me"},
			rec:         nil,
			wantKeys:    []string{"keep"},
		},
		"an empty record on nil annotations stays nil": {
			annotations: nil,
			rec:         Record{},
			wantNil:     true,
		},
		"a record on nil annotations allocates them": {
			annotations: nil,
			rec:         Record{"a": entry},
			wantKeys:    []string{Annotation},
			wantCircuit: true,
		},
		"a record replaces an existing annotation and keeps the others": {
			annotations: map[string]string{Annotation: `{"old":{}}`, "keep": "me"},
			rec:         Record{"a": entry},
			wantKeys:    []string{Annotation, "keep"},
			wantCircuit: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var before map[string]string
			for k, v := range tc.annotations {
				if before == nil {
					before = map[string]string{}
				}
				before[k] = v
			}
			got, err := Encode(tc.annotations, tc.rec)
			require.NoError(t, err)
			if tc.wantNil {
				assert.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			keys := make([]string, 0, len(got))
			for k := range got {
				keys = append(keys, k)
			}
			assert.ElementsMatch(t, tc.wantKeys, keys)
			for k, v := range before {
				if k != Annotation {
					assert.Equal(t, v, got[k], "annotation %s is kept", k)
				}
			}
			if tc.wantCircuit {
				back, err := Decode(got)
				require.NoError(t, err)
				assert.Equal(t, tc.rec.Webhooks(), back.Webhooks())
				for name, want := range tc.rec {
					assertEntryEqual(t, want, back[name])
				}
			}
		})
	}
}

func TestRecord_Webhooks_sorted(t *testing.T) {
	rec := Record{"c": {}, "a": {}, "b": {}}
	assert.Equal(t, []string{"a", "b", "c"}, rec.Webhooks())
	assert.Empty(t, Record{}.Webhooks())
	assert.Empty(t, Record(nil).Webhooks())
}

func TestRecord_Mine(t *testing.T) {
	rec := Record{"a": {By: "sa"}, "b": {By: "other"}, "c": {}}
	for hook, want := range map[string]bool{"a": true, "b": false, "c": true, "gone": false} {
		e, ok := rec.Mine(hook, "sa")
		if ok != want {
			t.Errorf("%s: Mine = %v, want %v", hook, ok, want)
		}
		if ok && e != rec[hook] {
			t.Errorf("%s: the entry is not the record's", hook)
		}
	}
}
