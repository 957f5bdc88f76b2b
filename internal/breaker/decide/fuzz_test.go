package decide_test

import (
	"encoding/json"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/webhook-guard/webhook-guard/internal/breaker/breakertest"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/probe"
)

// FuzzPlan drives Plan with sequences of probe outcomes, administrator
// overrides and overwrites decoded from the input, and checks its
// invariants after every step:
//   - Plan never mutates its input and never errors on what it wrote;
//   - a webhook has an entry if and only if the breaker's changes are in
//     place (Ignore, and the marker in Bypass mode);
//   - without an entry a target carries no bypass marker;
//   - the non-target webhook and the webhook order are never touched;
//   - once handed back and healthy long enough, no entry remains.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{0, 1, 'F', 'F', 'F', 'H', 'H', 'H', 'H', 'H', 'H'})
	f.Add([]byte{5, 2, 'F', 'F', 'O', 'F', 'o', 'H', 'M', 'F', 'F', 'F', 'H'})
	f.Add([]byte{3, 3, 'F', 'F', 'F', 'F', 'P', 'H', 'H', 'U', 'U', 'H', 'H', 'H'})
	f.Add([]byte{0x41, 8, 8, 8, 8, 3, 3, 3, 3, 8, 9, 3, 3, 8, 8, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		policies := []*admissionregistrationv1.FailurePolicyType{nil, breakertest.PolicyFail, breakertest.PolicyIgnore}
		modes := []config.Mode{config.ModeIgnore, config.ModeBypass}
		setup, ops := data[0], data[1:]
		tgts := []config.Target{
			breakertest.WithSignal(breakertest.Target(breakertest.WhA, modes[setup&1], 1+int(setup>>1&3), 1+int(setup>>3&3))),
			breakertest.Target(breakertest.WhB, modes[setup>>5&1], 2, 2),
		}
		tgts[1].APIServerSignal.Enabled = setup>>6&1 == 1
		orig := breakertest.Config(breakertest.Webhook(breakertest.WhA, policies[int(data[1])%3], breakertest.MC("x")), breakertest.Webhook(breakertest.WhOther, breakertest.PolicyFail), breakertest.Webhook(breakertest.WhB, breakertest.PolicyFail))
		cur := orig.DeepCopy()
		counts, apiserver := map[string]decide.Counts{}, map[string]decide.Counts{}
		now := breakertest.Now
		step := func() {
			now = now.Add(time.Second)
			prev := cur.DeepCopy()
			minOpen := map[string]time.Duration{breakertest.WhA: 2 * time.Second}
			evidence := map[string]decide.Evidence{}
			for hook, c := range counts {
				evidence[hook] = decide.Evidence{Probe: c, APIServer: apiserver[hook], MinOpen: minOpen[hook]}
			}
			next, _, err := decide.Plan(cur, decide.Inputs{Targets: tgts, Evidence: evidence, Now: now, Signer: "me"})
			if err != nil {
				t.Fatalf("Plan failed on a record it wrote: %v", err)
			}
			if !equalJSON(prev, cur) {
				t.Fatal("Plan mutated its input")
			}
			cur = next
			rec, err := circuit.Decode(cur.Annotations)
			if err != nil {
				t.Fatalf("Plan wrote an unreadable record: %v", err)
			}
			if !equalJSON(circuit.FindWebhook(cur, breakertest.WhOther), circuit.FindWebhook(orig, breakertest.WhOther)) || len(cur.Webhooks) != 3 || cur.Webhooks[1].Name != breakertest.WhOther {
				t.Fatal("the non-target webhook or the order changed")
			}
			for _, tg := range tgts {
				wh := circuit.FindWebhook(cur, tg.Webhook)
				e, open := rec[tg.Webhook]
				switch {
				case open && !circuit.InPlace(wh, e):
					t.Fatalf("%s has an entry but the changes are not in place", tg.Webhook)
				case !open && circuit.BypassIndex(wh) >= 0:
					t.Fatalf("%s carries the marker without an entry", tg.Webhook)
				}
			}
		}
		for _, op := range ops {
			switch op % 10 {
			case 0, 1, 2: // a failed probe of each
				for _, n := range []string{breakertest.WhA, breakertest.WhB} {
					c := counts[n]
					c.Observe(breakertest.FailedResult(probe.ReasonTimeout))
					counts[n] = c
				}
			case 3, 4: // a healthy probe of each
				for _, n := range []string{breakertest.WhA, breakertest.WhB} {
					c := counts[n]
					c.Observe(breakertest.HealthyResult())
					counts[n] = c
				}
			case 5: // the administrator toggles the override
				if cur.Annotations[circuit.OverrideAnnotation] == "" {
					cur.Annotations[circuit.OverrideAnnotation] = "fuzz"
				} else {
					delete(cur.Annotations, circuit.OverrideAnnotation)
				}
			case 6: // someone removes the marker of whA despite the guard
				circuit.RemoveBypass(circuit.FindWebhook(cur, breakertest.WhA))
			case 7: // an Unknown result moves nothing
				c := counts[breakertest.WhA]
				c.Observe(breakertest.UnknownResult())
				counts[breakertest.WhA] = c
			case 8, 9: // the apiserver's calls fail (8) or succeed (9)
				r := breakertest.HealthyResult()
				if op%10 == 8 {
					r = breakertest.FailedResult(decide.ReasonAPIServerCalls)
				}
				for _, n := range []string{breakertest.WhA, breakertest.WhB} {
					c := apiserver[n]
					c.Observe(r)
					apiserver[n] = c
				}
			}
			step()
		}
		delete(cur.Annotations, circuit.OverrideAnnotation)
		for i := 0; i < 6; i++ {
			for _, n := range []string{breakertest.WhA, breakertest.WhB} {
				c := counts[n]
				c.Observe(breakertest.HealthyResult())
				counts[n] = c
				a := apiserver[n]
				a.Observe(breakertest.HealthyResult())
				apiserver[n] = a
			}
			step()
		}
		if rec, _ := circuit.Decode(cur.Annotations); len(rec) != 0 {
			t.Fatalf("entries remain after a long healthy run: %v", rec.Webhooks())
		}
	})
}

func equalJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}
