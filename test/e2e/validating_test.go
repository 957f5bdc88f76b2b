package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/admission/admissiontest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

const validatePath = "/validate"

// validatingWebhook is configMapWebhook as a validating webhook.
func validatingWebhook(name, namespace, url string, caBundle []byte, policy admissionregistrationv1.FailurePolicyType) admissionregistrationv1.ValidatingWebhook {
	view := &admissionregistrationv1.MutatingWebhookConfiguration{
		Webhooks: []admissionregistrationv1.MutatingWebhook{configMapWebhook(name, namespace, url, caBundle, policy)},
	}
	return admissiontest.AsValidating(view).Webhooks[0]
}

// validatingSetup is one validating target: a webhook that denies every
// ConfigMap it sees in the test's namespace, its ValidatingWebhookConfiguration
// and the guard's ServiceAccount.
type validatingSetup struct {
	t       *testing.T
	ns      string
	name    string
	hook    string
	wh      *harness.Webhook
	guardID *harness.Identity
}

const validatingDenial = "e2e validator: this ConfigMap is not allowed"

func newValidatingSetup(t *testing.T) *validatingSetup {
	t.Helper()
	ctx := context.Background()
	s := &validatingSetup{t: t, ns: testNamespace(t), name: uniqueName(t, "validating")}
	s.hook = "deny." + s.name + ".webhook-guard.io"
	dumpOnFailure(t, s.ns)
	s.wh = startWebhook(t, harness.WebhookOptions{})
	s.wh.SetBehaviour(validatePath, harness.Deny(validatingDenial))
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: s.name},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{validatingWebhook(s.hook, s.ns, s.wh.URL(validatePath), s.wh.CA.CertPEM, admissionregistrationv1.Fail)},
	}
	require.NoError(t, env.Client.Create(ctx, vwc))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), vwc) })
	id, err := env.ServiceAccount(ctx, s.ns, "webhook-guard")
	require.NoError(t, err)
	s.guardID = id
	grantGuard(t, s.ns, id, []string{s.name}, nil)
	return s
}

func (s *validatingSetup) startGuard(mode string) *harness.Guard {
	s.t.Helper()
	g, err := env.StartGuard(harness.GuardOptions{
		Name: "guard", Kubeconfig: s.guardID.KubeconfigPath,
		Config: fmt.Sprintf(`apiVersion: config.webhook-guard.io/v1alpha1
kind: GuardConfiguration
apiserverScrapeInterval: 1s
targets:
- kind: Validating
  configuration: %s
  webhook: %s
  allowAdmissionWithoutValidation: true
  mode: %s
  openAfter: 2
  closeAfter: 2
  probe:
    interval: 100ms
    timeout: 250ms
`, s.name, s.hook, mode),
		Args: []string{"--leader-elect", "--leader-election-namespace", s.ns},
	})
	require.NoError(s.t, err)
	s.t.Cleanup(func() {
		g.Stop()
		if s.t.Failed() {
			s.t.Logf("guard logs:\n%s", g.Logs())
		}
	})
	return g
}

// state is the validating webhook's owned fields as stored.
func (s *validatingSetup) state() (policy admissionregistrationv1.FailurePolicyType, marker bool, record string) {
	s.t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	require.NoError(s.t, env.Client.Get(context.Background(), client.ObjectKey{Name: s.name}, vwc))
	for _, c := range vwc.Webhooks[0].MatchConditions {
		marker = marker || c.Name == circuit.BypassCondition
	}
	return *vwc.Webhooks[0].FailurePolicy, marker, vwc.Annotations[circuit.Annotation]
}

func (s *validatingSetup) waitOpen(mode string) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		p, marker, record := s.state()
		return p == admissionregistrationv1.Ignore && marker == (mode == "Bypass") && strings.Contains(record, s.hook)
	}, transition, 50*time.Millisecond, "the validating circuit never opened")
}

func (s *validatingSetup) waitClosed() {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		p, marker, record := s.state()
		return p == admissionregistrationv1.Fail && !marker && record == ""
	}, transition, 50*time.Millisecond, "the validating circuit never closed")
}

// waitDenied waits until a ConfigMap create is denied by the validator
// itself (not by a failed call).
func (s *validatingSetup) waitDenied(what string) {
	s.t.Helper()
	var err error
	require.Eventually(s.t, func() bool {
		_, err = createConfigMap(context.Background(), env.Client, s.ns)
		return err != nil && strings.Contains(err.Error(), validatingDenial)
	}, transition, 50*time.Millisecond, "%s: the validator's denial never came back (last: %v)", what, err)
}

// TestValidating_fullCycle: a validating webhook that denies a request
// denies it while healthy; while its circuit is open the same request is
// admitted; after close it is denied again. In both modes.
func TestValidating_fullCycle(t *testing.T) {
	for _, mode := range []string{"Ignore", "Bypass"} {
		t.Run(mode, func(t *testing.T) {
			s := newValidatingSetup(t)
			s.waitDenied("healthy, before the guard")
			s.startGuard(mode)

			s.wh.SetBehaviour(validatePath, harness.Delayed(2*time.Second, harness.Deny(validatingDenial)))
			s.waitOpen(mode)
			require.Eventually(t, func() bool {
				_, err := createConfigMap(context.Background(), env.Client, s.ns)
				return err == nil
			}, transition, 50*time.Millisecond, "while open, the request the validator denies was never admitted")
			if mode == "Bypass" {
				before := s.wh.APIServerCalls(validatePath)
				_, err := createConfigMap(context.Background(), env.Client, s.ns)
				require.NoError(t, err)
				assert.Equal(t, before, s.wh.APIServerCalls(validatePath), "Bypass: the apiserver still called the validator")
			}

			s.wh.SetBehaviour(validatePath, harness.Deny(validatingDenial))
			s.waitClosed()
			s.waitDenied("healthy again, after close")

			require.Eventually(t, func() bool {
				notes := eventNotes(t, circuit.KindValidating, s.name)
				for _, reason := range []string{"CircuitOpened", "AdmittingWithoutValidation", "CircuitClosed"} {
					if _, ok := notes[reason]; !ok {
						return false
					}
				}
				return true
			}, transition, 100*time.Millisecond, "the Events of a validating cycle are missing")
		})
	}
}

