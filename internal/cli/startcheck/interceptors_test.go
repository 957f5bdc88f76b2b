package startcheck

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli/clitest"
	"github.com/webhook-guard/webhook-guard/internal/config"
)

// policyEngine is a Kyverno-like configuration: */*, Fail, excluding
// kube-system and kyverno.
func policyEngine() *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "kyverno-resource-mutating-webhook-cfg"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:          "mutate.kyverno.svc-fail",
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", "kyverno"}},
			}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
			}},
		}},
	}
}

// capture returns a context whose logger appends each line to lines.
func capture(lines *[]string) context.Context {
	return logf.IntoContext(context.Background(), funcr.New(func(prefix, args string) {
		*lines = append(*lines, args)
	}, funcr.Options{}))
}

// failingReader fails every List, after noting its context's deadline.
type failingReader struct {
	client.Reader
	deadline time.Time
}

func (r *failingReader) List(ctx context.Context, _ client.ObjectList, _ ...client.ListOption) error {
	r.deadline, _ = ctx.Deadline()
	return errors.New("the server was unable to return a response in the time allotted")
}

func TestWarnInterceptors(t *testing.T) {
	mutatingTarget := &config.Configuration{Targets: []config.Target{{Kind: circuit.KindMutating, Configuration: "other", Webhook: "a.other.example.com"}}}
	tests := map[string]struct {
		in       Interception
		objs     []client.Object
		contains []string
		lacks    []string
		lines    int
	}{
		"a policy engine's */* webhook is named once, with what it intercepts and the fix": {
			in:   Interception{Namespace: "webhook-guard", LeaderElection: true, Config: mutatingTarget},
			objs: []client.Object{policyEngine()},
			contains: []string{
				`"msg"="Warning: a webhook with failurePolicy Fail intercepts the guard's own requests`,
				`"configuration"="kyverno-resource-mutating-webhook-cfg" "webhook"="mutate.kyverno.svc-fail"`,
				`"intercepts"=["Lease in webhook-guard" "Events in webhook-guard" "marking canary in default"]`,
				"{key: kubernetes.io/metadata.name, operator: NotIn, values: [webhook-guard]}",
			},
			lines: 1,
		},
		"without leader election and mutating targets, only the Events": {
			in:       Interception{Namespace: "webhook-guard", Config: &config.Configuration{}},
			objs:     []client.Object{policyEngine()},
			contains: []string{`"intercepts"=["Events in webhook-guard"]`},
			lacks:    []string{"Lease in", "canary"},
			lines:    1,
		},
		"the Lease in kube-system, as shipped: a policy engine intercepts only the canary": {
			in:       Interception{Namespace: "kube-system", LeaderElection: true, Config: mutatingTarget},
			objs:     []client.Object{policyEngine()},
			contains: []string{`"intercepts"=["marking canary in default"]`},
			lacks:    []string{"Lease in", "Events in"},
			lines:    1,
		},
		"no interceptor, no line": {
			in:    Interception{Namespace: "webhook-guard", LeaderElection: true, Config: mutatingTarget},
			objs:  []client.Object{clitest.OpenConfiguration(t, nil, nil)},
			lines: 0,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var lines []string
			WarnInterceptors(capture(&lines), clitest.FakeReader(tc.objs...), tc.in)
			require.Len(t, lines, tc.lines, "%v", lines)
			all := strings.Join(lines, "\n")
			for _, s := range tc.contains {
				assert.Contains(t, all, s)
			}
			for _, s := range tc.lacks {
				assert.NotContains(t, all, s)
			}
		})
	}
}

func TestWarnInterceptors_aFailedListIsLoggedAndBounded(t *testing.T) {
	var lines []string
	r := &failingReader{}
	start := time.Now()
	WarnInterceptors(capture(&lines), r, Interception{Namespace: "webhook-guard", Config: &config.Configuration{}})
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], `"msg"="Could not check which webhooks intercept the guard's own requests" "error"="the server was unable`)
	require.False(t, r.deadline.IsZero(), "the lists are bounded")
	assert.WithinDuration(t, start.Add(interceptTimeout), r.deadline, time.Second)
}
