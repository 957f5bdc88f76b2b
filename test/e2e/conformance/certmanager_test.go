package conformance

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// certManagerModule is pinned, for the webhook binary as for the CRDs and
// webhook configurations read here, by hack/conformance/cert-manager/go.mod.
const certManagerModule = "github.com/cert-manager/cert-manager"

// TestConformance_certManager: cert-manager's real admission chain, with
// its real CRDs and the MutatingWebhookConfiguration and
// ValidatingWebhookConfiguration its Helm chart renders.
func TestConformance_certManager(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &suite{t: t, name: "cert-manager", ns: "conformance-cert-manager"}
	require.NoError(t, env.EnsureNamespace(ctx, s.ns))

	bin := buildCommand(t, "hack/conformance/install.sh")
	version := certManagerVersion(t)
	moduleDir := downloadModule(t, certManagerModule+"@"+version)
	installCRDs(t, ctx, filepath.Join(moduleDir, "deploy", "crds"))

	// The webhook's own identity, with what cert-manager's chart grants
	// it (webhook-rbac.yaml): SubjectAccessReviews, for the approval plugin.
	id, err := env.ServiceAccount(ctx, s.ns, "cert-manager-webhook")
	require.NoError(t, err)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "conformance-cert-manager-webhook:subjectaccessreviews"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"},
	}}}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Bind(ctx, role.Name, role.Name, s.ns, "cert-manager-webhook"))

	dir := t.TempDir()
	caPEM := servingCert(t, dir)
	port := freePort(t)
	s.process = startProcess(t, "cert-manager-webhook", bin, nil,
		"--secure-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-private-key-file", filepath.Join(dir, "tls.key"),
		"--kubeconfig", id.KubeconfigPath)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.process.waitServing(t, addr, caPEM)

	// The chart's two configurations, rendered from its own templates and
	// default values with webhook.url.host set: the chart's own option
	// for a webhook outside the cluster, which gives clientConfig.url
	// (https://<host>/mutate and /validate) instead of the Service. The
	// caBundle, which cainjector would inject from the chart's CA Secret,
	// is set to the CA of the certificate the process serves.
	chart := filepath.Join(moduleDir, "deploy", "charts", "cert-manager")
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	require.NoError(t, yaml.UnmarshalStrict(renderChart(t, chart, "webhook-mutating-webhook.yaml", version, addr), mwc))
	require.NoError(t, yaml.UnmarshalStrict(renderChart(t, chart, "webhook-validating-webhook.yaml", version, addr), vwc))
	require.Len(t, mwc.Webhooks, 1)
	require.Len(t, vwc.Webhooks, 1)
	mwc.Webhooks[0].ClientConfig.CABundle = caPEM
	vwc.Webhooks[0].ClientConfig.CABundle = caPEM
	require.NoError(t, env.Client.Create(ctx, mwc))
	require.NoError(t, env.Client.Create(ctx, vwc))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), mwc)
		_ = env.Client.Delete(context.Background(), vwc)
	})
	t.Logf("cert-manager %s: MutatingWebhookConfiguration %s (%s), ValidatingWebhookConfiguration %s (%s)",
		version, mwc.Name, *mwc.Webhooks[0].ClientConfig.URL, vwc.Name, *vwc.Webhooks[0].ClientConfig.URL)
	s.targets = []target{
		{kind: circuit.KindMutating, config: mwc.Name, hook: mwc.Webhooks[0].Name, mode: "Bypass"},
		{kind: circuit.KindValidating, config: vwc.Name, hook: vwc.Webhooks[0].Name, mode: "Ignore"},
	}

	// Each round creates a CertificateRequest, which both webhooks see:
	// the mutating one must have set spec.username from the requester
	// (the identity plugin). Every fifth round also creates an Issuer and
	// a Certificate (the validating webhook only), and an Issuer with no
	// issuer type, which the validator denies.
	csr := certificateSigningRequest(t)
	s.traffic = func(ctx context.Context, round int) error {
		cr := cmObject("CertificateRequest", s.ns, "traffic-", map[string]any{
			"request":   csr,
			"issuerRef": map[string]any{"name": "selfsigned", "kind": "Issuer"},
			"usages":    []any{"digital signature", "key encipherment"},
		})
		if err := env.Client.Create(ctx, cr); err != nil {
			return fmt.Errorf("round %d: creating a CertificateRequest: %w", round, err)
		}
		if got, _, _ := unstructured.NestedString(cr.Object, "spec", "username"); got != harness.AdminUsername {
			return fmt.Errorf("round %d: CertificateRequest %s: spec.username %q, want %q (the identity plugin's mutation)", round, cr.GetName(), got, harness.AdminUsername)
		}
		if round%5 != 0 {
			return nil
		}
		issuer := cmObject("Issuer", s.ns, "selfsigned-", map[string]any{"selfSigned": map[string]any{}})
		if err := env.Client.Create(ctx, issuer); err != nil {
			return fmt.Errorf("round %d: creating an Issuer: %w", round, err)
		}
		cert := cmObject("Certificate", s.ns, "traffic-", map[string]any{
			"secretName": fmt.Sprintf("traffic-%d", round),
			"dnsNames":   []any{"traffic.example.com"},
			"issuerRef":  map[string]any{"name": issuer.GetName(), "kind": "Issuer"},
		})
		if err := env.Client.Create(ctx, cert); err != nil {
			return fmt.Errorf("round %d: creating a Certificate: %w", round, err)
		}
		bad := cmObject("Issuer", s.ns, "denied-", map[string]any{})
		err := env.Client.Create(ctx, bad)
		if err == nil || !strings.Contains(err.Error(), `admission webhook "webhook.cert-manager.io" denied the request`) {
			return fmt.Errorf("round %d: an Issuer without an issuer type: want cert-manager's denial, got %v", round, err)
		}
		return nil
	}
	s.run("conformance-cert-manager")
}

