//go:build failpoints

package breaker

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// failpointAction is what happens at a failpoint: a SIGKILL with
// probability kill, or a pause of sleep the first time it is reached.
type failpointAction struct {
	kill  float64
	sleep time.Duration
	slept *sync.Once
}

// failpoints holds each point's action, from WEBHOOK_GUARD_FAILPOINTS
// ("before-write=0.5,after-write=0.5" for SIGKILLs with those
// probabilities, "before-write=sleep:3s" for a pause the first time the
// point is reached). The points are those of the breaker's one patch path
// (patch): before-write and after-write around a write of transitions,
// before-arm and after-arm around a write of arming entries alone. This file is compiled only with -tags failpoints, for the
// crash and restart tests.
var failpoints = func() map[string]failpointAction {
	out := map[string]failpointAction{}
	for _, kv := range strings.Split(os.Getenv("WEBHOOK_GUARD_FAILPOINTS"), ",") {
		name, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if d, isSleep := strings.CutPrefix(v, "sleep:"); isSleep {
			if s, err := time.ParseDuration(d); err == nil {
				out[name] = failpointAction{sleep: s, slept: &sync.Once{}}
			}
		} else if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[name] = failpointAction{kill: f}
		}
	}
	return out
}()

// failpoint kills the process with SIGKILL at name with its probability,
// or pauses there the first time. A kill and a pause are announced on
// stderr, so that a test can tell which point fired and act while the
// process waits.
func failpoint(name string) {
	a := failpoints[name]
	if a.sleep > 0 {
		a.slept.Do(func() {
			fmt.Fprintf(os.Stderr, "failpoint %s: sleeping %s\n", name, a.sleep)
			time.Sleep(a.sleep)
			fmt.Fprintf(os.Stderr, "failpoint %s: woke\n", name)
		})
	}
	if a.kill > 0 && rand.Float64() < a.kill {
		fmt.Fprintf(os.Stderr, "failpoint %s: killing\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously
	}
}
