package apimetrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	mut = Webhook{Name: "slow.example.com", Type: Mutating}
	val = Webhook{Name: "policy.example.com", Type: Validating}
	th  = Thresholds{MinRequests: 5, FailureRatio: 0.5}
)

// exposition renders the families the apiserver serves for one instance.
// calls, errs (calling_webhook_error under Fail), failOpen and excluded
// are the counters of mut; val always has 10 healthy calls.
func exposition(start float64, calls, errs, failOpen, excluded int) string {
	return fmt.Sprintf(`# HELP process_start_time_seconds [ALPHA] Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds %g
# HELP apiserver_admission_webhook_request_total [ALPHA] Admission webhook request total.
# TYPE apiserver_admission_webhook_request_total counter
apiserver_admission_webhook_request_total{code="200",name="slow.example.com",operation="CREATE",rejected="false",type="admit"} %d
apiserver_admission_webhook_request_total{code="500",name="slow.example.com",operation="CREATE",rejected="true",type="admit"} %d
apiserver_admission_webhook_request_total{code="200",name="policy.example.com",operation="CREATE",rejected="false",type="validating"} 10
apiserver_admission_webhook_request_total{code="200",name="other.example.com",operation="CREATE",rejected="false",type="admit"} 99
# HELP apiserver_admission_webhook_rejection_count [ALPHA] Admission webhook rejection count.
# TYPE apiserver_admission_webhook_rejection_count counter
apiserver_admission_webhook_rejection_count{error_type="calling_webhook_error",name="slow.example.com",operation="CREATE",rejection_code="500",type="admit"} %d
apiserver_admission_webhook_rejection_count{error_type="no_error",name="slow.example.com",operation="CREATE",rejection_code="403",type="admit"} 1000
# HELP apiserver_admission_webhook_fail_open_count [ALPHA] Admission webhook fail open count.
# TYPE apiserver_admission_webhook_fail_open_count counter
apiserver_admission_webhook_fail_open_count{name="slow.example.com",type="admit"} %d
# HELP apiserver_admission_match_condition_exclusions_total [ALPHA] Exclusions.
# TYPE apiserver_admission_match_condition_exclusions_total counter
apiserver_admission_match_condition_exclusions_total{kind="webhook",name="slow.example.com",operation="CREATE",type="admit"} %d
apiserver_admission_match_condition_exclusions_total{kind="webhook",name="policy.example.com",operation="CREATE",type="validate"} 4
# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 12
`, start, calls-errs, errs, errs, failOpen, excluded)
}

func parse(t *testing.T, text string) Sample {
	t.Helper()
	s, err := Parse(strings.NewReader(text), map[Webhook]bool{mut: true, val: true})
	require.NoError(t, err)
	return s
}

func TestParse_sumsTheWantedWebhooksOnly(t *testing.T) {
	text := exposition(1700000000.25, 40, 30, 2, 7)
	s := parse(t, text)
	assert.Equal(t, 1700000000.25, s.Instance)
	assert.Equal(t, int64(len(text)), s.Bytes)
	assert.Equal(t, Counters{Calls: 40, CallErrors: 30, FailOpen: 2, Excluded: 7, Series: 6}, s.Webhooks[mut],
		"a webhook's answer \"no\" (error_type no_error) is not a failed call")
	assert.Equal(t, Counters{Calls: 10, Excluded: 4, Series: 2}, s.Webhooks[val],
		"validating webhooks are type=validating on calls and type=validate on exclusions")
	assert.Len(t, s.Webhooks, 2, "webhooks not asked for are dropped")
}

func TestParse_badInputIsAnErrorNotASample(t *testing.T) {
	for name, text := range map[string]string{
		"a sample that is not a number":     "apiserver_admission_webhook_fail_open_count{name=\"x\",type=\"admit\"} many\n",
		"an unterminated label set":         "apiserver_admission_webhook_request_total{name=\"x\n",
		"a line longer than the line limit": "apiserver_admission_webhook_request_total{name=\"" + strings.Repeat("x", maxLine) + "\"} 1\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(text), map[Webhook]bool{mut: true})
			require.Error(t, err)
		})
	}
}

func TestParse_garbageOutsideTheWantedFamiliesIsNeverParsed(t *testing.T) {
	s := parse(t, "this is { not prometheus\n"+exposition(1, 10, 0, 0, 0)+"\x00\x01 binary\n")
	assert.Equal(t, float64(10), s.Webhooks[mut].Calls)
}

func TestParse_responsesOverTheLimitAreRefused(t *testing.T) {
	big := strings.NewReader(strings.Repeat("# filler comment line that is dropped\n", MaxBytes/38+2))
	_, err := Parse(big, map[Webhook]bool{mut: true})
	require.ErrorContains(t, err, "larger than")
}

func observe(t *testing.T, tr *Tracker, text string, at time.Time) Result {
	t.Helper()
	return tr.Observe(parse(t, text), at, map[Webhook]Thresholds{mut: th})[mut]
}

