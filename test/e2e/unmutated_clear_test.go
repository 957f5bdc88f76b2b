package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/marking"
)

// While a circuit is open its marking policy marks every object it
// admits, so "guard unmutated --clear" would be undone at once: it is
// refused, exits non-zero and changes nothing; after the close it clears.
// The circuit is opened by hand (the record and Ignore, as the breaker
// writes them): the refusal reads only the record, and a mark anyone may
// set by hand is what --clear removes.
func TestUnmutated_clearIsRefusedWhileTheCircuitIsOpen(t *testing.T) {
	ctx := context.Background()
	s := newBreakerSetup(t, setupOptions{mode: "Ignore"})
	mwc := s.get()
	findWebhook(mwc, s.hook).FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	ann, err := circuit.Encode(mwc.Annotations, circuit.Record{s.hook: {
		UID: mwc.UID, Mode: circuit.ModeIgnore, OpenedAt: metav1.Now(), Reason: "timeout", OriginalFailurePolicy: s.original.FailurePolicy, By: s.guardID.Username,
	}})
	require.NoError(t, err)
	mwc.Annotations = ann
	require.NoError(t, env.Client.Update(ctx, mwc))

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "admitted-while-open", Labels: map[string]string{
		circuit.UnmutatedLabel: marking.ID(s.name, s.hook),
	}}}
	require.NoError(t, env.Client.Create(ctx, cm))

	bin, err := env.BuildGuard()
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "guard.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(s.config("")), 0o600))
	clear := func() (string, error) {
		out, err := exec.Command(bin, "unmutated", "--config", cfg, "--kubeconfig", env.KubeconfigPath, "--clear").CombinedOutput()
		return string(out), err
	}
	out, err := clear()
	t.Logf("$ guard unmutated --clear\n%s", out)
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "guard unmutated --clear succeeded while the circuit was open: %v", err)
	assert.Equal(t, 1, exit.ExitCode())
	assert.Contains(t, out, "refused, nothing was changed: a circuit is open on mutatingwebhookconfiguration "+s.name+" webhook "+s.hook+" (open since ")
	assert.Contains(t, out, "Wait until it closes (guard status shows it), repair the objects, then clear")
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm))
	assert.Equal(t, marking.ID(s.name, s.hook), cm.Labels[circuit.UnmutatedLabel], "the refused --clear removed the mark")

	// Closed (by hand, as the breaker would close it): --clear clears.
	mwc = s.get()
	findWebhook(mwc, s.hook).FailurePolicy = s.original.FailurePolicy
	delete(mwc.Annotations, circuit.Annotation)
	require.NoError(t, env.Client.Update(ctx, mwc))
	out, err = clear()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, out, "Cleared the marks of 1 objects.")
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm))
	assert.NotContains(t, cm.Labels, circuit.UnmutatedLabel)
}