func cmObject(kind, namespace, generateName string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1",
		"kind":       kind,
		"metadata":   map[string]any{"namespace": namespace, "generateName": generateName},
		"spec":       spec,
	}}
}

// certificateSigningRequest is a PEM CSR, base64-encoded as
// CertificateRequest.spec.request is in JSON.
func certificateSigningRequest(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "traffic.example.com"}, DNSNames: []string{"traffic.example.com"},
	}, key)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// certManagerVersion is the version hack/conformance/cert-manager/go.mod pins.
func certManagerVersion(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "hack", "conformance", "cert-manager", "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(certManagerModule) + `\s+(v\S+)`).FindSubmatch(data)
	require.NotNil(t, m, "no %s in hack/conformance/cert-manager/go.mod", certManagerModule)
	return string(m[1])
}

// downloadModule puts module@version into the module cache (through the
// module proxy, checked against the checksum database) and returns its
// directory.
func downloadModule(t *testing.T, module string) string {
	t.Helper()
	root, err := harness.RepoRoot()
	require.NoError(t, err)
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go mod download %s:\n%s%s", module, out, stderr.String())
	var info struct{ Dir, Error string }
	require.NoError(t, json.Unmarshal(out, &info))
	require.Empty(t, info.Error)
	require.NotEmpty(t, info.Dir)
	return info.Dir
}

// installCRDs applies every CRD in dir, as the project publishes them,
// and waits until they are served.
func installCRDs(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	args := []string{"apply", "--server-side", "--force-conflicts", "--field-manager=webhook-guard-conformance"}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	r := env.Kubectl(ctx, "", nil, args...)
	require.NoError(t, r.Err, "installing the CRDs in %s:\n%s%s", dir, r.Stdout, r.Stderr)
	// <group>_<plural>.yaml holds the CRD <plural>.<group>.
	wait := []string{"wait", "--for=condition=Established", "--timeout=60s"}
	for _, f := range files {
		group, plural, ok := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".yaml"), "_")
		require.True(t, ok, "unexpected CRD file name %s", f)
		wait = append(wait, "crd/"+plural+"."+group)
	}
	r = env.Kubectl(ctx, "", nil, wait...)
	require.NoError(t, r.Err, "waiting for the CRDs:\n%s%s", r.Stdout, r.Stderr)
	t.Logf("installed cert-manager's CRDs: %s", strings.TrimSpace(r.Stdout))
}

// renderChart renders one of cert-manager's chart templates with the
// chart's own values.yaml and webhook.url.host set to host, as
// "helm template cert-manager --namespace cert-manager --set
// webhook.url.host=<host>" would. The helpers the two webhook templates
// use are defined here with what _helpers.tpl yields for release
// "cert-manager" in namespace "cert-manager"; the other functions are
// Helm's (Sprig's) few used there.
func renderChart(t *testing.T, chart, file, version, host string) []byte {
	t.Helper()
	valuesYAML, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	require.NoError(t, err)
	var values map[string]any
	require.NoError(t, yaml.Unmarshal(valuesYAML, &values))
	webhook, ok := values["webhook"].(map[string]any)
	require.True(t, ok, "values.yaml has no webhook section")
	webhook["url"] = map[string]any{"host": host}
	if _, ok := values["global"].(map[string]any); !ok {
		values["global"] = map[string]any{}
	}
	data := map[string]any{
		"Values":  values,
		"Release": map[string]any{"Name": "cert-manager", "Namespace": "cert-manager", "Service": "Helm"},
		"Chart":   map[string]any{"Name": "cert-manager", "Version": version, "AppVersion": version},
	}
	src, err := os.ReadFile(filepath.Join(chart, "templates", file))
	require.NoError(t, err)

	var tmpl *template.Template
	funcs := template.FuncMap{
		"include": func(name string, data any) (string, error) {
			var b bytes.Buffer
			err := tmpl.ExecuteTemplate(&b, name, data)
			return b.String(), err
		},
		"nindent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"toYaml": func(v any) (string, error) {
			b, err := yaml.Marshal(v)
			return strings.TrimSuffix(string(b), "\n"), err
		},
		"quote": func(v any) string { return strconv.Quote(fmt.Sprint(v)) },
	}
	tmpl = template.Must(template.New(file).Option("missingkey=zero").Funcs(funcs).Parse(`
{{- define "cert-manager.namespace" -}}{{ .Release.Namespace }}{{- end -}}
{{- define "webhook.name" -}}webhook{{- end -}}
{{- define "webhook.fullname" -}}{{ .Release.Name }}-webhook{{- end -}}
{{- define "labels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- if eq .Values.creator "helm" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- if .Values.global.commonLabels}}
{{ toYaml .Values.global.commonLabels }}
{{- end }}
{{- end -}}
`))
	_, err = tmpl.Parse(string(src))
	require.NoError(t, err, "parsing %s", file)
	var out bytes.Buffer
	require.NoError(t, tmpl.ExecuteTemplate(&out, file, data), "rendering %s", file)
	return out.Bytes()
}
