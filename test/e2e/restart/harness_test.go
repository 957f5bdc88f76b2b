package restart

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RestartAPIServer keeps every credential handed out before it working:
// the admin's client certificate (same client CA, same serving CA, same
// port) and a ServiceAccount token (same signing key and issuer); and what
// was stored before is still there (same etcd).
func TestRestartAPIServer_keepsClientsTokensAndState(t *testing.T) {
	ctx := context.Background()
	id, err := env.ServiceAccount(ctx, "restart-harness", "someone")
	require.NoError(t, err)
	whoami := func() (string, error) {
		cs, err := kubernetes.NewForConfig(id.Config)
		if err != nil {
			return "", err
		}
		r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return r.Status.UserInfo.Username, nil
	}
	user, err := whoami()
	require.NoError(t, err)
	require.Equal(t, id.Username, user)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "restart-harness", Name: "before"}}
	require.NoError(t, env.Client.Create(ctx, cm))
	host := env.Config.Host

	down, err := env.RestartAPIServer(ctx, time.Second)
	require.NoError(t, err)
	t.Logf("kube-apiserver was unreachable for %s (1 s of it kept down on purpose)", down.Round(time.Millisecond))
	require.Equal(t, host, env.Config.Host)

	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}), "the admin's client certificate or the object did not survive")
	user, err = whoami()
	require.NoError(t, err, "the ServiceAccount token stopped working")
	require.Equal(t, id.Username, user)
	r := env.Kubectl(ctx, "", nil, "get", "configmap", "-n", "restart-harness", "before")
	require.NoError(t, r.Err, r.Stderr)

	// A second restart works as well: nothing is regenerated on the way.
	_, err = env.RestartAPIServer(ctx, 0)
	require.NoError(t, err)
	_, err = whoami()
	require.NoError(t, err, "the ServiceAccount token stopped working after a second restart")
}