// TestValidating_reconcilingOperatorIsStoppedWithoutAWriteWar: an operator
// (Kyverno, Gatekeeper, Istio style) re-applies its configuration, with
// failurePolicy Fail, twice a second. While the circuit is open the guard
// refuses those writes; the breaker neither reopens in a loop nor writes
// more than the open and the close. After close the operator's writes
// succeed again.
func TestValidating_reconcilingOperatorIsStoppedWithoutAWriteWar(t *testing.T) {
	ctx := context.Background()
	s := newValidatingSetup(t)
	s.startGuard("Bypass")

	// The guard's policy is enforced once an admin cannot flip the managed
	// failurePolicy (a dry run changes nothing).
	require.Eventually(t, func() bool {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: s.name}, vwc))
		vwc.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
		return apierrors.IsForbidden(env.Client.Update(ctx, vwc, client.DryRunAll))
	}, transition, 100*time.Millisecond, "the guard's policy never covered the validating configuration")

	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: s.name}, vwc))
	w, err := env.Clientset.AdmissionregistrationV1().ValidatingWebhookConfigurations().Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", s.name).String(), ResourceVersion: vwc.ResourceVersion,
	})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	var writesMu sync.Mutex
	var writes []*admissionregistrationv1.ValidatingWebhookConfiguration
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified {
				writesMu.Lock()
				writes = append(writes, ev.Object.(*admissionregistrationv1.ValidatingWebhookConfiguration))
				writesMu.Unlock()
			}
		}
	}()

	// The operator: its desired state is failurePolicy Fail and no
	// matchCondition, stamped with a generation label.
	var accepted, refused atomic.Int64
	var lastAccepted atomic.Value // the resourceVersion of the last accepted write
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker := time.NewTicker(500 * time.Millisecond)
		defer ticker.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-ticker.C:
			}
			live := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if env.Client.Get(ctx, client.ObjectKey{Name: s.name}, live) != nil {
				continue
			}
			live.Labels = map[string]string{"operator-generation": fmt.Sprint(n)}
			live.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Fail)
			live.Webhooks[0].MatchConditions = nil
			switch err := env.Client.Update(ctx, live); {
			case err == nil:
				accepted.Add(1)
				lastAccepted.Store(live.ResourceVersion)
			case apierrors.IsForbidden(err):
				refused.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			close(stop)
			<-done
		}
	})

	s.wh.SetBehaviour(validatePath, harness.Delayed(2*time.Second, harness.Deny(validatingDenial)))
	s.waitOpen("Bypass")
	openedAt := refused.Load()
	require.Eventually(t, func() bool { return refused.Load() >= openedAt+4 }, transition, 100*time.Millisecond,
		"the operator's writes were not refused while the circuit was open")
	p, marker, _ := s.state()
	assert.Equal(t, admissionregistrationv1.Ignore, p, "the operator put Fail back while open")
	assert.True(t, marker)

	s.wh.SetBehaviour(validatePath, harness.Deny(validatingDenial))
	s.waitClosed()
	acceptedAtClose := accepted.Load()
	require.Eventually(t, func() bool { return accepted.Load() >= acceptedAtClose+2 }, transition, 100*time.Millisecond,
		"the operator's writes never succeeded again after close")
	close(stop)
	<-done
	// The watch delivers the last accepted write a moment after it lands.
	require.Eventually(t, func() bool {
		writesMu.Lock()
		defer writesMu.Unlock()
		for _, o := range writes {
			if o.ResourceVersion == lastAccepted.Load() {
				return true
			}
		}
		return false
	}, transition, 20*time.Millisecond, "the watch never delivered the operator's last write")

	writesMu.Lock()
	defer writesMu.Unlock()
	// Each write is the breaker's open (the record appears), its close (the
	// record goes) or an accepted operator write (the label moves).
	var opened, closed, operator int
	prev := vwc
	for _, o := range writes {
		_, had := prev.Annotations[circuit.Annotation]
		_, has := o.Annotations[circuit.Annotation]
		switch {
		case !had && has:
			opened++
		case had && !has:
			closed++
		case o.Labels["operator-generation"] != prev.Labels["operator-generation"]:
			operator++
		}
		prev = o
	}
	t.Logf("operator writes: %d accepted, %d refused; writes to the object: %d (%d open, %d close, %d by the operator)",
		accepted.Load(), refused.Load(), len(writes), opened, closed, operator)
	assert.Equal(t, 1, opened, "the breaker must open once, not in a loop")
	assert.Equal(t, 1, closed, "the breaker must close once")
	assert.EqualValues(t, accepted.Load(), operator, "every accepted operator write, and only those, reached the object")
	assert.Equal(t, opened+closed+operator, len(writes), "no other write reached the object")
}