func TestTracker_judgesTheDeltaOfOneInterval(t *testing.T) {
	tr := &Tracker{MaxWindow: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	assert.Equal(t, Unknown, observe(t, tr, exposition(1, 100, 0, 0, 0), t0).Verdict, "the first scrape has nothing to compare with")
	r := observe(t, tr, exposition(1, 140, 37, 0, 0), t0.Add(time.Second))
	assert.Equal(t, Failing, r.Verdict)
	assert.Equal(t, "apiserver: 37 of 40 calls failed (calling_webhook_error or fail-open) in the last 1s", r.String())
	r = observe(t, tr, exposition(1, 150, 37, 0, 0), t0.Add(2*time.Second))
	assert.Equal(t, Healthy, r.Verdict)
	r = observe(t, tr, exposition(1, 150, 37, 0, 0), t0.Add(3*time.Second))
	assert.Equal(t, Unknown, r.Verdict, "no traffic says nothing")
	r = observe(t, tr, exposition(1, 160, 37, 8, 0), t0.Add(4*time.Second))
	assert.Equal(t, Failing, r.Verdict, "fail-open calls under Ignore are failed calls too")
	assert.Equal(t, float64(8), r.Admitted, "and requests admitted without the webhook")
}

func TestTracker_fewCallsAccumulateUntilMinRequestsOrMaxWindow(t *testing.T) {
	tr := &Tracker{MaxWindow: 3 * time.Second}
	t0 := time.Unix(1000, 0)
	observe(t, tr, exposition(1, 0, 0, 0, 0), t0)
	assert.Equal(t, Unknown, observe(t, tr, exposition(1, 2, 2, 0, 0), t0.Add(time.Second)).Verdict)
	r := observe(t, tr, exposition(1, 5, 5, 0, 0), t0.Add(2*time.Second))
	assert.Equal(t, Failing, r.Verdict, "two intervals of calls together reach minRequests")
	assert.Equal(t, float64(5), r.Calls)
	assert.Equal(t, 2*time.Second, r.Window)

	observe(t, tr, exposition(1, 6, 6, 0, 0), t0.Add(3*time.Second))
	observe(t, tr, exposition(1, 7, 7, 0, 0), t0.Add(4*time.Second))
	r = observe(t, tr, exposition(1, 8, 8, 0, 0), t0.Add(5*time.Second))
	assert.Equal(t, Unknown, r.Verdict, "3 calls in the longest window are too few")
	r = observe(t, tr, exposition(1, 12, 12, 0, 0), t0.Add(6*time.Second))
	assert.Equal(t, Unknown, r.Verdict, "the window was dropped and started again")
	assert.Equal(t, float64(4), r.Calls)
}

func TestTracker_resetIsUnknownNeverANegativeRate(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for name, after := range map[string]string{
		"a counter went down":                    exposition(1, 10, 0, 0, 0),
		"a series disappeared (same start time)": strings.Replace(exposition(1, 500, 400, 0, 0), `apiserver_admission_webhook_request_total{code="200",name="slow.example.com"`, `apiserver_admission_webhook_request_total{code="200",name="gone.example.com"`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			tr := &Tracker{MaxWindow: 10 * time.Second}
			observe(t, tr, exposition(1, 100, 0, 0, 0), t0)
			r := observe(t, tr, after, t0.Add(time.Second))
			assert.Equal(t, Unknown, r.Verdict)
			assert.Equal(t, "the apiserver's counters were reset", r.Why)
			assert.Zero(t, r.Admitted)
		})
	}
}

