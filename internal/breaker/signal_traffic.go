package breaker

import (
	"time"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// Traffic as the probe (apiserverSignal.trafficAsProbe): when the last
// scrape of kube-apiserver's metrics showed it called a webhook, and every
// call completed without failing within the probe's timeout, a synthetic
// probe would only repeat what those calls said. The probe is skipped
// while that evidence is fresh, and runs again at once when a scrape no
// longer shows it.
//
// A tenant cannot make a webhook that fails for everyone look healthy:
// its calls fail, or hang and complete no call, and either ends the
// stand-in at the next scrape. What it costs is that delay: a failure is
// seen at most one scrape interval late, and the first probe then runs at
// once instead of at its slot.

// trafficFresh is how long a scrape's healthy traffic stands in for the
// probe, for a signal scraped every interval: one interval and half of
// another, so that a late scrape does not let a probe slip in between.
func trafficFresh(interval time.Duration) time.Duration {
	return interval + interval/2
}

// TrafficAsProbe reports whether a target lets traffic stand in for its
// probe: the scrape must then read the latency histograms too.
func TrafficAsProbe(targets []config.Target) bool {
	for _, t := range targets {
		if t.APIServerSignal.Enabled && t.APIServerSignal.TrafficAsProbe {
			return true
		}
	}
	return false
}

// ObserveTraffic records whether the scrape at at showed t's webhook
// called and every call healthy (healthy), and reports whether the
// previous scrape did: a change from true to false means the probe must
// run now.
func (s *State) ObserveTraffic(key string, healthy bool, at time.Time) (was bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.targets[key]
	was = !st.TrafficAt.IsZero()
	st.TrafficAt = time.Time{}
	if healthy {
		st.TrafficAt = at
	}
	s.targets[key] = st
	return was
}

// CoveredByTraffic reports whether key's probe may be skipped at now: its
// last scrape, at most fresh ago, showed healthy traffic, and neither the
// probe nor the apiserver signal has a failure counted (a circuit about
// to open is always probed). Observe targets whose circuit would be open
// are probed too.
func (s *State) CoveredByTraffic(key string, now time.Time, fresh time.Duration) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := s.targets[key]
	return !st.TrafficAt.IsZero() && now.Sub(st.TrafficAt) <= fresh &&
		st.Failures == 0 && st.APIServer.Failures == 0 && !st.Observed.WouldBeOpen()
}

// coveredByTraffic reports whether t's probe is skipped now: the traffic
// stands in for it, and t's circuit is closed (an open circuit is judged
// by the probe, which sees its webhook while the apiserver does not).
func (r *ProbeRunner) coveredByTraffic(t config.Target, view *circuit.ConfigView) bool {
	s := r.signal
	if s == nil || !t.APIServerSignal.Enabled || !t.APIServerSignal.TrafficAsProbe {
		return false
	}
	if view.Annotations[circuit.Annotation] != "" {
		s := r.snapshot(t.Kind, view)
		if s.RecordErr != nil {
			return false
		}
		if _, open := s.Record[t.Webhook]; open {
			return false
		}
	}
	if s.interval > t.Probe.Interval {
		// A scrape less often than the probe would be older evidence than
		// the probe it skips.
		return false
	}
	return r.State.CoveredByTraffic(t.Key(), r.Clock.Now(), trafficFresh(s.interval))
}

// trafficTooRare returns the targets that let traffic stand in for their
// probe but are probed more often than kube-apiserver's /metrics is read
// every interval: their probe always runs.
func trafficTooRare(targets []config.Target, interval time.Duration) []string {
	var out []string
	for _, t := range targets {
		if t.APIServerSignal.Enabled && t.APIServerSignal.TrafficAsProbe && max(interval, MinScrapeInterval) > t.Probe.Interval {
			out = append(out, t.Key())
		}
	}
	return out
}

// kick wakes key's probe loop now, when it waits for its next slot.
func (r *ProbeRunner) kick(key string) {
	select {
	case r.kicks[key] <- struct{}{}:
	default:
	}
}
