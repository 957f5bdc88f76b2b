package apimetrics

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// referenceFamily is family as it was before familySet.mayHold: every
// line delimited, then looked up. The fast path must keep exactly the
// lines it keeps.
func referenceFamily(line []byte, keep map[string]string) string {
	if rest, ok := bytes.CutPrefix(line, []byte("# ")); ok {
		if !bytes.HasPrefix(rest, []byte("HELP ")) && !bytes.HasPrefix(rest, []byte("TYPE ")) {
			return ""
		}
		line = rest[len("HELP "):]
	}
	name := line
	if i := bytes.IndexAny(line, "{ \t"); i >= 0 {
		name = line[:i]
	}
	if _, ok := keep[string(name)]; ok {
		return string(name)
	}
	return ""
}

// referenceFilter is filter with referenceFamily, on the whole text.
func referenceFilter(text string, keep *familySet) string {
	var out strings.Builder
	for line := range strings.Lines(text) {
		line = strings.TrimSuffix(line, "\n")
		if referenceFamily([]byte(line), keep.names) != "" {
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}

// tricky are lines the fast path could get wrong: names that begin like
// a wanted one, wanted names that begin others, comments of every kind,
// lines shorter than any wanted name.
const tricky = `# HELP apiserver_admission_webhook_request_total [ALPHA] Admission webhook request total.
# TYPE apiserver_admission_webhook_request_total counter
apiserver_admission_webhook_request_total{code="200",name="slow.example.com",operation="CREATE",rejected="false",type="admit"} 3
apiserver_admission_webhook_request_total 4
apiserver_admission_webhook_request_total	5
apiserver_admission_webhook_request_totalx{name="slow.example.com",type="admit"} 99
apiserver_admission_webhook_request_total_created{name="slow.example.com",type="admit"} 99
apiserver_admission_webhook_request{name="slow.example.com",type="admit"} 99
apiserver_admission_webhook_rejection_count_total{name="slow.example.com",type="admit"} 99
apiserver_admission_webhook_admission_duration_seconds_bucket{name="slow.example.com",type="admit",le="0.005"} 1
apiserver_admission_webhook_admission_duration_seconds_sum{name="slow.example.com",type="admit"} 0.1
apiserver_admission_webhook_admission_duration_seconds_count{name="slow.example.com",type="admit"} 1
# HELP apiserver_admission_webhook_admission_duration_seconds [STABLE] Admission webhook latency.
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
# HELP apiserver_admission_step_admission_duration_seconds [STABLE] Admission sub-step latency.
apiserver_admission_step_admission_duration_seconds_bucket{le="0.005"} 1
# HELP process_start_time_seconds Start time.
#  HELP process_start_time_seconds double space
#HELP process_start_time_seconds no space
# help process_start_time_seconds lower case
# UNIT process_start_time_seconds seconds
# EOF
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.7e+09
process_start_time_seconds_total 1
process_start_time_second 1
 process_start_time_seconds 1
process
p
a

apiserver_mutating_admission_policy_check_total{policy="p"} 2
apiserver_mutating_admission_policy_check_totals{policy="p"} 2
apiserver_admission_match_condition_exclusions_total{kind="webhook",name="slow.example.com",type="admit"} 7
apiserver_admission_match_condition_evaluation_seconds_bucket{le="1"} 7
apiserver_request_total{code="200",resource="pods",verb="LIST"} 12
`

func TestFilter_keepsExactlyWhatTheLineByLineLookupKeeps(t *testing.T) {
	real := string(realMetrics(t))
	for name, keep := range map[string]*familySet{"counters": families, "with latency": latencyFamilies} {
		for input, text := range map[string]string{"tricky lines": tricky, "a real apiserver's metrics": real} {
			t.Run(name+", "+input, func(t *testing.T) {
				got, err := filter(strings.NewReader(text), keep, nil)
				require.NoError(t, err)
				assert.Equal(t, referenceFilter(text, keep), string(got))
			})
		}
	}
}

func TestFilter_keepsTheWantedLinesAndOnlyThem(t *testing.T) {
	got, err := filter(strings.NewReader(tricky), families, nil)
	require.NoError(t, err)
	assert.Equal(t, `# HELP apiserver_admission_webhook_request_total [ALPHA] Admission webhook request total.
# TYPE apiserver_admission_webhook_request_total counter
apiserver_admission_webhook_request_total{code="200",name="slow.example.com",operation="CREATE",rejected="false",type="admit"} 3
apiserver_admission_webhook_request_total 4
apiserver_admission_webhook_request_total	5
# HELP process_start_time_seconds Start time.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.7e+09
apiserver_mutating_admission_policy_check_total{policy="p"} 2
apiserver_admission_match_condition_exclusions_total{kind="webhook",name="slow.example.com",type="admit"} 7
`, string(got), "names that merely begin like a wanted one, other comments and the histogram without Latency are dropped")

	got, err = filter(strings.NewReader(tricky), latencyFamilies, nil)
	require.NoError(t, err)
	assert.Contains(t, string(got), "apiserver_admission_webhook_admission_duration_seconds_bucket{")
	assert.Contains(t, string(got), "# TYPE apiserver_admission_webhook_admission_duration_seconds histogram\n")
	assert.NotContains(t, string(got), "apiserver_admission_step_")
}

// A scrape arrives in reads of any size: a wanted line is kept whole
// wherever the reads split it.
func TestFilter_aWantedLineSplitAcrossReadsIsKeptWhole(t *testing.T) {
	want := referenceFilter(tricky, families)
	t.Run("one byte per read", func(t *testing.T) {
		got, err := filter(iotest.OneByteReader(strings.NewReader(tricky)), families, nil)
		require.NoError(t, err)
		assert.Equal(t, want, string(got))
	})
	for _, size := range []int{2, 3, 7, 26, 27, 64, 100} {
		got, err := filter(&chunkReader{data: []byte(tricky), size: size}, families, nil)
		require.NoError(t, err)
		assert.Equal(t, want, string(got), "reads of %d bytes", size)
	}
	t.Run("a wanted line longer than the scanner's first buffer", func(t *testing.T) {
		long := `apiserver_admission_webhook_fail_open_count{name="` + strings.Repeat("x", scanBuffer+100) + `",type="admit"} 1` + "\n"
		text := strings.Repeat("apiserver_request_total{verb=\"GET\"} 1\n", scanBuffer/30) + long + tricky
		got, err := filter(&chunkReader{data: []byte(text), size: 4093}, families, nil)
		require.NoError(t, err)
		assert.Equal(t, long+want, string(got))
	})
	t.Run("the last line without its newline", func(t *testing.T) {
		got, err := filter(strings.NewReader("process_start_time_seconds 5"), families, nil)
		require.NoError(t, err)
		assert.Equal(t, "process_start_time_seconds 5\n", string(got))
	})
}

// chunkReader returns data size bytes at a time.
type chunkReader struct {
	data []byte
	size int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.size)], c.data)
	c.data = c.data[n:]
	return n, nil
}

