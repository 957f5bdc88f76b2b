package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// env is the one control plane every test in this package shares. Tests
// isolate themselves by namespace and object names, never by sleeping.
var env *harness.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	start := time.Now()
	// The product's static webhook must be serving, and its manifest
	// written, before the apiserver starts (guard_equivalence_test.go).
	guardManifests, err := startGuardStatic()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting webhook-guard's static webhook:", err)
		os.Exit(1)
	}
	binaryManifest, err := prepareBinaryStatic()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: preparing the guard binary's static webhook:", err)
		stopGuardStatic()
		os.Exit(1)
	}
	maps.Copy(guardManifests, binaryManifest)
	env, err = harness.Start(harness.Options{ExtraStaticManifests: guardManifests})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting the control plane:", err)
		stopGuardStatic()
		removeBinaryStatic()
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "e2e: control plane up in %s at %s\n", time.Since(start).Round(time.Millisecond), env.Config.Host)
	code := m.Run()
	env.Stop()
	stopGuardStatic()
	removeBinaryStatic()
	os.Exit(code)
}

var seq atomic.Uint32

// uniqueName returns a DNS-safe name unique within this test run.
func uniqueName(t *testing.T, prefix string) string {
	t.Helper()
	return fmt.Sprintf("%s-%d", prefix, seq.Add(1))
}

// testNamespace creates a namespace of the test's own.
func testNamespace(t *testing.T) string {
	t.Helper()
	ns := uniqueName(t, "e2e")
	if err := env.EnsureNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns
}

// dumpOnFailure prints the admission objects and the events of namespace
// when t fails, so a red run explains itself.
func dumpOnFailure(t *testing.T, namespaces ...string) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, args := range [][]string{
			{"get", "mutatingwebhookconfigurations,validatingwebhookconfigurations,validatingadmissionpolicies,validatingadmissionpolicybindings", "-o", "yaml"},
			{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		} {
			r := env.Kubectl(ctx, "", nil, args...)
			t.Logf("kubectl %s:\n%s%s", strings.Join(args, " "), r.Stdout, r.Stderr)
		}
		for _, ns := range namespaces {
			r := env.Kubectl(ctx, "", nil, "get", "all,configmaps", "-n", ns, "-o", "wide")
			t.Logf("namespace %s:\n%s%s", ns, r.Stdout, r.Stderr)
		}
	})
}

func zapLevel() zapcore.Level {
	if os.Getenv("E2E_VERBOSE") != "" {
		return -1
	}
	return 0
}

// configMapWebhook is harness.ConfigMapWebhook, shared with the other e2e
// packages.
func configMapWebhook(name, namespace, url string, caBundle []byte, policy admissionregistrationv1.FailurePolicyType) admissionregistrationv1.MutatingWebhook {
	return harness.ConfigMapWebhook(name, namespace, url, caBundle, policy)
}
