// Package restart tests the breaker across kube-apiserver restarts. It has
// a control plane of its own, started in TestMain, because its tests stop
// and start that control plane's kube-apiserver (etcd keeps running); the
// shared one of package e2e is never restarted.
package restart

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// env is this package's control plane. Tests isolate themselves by
// namespace and object names, and run one at a time: a restart affects
// every client of the apiserver.
var env *harness.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.InfoLevel)))
	start := time.Now()
	var err error
	env, err = harness.Start(harness.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/restart: starting the control plane:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "e2e/restart: control plane up in %s at %s\n", time.Since(start).Round(time.Millisecond), env.Config.Host)
	code := m.Run()
	env.Stop()
	os.Exit(code)
}