func TestFamilies_namesWhatTheScrapeParses(t *testing.T) {
	assert.ElementsMatch(t, []string{RequestTotal, RejectionCount, FailOpenCount, MatchConditionExclusions, MutatingPolicyChecks, ProcessStartTime}, Families(ParseOptions{}))
	assert.ElementsMatch(t, append(Families(ParseOptions{}), AdmissionDuration), Families(ParseOptions{Latency: true}),
		"a histogram is asked for by its base name; its _bucket, _sum and _count lines come with it")
}

func FuzzFamily_fastPathMatchesTheLookup(f *testing.F) {
	for line := range strings.Lines(tricky) {
		f.Add(strings.TrimSuffix(line, "\n"))
	}
	f.Fuzz(func(t *testing.T, line string) {
		for _, keep := range []*familySet{families, latencyFamilies} {
			if got, want := family([]byte(line), keep), referenceFamily([]byte(line), keep.names); got != want {
				t.Fatalf("family(%q) = %q, the lookup says %q", line, got, want)
			}
		}
	})
}

// selectorCases are counter samples the selector must keep for the
// parser (bad, or not in the form it reads) or may drop (well-formed,
// of a webhook nobody asked for), after the TYPE line that makes them
// counters.
var selectorCases = map[string]struct {
	line  string
	drops bool
}{
	"another webhook's sample":                  {`apiserver_admission_webhook_request_total{code="200",name="other.example.com",operation="CREATE",rejected="false",type="admit"} 99`, true},
	"another webhook's sample with a timestamp": {`apiserver_admission_webhook_request_total{name="other.example.com",type="admit"} 99 1700000000000`, true},
	"a wanted webhook's sample":                 {`apiserver_admission_webhook_request_total{code="200",name="slow.example.com",type="admit"} 1`, false},
	"a sample without a name label":             {`apiserver_admission_webhook_request_total{code="200",type="admit"} 5`, true},
	"an escaped quote in another label":         {`apiserver_admission_webhook_request_total{code="2\"0\\0\n",name="other.example.com",type="admit"} 5`, true},
	"a wanted name inside another label":        {`apiserver_admission_webhook_request_total{code="name=\"slow.example.com\"",name="other.example.com",type="admit"} 5`, true},
	"a value that is not a number":              {`apiserver_admission_webhook_request_total{name="other.example.com",type="admit"} many`, false},
	"a value the parser refuses (underscore)":   {`apiserver_admission_webhook_request_total{name="other.example.com",type="admit"} 1_000`, false},
	"a bad timestamp":                           {`apiserver_admission_webhook_request_total{name="other.example.com",type="admit"} 1 soon`, false},
	"a trailing blank":                          {`apiserver_admission_webhook_request_total{name="other.example.com",type="admit"} 1 `, false},
	"an unknown escape":                         {`apiserver_admission_webhook_request_total{code="\a",name="other.example.com",type="admit"} 1`, false},
	"invalid UTF-8":                             {"apiserver_admission_webhook_request_total{code=\"\xff\",name=\"other.example.com\",type=\"admit\"} 1", false},
	"a repeated label":                          {`apiserver_admission_webhook_request_total{name="other.example.com",name="slow.example.com",type="admit"} 1`, false},
	"the reserved label __name__":               {`apiserver_admission_webhook_request_total{__name__="x",name="other.example.com",type="admit"} 1`, false},
	"blanks between labels":                     {`apiserver_admission_webhook_request_total{name="other.example.com", type="admit"} 1`, false},
	"a quoted label name":                       {`apiserver_admission_webhook_request_total{"name"="other.example.com",type="admit"} 1`, false},
	"a trailing comma":                          {`apiserver_admission_webhook_request_total{name="other.example.com",} 1`, false},
	"an unterminated label set":                 {`apiserver_admission_webhook_request_total{name="other.example.com"`, false},
	"no label set":                              {`apiserver_admission_webhook_request_total 4`, false},
}

