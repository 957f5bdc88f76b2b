package clustermetrics

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestNewBuildInfo(t *testing.T) {
	bi := NewBuildInfo("v1.2.3", "0123abc", runtime.Version())
	assert.NoError(t, testutil.CollectAndCompare(bi, strings.NewReader(`
# HELP webhook_guard_build_info 1, labelled with the webhook-guard version and commit the binary was built from and the Go version that built it.
# TYPE webhook_guard_build_info gauge
webhook_guard_build_info{commit="0123abc",go_version="`+runtime.Version()+`",version="v1.2.3"} 1
`)))
}

// TestWebhookTimeouts_reportsEveryWebhookOfEveryConfiguration: managed or
// not, with the API default for an unset timeoutSeconds.
func TestWebhookTimeouts_reportsEveryWebhookOfEveryConfiguration(t *testing.T) {
	c := fake.NewClientBuilder().WithObjects(
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "inject"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{
				{Name: "a.inject.example.com", TimeoutSeconds: ptr.To[int32](3)},
				{Name: "b.inject.example.com"},
			},
		},
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "policy"},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "check.example.com", TimeoutSeconds: ptr.To[int32](30)}},
		},
	).Build()
	assert.NoError(t, testutil.CollectAndCompare(&WebhookTimeouts{Reader: c}, strings.NewReader(`
# HELP webhook_guard_webhook_timeout_seconds `+webhookTimeoutHelp+`
# TYPE webhook_guard_webhook_timeout_seconds gauge
webhook_guard_webhook_timeout_seconds{configuration="inject",kind="Mutating",webhook="a.inject.example.com"} 3
webhook_guard_webhook_timeout_seconds{configuration="inject",kind="Mutating",webhook="b.inject.example.com"} 10
webhook_guard_webhook_timeout_seconds{configuration="policy",kind="Validating",webhook="check.example.com"} 30
`)))
}
