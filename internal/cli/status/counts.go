package status

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	statusapi "github.com/webhook-guard/webhook-guard/internal/status"
)

// fetchStatus reads a guard's /status at endpoint. With a token (an
// https endpoint: the metrics port, whose certificate is self-signed, as
// kube-apiserver's pods proxy also accepts it), it authenticates with it.
// When nothing answers there, the error is a noLeaderError.
func fetchStatus(ctx context.Context, endpoint, token string) ([]statusapi.Row, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return nil, err
	}
	client := http.DefaultClient
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}} //nolint:gosec // the guard's self-signed metrics certificate; the token is short-lived and read-only
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, noLeaderError{err} // nothing answers there
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", endpoint, resp.Status)
	}
	var rows []statusapi.Row
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", endpoint, err)
	}
	return rows, nil
}

// noLeaderError says that the installation has no leader: its Lease does
// not exist, has no holder, or has expired; or nothing answers at
// --endpoint.
type noLeaderError struct{ error }

func (e noLeaderError) Unwrap() error { return e.error }

// IsNoLeader reports whether err says that the installation has no
// leader (a noLeaderError, from Leader or leaderPod).
func IsNoLeader(err error) bool { return errors.As(err, new(noLeaderError)) }

// Leader returns the holder identity of the leader-election Lease
// namespace/lease. When the Lease says nobody leads (it does not exist,
// has no holder, or has expired), the error is a noLeaderError
// (IsNoLeader); any other error is a failure to read the Lease, which
// says nothing about a leader.
func Leader(ctx context.Context, c client.Reader, namespace, lease string) (string, error) {
	l := &coordinationv1.Lease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: lease}, l); err != nil {
		err = fmt.Errorf("reading the leader's Lease %s/%s: %w", namespace, lease, err)
		if apierrors.IsNotFound(err) {
			return "", noLeaderError{err}
		}
		return "", err
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder == "" {
		return "", noLeaderError{fmt.Errorf("no leader: Lease %s/%s has no holder", namespace, lease)}
	}
	if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
		if expired := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second); time.Now().After(expired) {
			return "", noLeaderError{fmt.Errorf("no leader: Lease %s/%s held by %s expired %s ago", namespace, lease, holder, time.Since(expired).Round(time.Second))}
		}
	}
	return holder, nil
}

// leaderPod returns the pod, in namespace, that holds the leader-election
// Lease. The holder identity is "<pod name>_<uuid>" (controller-runtime's
// default: the hostname, which is the pod name). When the Lease says
// nobody leads, the error is a noLeaderError.
func leaderPod(ctx context.Context, c client.Reader, namespace string, lease client.ObjectKey) (*corev1.Pod, error) {
	holder, err := Leader(ctx, c, lease.Namespace, lease.Name)
	if err != nil {
		return nil, err
	}
	name, _, _ := strings.Cut(holder, "_")
	pod := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		return nil, fmt.Errorf("reading the leader pod %s/%s (Lease holder %s): %w", namespace, name, holder, err)
	}
	return pod, nil
}

// proxyStatus reads the leader pod's GET /status through the apiserver's
// pods proxy, which authenticates the caller and authorizes get
// pods/proxy, then deletes the caller's credentials before it connects to
// the pod. The guard serves /status on its metrics port (HTTPS) and
// authenticates and authorizes each request itself (internal/status), so
// proxyStatus sends a short-lived token of the status reader
// (statusToken) in statusapi.TokenHeader. A pod that still names a
// "status" port was installed before that: its plain /status is read as
// it was.
func proxyStatus(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod) ([]statusapi.Row, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	if port := containerPort(pod, statusapi.LegacyPort); port != 0 {
		body, err := cs.CoreV1().Pods(pod.Namespace).ProxyGet("http", pod.Name, strconv.Itoa(port), "status", nil).DoRaw(ctx)
		if err != nil {
			return nil, err
		}
		return decodeStatus(body)
	}
	port := containerPort(pod, statusapi.MetricsPort)
	if port == 0 {
		return nil, fmt.Errorf("the pod has no container port named %q, where the guard serves /status (is --metrics-bind-address off?)", statusapi.MetricsPort)
	}
	token, err := statusToken(ctx, cs, pod.Namespace)
	if err != nil {
		return nil, err
	}
	res := cs.CoreV1().RESTClient().Get().Namespace(pod.Namespace).Resource("pods").SubResource("proxy").
		Name(utilnet.JoinSchemeNamePort("https", pod.Name, strconv.Itoa(port))).Suffix(statusapi.Path).
		SetHeader(statusapi.TokenHeader, token).Do(ctx)
	// Error, unlike Raw, decodes the apiserver's own Status.
	if err := res.Error(); err != nil {
		if refused := refusedByGuard(err, pod.Namespace); refused != nil {
			return nil, refused
		}
		return nil, err
	}
	body, err := res.Raw()
	if err != nil {
		return nil, err
	}
	return decodeStatus(body)
}

// statusToken requests a token of the status reader, in the
// installation's namespace, for statusapi.Audience: it lives
// statusapi.TokenSeconds and authenticates to nothing but a guard's /status.
// The caller needs create on serviceaccounts/token for that one name (the
// Role webhook-guard-status-user).
func statusToken(ctx context.Context, cs kubernetes.Interface, namespace string) (string, error) {
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, statusapi.ReaderServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{statusapi.Audience}, ExpirationSeconds: ptr.To[int64](statusapi.TokenSeconds)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token of ServiceAccount %s/%s, which reads /status (bind the Role webhook-guard-status-user to yourself): %w", namespace, statusapi.ReaderServiceAccount, err)
	}
	return tr.Status.Token, nil
}

// refusedByGuard explains a 401 or 403 that the guard answered, not the
// apiserver. The apiserver's own refusals are Status objects; client-go
// turns the guard's plain-text answer into a StatusError whose cause is
// an unexpected server response. It returns nil for anything else.
func refusedByGuard(err error, namespace string) error {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return nil
	}
	status := st.Status()
	if status.Code != http.StatusUnauthorized && status.Code != http.StatusForbidden || status.Details == nil {
		return nil
	}
	for _, cause := range status.Details.Causes {
		if cause.Type != metav1.CauseTypeUnexpectedServerResponse {
			continue
		}
		reader := "system:serviceaccount:" + namespace + ":" + statusapi.ReaderServiceAccount
		if status.Code == http.StatusUnauthorized {
			return fmt.Errorf("the leader did not accept the token of %s (401 Unauthorized): %s", reader, cause.Message)
		}
		return fmt.Errorf("the leader does not let %s read /status (403 Forbidden; is the ClusterRole webhook-guard-status-reader bound to it?): %s", reader, cause.Message)
	}
	return nil
}

// containerPort returns the pod's container port of that name, or 0.
func containerPort(pod *corev1.Pod, name string) int {
	for _, ctr := range pod.Spec.Containers {
		for _, p := range ctr.Ports {
			if p.Name == name {
				return int(p.ContainerPort)
			}
		}
	}
	return 0
}

func decodeStatus(body []byte) ([]statusapi.Row, error) {
	var rows []statusapi.Row
	if err := json.Unmarshal(body, &rows); err != nil {
		return nil, fmt.Errorf("the leader's /status is not JSON: %w", err)
	}
	return rows, nil
}