func TestSelector_dropsOnlyWellFormedSamplesNobodyAskedFor(t *testing.T) {
	sel := newSelector(map[Webhook]bool{mut: true})
	for name, tc := range selectorCases {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.drops, sel.drops(RequestTotal, []byte(tc.line)))
		})
	}
	t.Run("a policy nobody asked for", func(t *testing.T) {
		marked := Webhook{Name: "slow.example.com", Type: Mutating, MarkingPolicy: "mine"}
		sel := newSelector(map[Webhook]bool{marked: true})
		assert.True(t, sel.drops(MutatingPolicyChecks, []byte(`apiserver_mutating_admission_policy_check_total{error_type="no_error",policy="theirs",policy_binding="theirs"} 1`)))
		assert.False(t, sel.drops(MutatingPolicyChecks, []byte(`apiserver_mutating_admission_policy_check_total{error_type="no_error",policy="mine",policy_binding="mine"} 1`)))
		assert.False(t, sel.drops(ProcessStartTime, []byte(`process_start_time_seconds{name="x"} 1`)))
	})
	assert.Nil(t, newSelector(map[Webhook]bool{{Name: `we"ird`, Type: Mutating}: true}), "a name not written verbatim turns the selector off")
}

// Read with the selector and Read without it agree on every input: the
// same Sample, or both an error.
func TestRead_theSelectorChangesNoResult(t *testing.T) {
	want := map[Webhook]bool{mut: true, val: true, {Name: "slow.example.com", Type: Mutating, MarkingPolicy: "p"}: true}
	inputs := map[string]string{
		"a real apiserver's metrics": string(realMetrics(t)),
		"the exposition":             exposition(1, 40, 30, 2, 7),
		"tricky lines":               tricky,
		"samples before their TYPE":  "apiserver_admission_webhook_request_total{name=\"other.example.com\",type=\"admit\"} 1\n" + exposition(1, 40, 30, 2, 7),
		"a second TYPE line":         exposition(1, 40, 30, 2, 7) + "# TYPE apiserver_admission_webhook_request_total gauge\napiserver_admission_webhook_request_total{name=\"other.example.com\",type=\"admit\"} 1\n",
	}
	for name, tc := range selectorCases {
		inputs["after the TYPE line: "+name] = exposition(1, 40, 30, 2, 7) + strings.Replace(tc.line, "apiserver_admission_webhook_request_total", RejectionCount, 1) + "\n"
	}
	for name, text := range inputs {
		t.Run(name, func(t *testing.T) {
			assertSameRead(t, text, want)
		})
	}
	realWanted := realWant(t, []byte(inputs["a real apiserver's metrics"]))
	for wh := range realWanted {
		delete(realWanted, wh)
		if len(realWanted) == 1 {
			break
		}
	}
	assertSameRead(t, inputs["a real apiserver's metrics"], realWanted)
}

func assertSameRead(t *testing.T, text string, want map[Webhook]bool) {
	t.Helper()
	for _, opts := range []ParseOptions{{}, {Latency: true}} {
		got, err := read(strings.NewReader(text), want, opts, newSelector(want))
		ref, refErr := read(strings.NewReader(text), want, opts, nil)
		if refErr != nil {
			assert.Error(t, err, "the parser's error on a bad line is kept")
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, ref, got)
	}
}

func FuzzRead_theSelectorChangesNoResult(f *testing.F) {
	for _, tc := range selectorCases {
		f.Add(tc.line)
	}
	f.Add(tricky)
	want := map[Webhook]bool{mut: true, val: true, {Name: "slow.example.com", Type: Mutating, MarkingPolicy: "p"}: true}
	f.Fuzz(func(t *testing.T, lines string) {
		text := exposition(1, 40, 30, 2, 7) + lines
		for _, opts := range []ParseOptions{{}, {Latency: true}} {
			got, err := read(strings.NewReader(text), want, opts, newSelector(want))
			ref, refErr := read(strings.NewReader(text), want, opts, nil)
			if (err != nil) != (refErr != nil) {
				t.Fatalf("with the selector: %v; without: %v", err, refErr)
			}
			if err == nil {
				assert.Equal(t, ref, got)
			}
		}
	})
}