func TestTracker_aRestartedApiserverIsANewInstance(t *testing.T) {
	tr := &Tracker{MaxWindow: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	observe(t, tr, exposition(1, 1000, 0, 0, 0), t0)
	r := observe(t, tr, exposition(2, 2000, 1990, 0, 0), t0.Add(time.Second))
	assert.Equal(t, Unknown, r.Verdict, "counters of a new process are not compared with the old one's, even when they grew")
}

// Two apiservers behind one Service: scrapes alternate between them. A is
// healthy with little traffic so far, B has served far more calls over its
// life and had failures long ago. Comparing A's scrape with B's would see
// thousands of failed calls in one second; per-instance deltas see none.
func TestTracker_alternatingHAInstancesNeverOpenFalsely(t *testing.T) {
	tr := &Tracker{MaxWindow: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	failing := 0
	aCalls, bCalls := 10, 50000
	for i := range 40 {
		var text string
		if i%2 == 0 {
			aCalls += 20
			text = exposition(111, aCalls, 0, 0, 0)
		} else {
			bCalls += 20
			text = exposition(222, bCalls, 45000, 0, 0)
		}
		r := observe(t, tr, text, t0.Add(time.Duration(i)*time.Second))
		if r.Verdict == Failing {
			failing++
		}
		if i >= 2 {
			assert.Equal(t, Healthy, r.Verdict, "scrape %d", i)
			assert.Equal(t, float64(20), r.Calls, "each instance's own calls since its own previous scrape")
		}
	}
	assert.Zero(t, failing)
}

func TestTracker_forgetsTheOldestInstanceBeyondTheLimit(t *testing.T) {
	tr := &Tracker{MaxWindow: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	for i := range MaxInstances + 5 {
		observe(t, tr, exposition(float64(i+1), 10, 0, 0, 0), t0.Add(time.Duration(i)*time.Second))
	}
	assert.Len(t, tr.instances, MaxInstances)
}

// Two apiservers whose /metrics carry no process_start_time_seconds (no
// process collector): nothing tells them apart, so no scrape is compared
// with another, and nothing is judged, however the counters move.
func TestTracker_withoutProcessStartTimeTwoApiserversNeverShareABaseline(t *testing.T) {
	tr := &Tracker{MaxWindow: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	noStart := func(calls, errs int) string {
		text := exposition(1, calls, errs, 0, 0)
		return text[strings.Index(text, "# HELP apiserver_admission_webhook_request_total"):]
	}
	s := parse(t, noStart(10, 0))
	require.Zero(t, s.Instance, "the exposition carries no start time")
	aCalls, bCalls := 10, 50000
	for i := range 10 {
		text := noStart(aCalls, 0)
		if i%2 == 1 {
			text = noStart(bCalls, 45000)
			bCalls += 20
		} else {
			aCalls += 20
		}
		r := observe(t, tr, text, t0.Add(time.Duration(i)*time.Second))
		assert.Equal(t, Unknown, r.Verdict, "scrape %d", i)
		assert.Equal(t, NoInstance, r.Why)
		assert.Zero(t, r.Admitted)
	}
	assert.Empty(t, tr.instances, "nothing remembered")
}

func TestParse_countsTheMarkingPolicysApplications(t *testing.T) {
	marked := Webhook{Name: "slow.example.com", Type: Mutating, MarkingPolicy: "webhook-guard-unmutated-0123456789"}
	text := exposition(1, 10, 0, 0, 7) + `# HELP apiserver_mutating_admission_policy_check_total [ALPHA] Mutation admission policy check total.
# TYPE apiserver_mutating_admission_policy_check_total counter
apiserver_mutating_admission_policy_check_total{error_type="no_error",policy="webhook-guard-unmutated-0123456789",policy_binding="webhook-guard-unmutated-0123456789"} 6
apiserver_mutating_admission_policy_check_total{error_type="no_error",policy="someone-elses",policy_binding="someone-elses"} 99
`
	s, err := Parse(strings.NewReader(text), map[Webhook]bool{marked: true})
	require.NoError(t, err)
	assert.Equal(t, float64(6), s.Webhooks[marked].Marked)
	assert.Equal(t, float64(10), s.Webhooks[marked].Calls, "the webhook's own counters still match by name and type")
}

func TestAdmitted(t *testing.T) {
	tests := map[string]struct {
		excluded, marked, failOpen, want float64
	}{
		"bypassed requests that were not marked count once":                      {excluded: 5, want: 5},
		"a marked request is excluded twice (reinvocation) and counts once":      {excluded: 198, marked: 99, want: 99},
		"unmarked requests beside marked ones count once each":                   {excluded: 13, marked: 4, want: 9},
		"marks beyond the exclusions (Ignore mode: nothing excluded) count none": {excluded: 0, marked: 7, failOpen: 3, want: 3},
		"failed-open calls under Ignore count":                                   {failOpen: 8, want: 8},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, admitted(tc.excluded, tc.marked, tc.failOpen))
		})
	}
}

// An extra scrape for the admitted count alone moves only that count's
// mark: the next Observe neither counts those requests again nor judges a
// shorter window.
func TestTracker_AdmittedCountsOnceAndJudgesNothing(t *testing.T) {
	tr := &Tracker{MaxWindow: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	want := map[Webhook]bool{mut: true}
	assert.Empty(t, tr.Admitted(parse(t, exposition(1, 100, 0, 0, 10)), want), "an instance never observed has no mark yet")
	observe(t, tr, exposition(1, 100, 0, 0, 10), t0)
	observe(t, tr, exposition(1, 110, 0, 0, 10), t0.Add(time.Second))
	got := tr.Admitted(parse(t, exposition(1, 110, 0, 0, 17)), want)
	assert.Equal(t, float64(7), got[mut].Admitted)
	r := observe(t, tr, exposition(1, 120, 0, 0, 20), t0.Add(2*time.Second))
	assert.Equal(t, float64(3), r.Admitted, "only what came after the extra scrape")
	assert.Equal(t, Healthy, r.Verdict)
	assert.Equal(t, float64(10), r.Calls, "the window runs from the last observation, not from the extra scrape")
	assert.Empty(t, tr.Admitted(parse(t, exposition(2, 5, 0, 0, 1)), want), "another instance: nothing to compare with")
}
