package config

import (
	"testing"
)

// FuzzParse: any input either fails with an error or yields a
// configuration that holds every rule Parse promises.
func FuzzParse(f *testing.F) {
	f.Add([]byte(header + minimalTarget))
	f.Add([]byte(header + "holdWhenAllFail: 0\ntargets:\n- kind: Validating\n  configuration: a\n  webhook: a.b.c\n  allowAdmissionWithoutValidation: true\n  mode: Bypass\n"))
	f.Add([]byte(header + "targets:\n- configuration: a\n  webhook: w\n  allowAdmissionWithoutMutation: true\n  probe:\n    kind: HTTPGet\n    path: /healthz\n    interval: 100ms\n"))
	f.Add([]byte("{}"))
	f.Add([]byte("targets: [{}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			return
		}
		if cfg.HoldWhenAllFail < 0 || cfg.HoldWhenAllFail == 1 {
			t.Fatalf("holdWhenAllFail %d was accepted", cfg.HoldWhenAllFail)
		}
		seen := map[string]bool{}
		for _, tg := range cfg.Targets {
			if seen[tg.Key()] {
				t.Fatalf("duplicate target %s accepted", tg.Key())
			}
			seen[tg.Key()] = true
			if tg.Configuration == "" || tg.Webhook == "" || tg.OpenAfter < 1 || tg.CloseAfter < 1 || tg.Probe.Interval < MinProbeInterval || tg.Probe.Timeout < 0 ||
				tg.OpenAfter > MaxProbesInARow || tg.CloseAfter > MaxProbesInARow {
				t.Fatalf("invalid target accepted: %+v", tg)
			}
			if tg.Mode != ModeIgnore && tg.Mode != ModeBypass {
				t.Fatalf("mode %q accepted", tg.Mode)
			}
		}
	})
}
