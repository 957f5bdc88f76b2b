//go:build failpoints

package breaker

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// failpoints holds each point's probability of a SIGKILL, from
// WEBHOOK_GUARD_FAILPOINTS ("before-write=0.5,after-write=0.5"). This file
// is compiled only with -tags failpoints, for the crash tests.
var failpoints = func() map[string]float64 {
	out := map[string]float64{}
	for _, kv := range strings.Split(os.Getenv("WEBHOOK_GUARD_FAILPOINTS"), ",") {
		name, p, ok := strings.Cut(kv, "=")
		if f, err := strconv.ParseFloat(p, 64); ok && err == nil {
			out[name] = f
		}
	}
	return out
}()

// failpoint kills the process with SIGKILL at name with its probability.
func failpoint(name string) {
	if p := failpoints[name]; p > 0 && rand.Float64() < p {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously
	}
}
