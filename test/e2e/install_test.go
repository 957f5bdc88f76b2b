package e2e

// These tests install webhook-guard the way an operator does, with the real
// kustomize and kubectl, and check what the installation grants and that
// the real service works with exactly that. No kubelet or
// kube-controller-manager runs here, so the Deployment never gets pods; the
// service runs out of cluster as the installed ServiceAccount instead.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/marking"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// The installation's names (deploy/kustomize/base).
const (
	installNamespace      = "webhook-guard-system"
	installServiceAccount = "webhook-guard"
	installUser           = "system:serviceaccount:" + installNamespace + ":" + installServiceAccount
	// installTarget is the example target in base/config.yaml. Only
	// TestInstall_guardRunsAsInstalledServiceAccount creates a
	// configuration of this name.
	installTarget        = "slow-mutator"
	installTargetWebhook = "slow-mutator.example.com"
	// The default overlay's validating target.
	installValidating        = "policy-engine"
	installValidatingWebhook = "validate.policy-engine.example.com"
	installLeaseName         = "webhook-guard.webhook-guard.io"
)

// installMarking is the example target's marking policy, installed by
// the base (generated/marking.yaml).
var installMarking = marking.Name(installTarget, installTargetWebhook)

// installOverlays are the overlays under deploy/kustomize/overlays;
// TestInstall_everyOverlayAndComponentIsApplied keeps the list complete.
// default-prometheus is how components/prometheus is applied.
var installOverlays = []string{"default", "cert-manager", "static-admission", "default-prometheus"}

// installBuild runs the real kustomize on an overlay.
func installBuild(t *testing.T, ctx context.Context, overlay string) []byte {
	t.Helper()
	root, err := harness.RepoRoot()
	require.NoError(t, err)
	r := env.Kustomize(ctx, "build", filepath.Join(root, "deploy", "kustomize", "overlays", overlay))
	require.NoError(t, r.Err, "kustomize build %s:\n%s", overlay, r.Stderr)
	return []byte(r.Stdout)
}

// installApply runs "kustomize build overlay | kubectl apply -f -" and
// returns kubectl's result, failing on any error. The CRDs the overlay's
// objects need are installed first, from their projects (crds_test.go).
func installApply(t *testing.T, ctx context.Context, overlay string) harness.Result {
	t.Helper()
	out := installBuild(t, ctx, overlay)
	installCRDsFor(t, ctx, installDocs(t, out))
	r := env.Kubectl(ctx, "", out, "apply", "-f", "-")
	require.NoError(t, r.Err, "kubectl apply of overlay %s:\n%s%s", overlay, r.Stdout, r.Stderr)
	return r
}

// installDocs splits a kustomize build into its objects.
func installDocs(t *testing.T, out []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	for _, doc := range bytes.Split(out, []byte("\n---\n")) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal(doc, &obj))
		docs = append(docs, obj)
	}
	return docs
}

func TestInstall_overlaysApplyCleanlyAndIdempotently(t *testing.T) {
	ctx := context.Background()
	dumpOnFailure(t, installNamespace)
	for _, overlay := range installOverlays {
		t.Run(overlay, func(t *testing.T) {
			objs := installDocs(t, installBuild(t, ctx, overlay))
			require.NotEmpty(t, objs)
			for _, obj := range objs {
				// kube-apiserver never calls an API-registered webhook for
				// writes to MutatingWebhookConfigurations (docs/platform-facts.md;
				// docs/design/20261130.enforcement-points.md): no overlay may
				// ship one.
				assert.NotEqual(t, "ValidatingWebhookConfiguration", obj["kind"], "overlay %s ships a ValidatingWebhookConfiguration", overlay)
			}

			// The namespace warns about (and enforces) the restricted Pod
			// Security Standard, so a Deployment that violates it shows up
			// as a warning here.
			first := installApply(t, ctx, overlay)
			assert.NotContains(t, first.Stderr, "PodSecurity", "applying %s: the Deployment must meet the restricted Pod Security Standard", overlay)

			pdbBefore := installPDBVersion(t, ctx)
			second := installApply(t, ctx, overlay)
			assert.NotContains(t, second.Stderr, "Warning:", "second apply of %s printed warnings", overlay)
			lines := strings.Split(strings.TrimSpace(second.Stdout), "\n")
			assert.Len(t, lines, len(objs), "kubectl reports one line per object")
			for _, line := range lines {
				if line == "poddisruptionbudget.policy/webhook-guard configured" {
					// policy/v1 PodDisruptionBudget's spec.selector has
					// patchStrategy "replace", so kubectl's client-side apply
					// always sends a non-empty patch and says "configured"
					// (kubernetes/kubernetes#99290). The object must still
					// be untouched.
					assert.Equal(t, pdbBefore, installPDBVersion(t, ctx), "applying %s twice changed the PodDisruptionBudget", overlay)
					continue
				}
				assert.True(t, strings.HasSuffix(line, " unchanged"), "applying %s twice changed something: %q", overlay, line)
			}
		})
	}
}

// TestInstall_everyOverlayAndComponentIsApplied: the apply test above
// covers every overlay in the repository, and every kustomize Component
// is used by at least one of them, so nothing under deploy/kustomize
// ships without having been applied to a real apiserver.
func TestInstall_everyOverlayAndComponentIsApplied(t *testing.T) {
	root, err := harness.RepoRoot()
	require.NoError(t, err)
	dirs := func(sub string) []string {
		entries, err := os.ReadDir(filepath.Join(root, "deploy", "kustomize", sub))
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			if e.IsDir() {
				names = append(names, e.Name())
			}
		}
		return names
	}
	assert.ElementsMatch(t, dirs("overlays"), installOverlays, "installOverlays must list exactly the overlays in deploy/kustomize/overlays")

	used := sets.New[string]()
	for _, overlay := range installOverlays {
		dir := filepath.Join(root, "deploy", "kustomize", "overlays", overlay)
		data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		require.NoError(t, err)
		var k struct {
			Components []string `json:"components"`
		}
		require.NoError(t, yaml.Unmarshal(data, &k))
		for _, c := range k.Components {
			used.Insert(filepath.Base(filepath.Clean(filepath.Join(dir, c))))
		}
	}
	for _, c := range dirs("components") {
		assert.True(t, used.Has(c), "no overlay in installOverlays uses the component %s, so it is never applied", c)
	}
}

// installPDBVersion returns the installed PodDisruptionBudget's
// resourceVersion. No disruption controller runs here, so only a write
// through the API changes it.
func installPDBVersion(t *testing.T, ctx context.Context) string {
	t.Helper()
	pdb := &policyv1.PodDisruptionBudget{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: "webhook-guard"}, pdb))
	return pdb.ResourceVersion
}

// installCanI is one "kubectl auth can-i" question about the installed
// ServiceAccount.
type installCanI struct {
	args []string
	want bool
}

func TestInstall_RBACIsLeastPrivilege(t *testing.T) {
	ctx := context.Background()
	dumpOnFailure(t, installNamespace)
	objs := installDocs(t, installBuild(t, ctx, "default"))
	installApply(t, ctx, "default")
	installRemoveOtherOverlaysRBAC(t, ctx, objs)
	installOnlyOwnBindings(t, ctx, objs)
	// kubectl auth can-i answers "no" for a resource kube-apiserver does
	// not serve, whatever RBAC says.
	installCertManagerCRDs(t, ctx)

	cases := map[string]installCanI{
		"patch the target configuration":                           {[]string{"patch", "mutatingwebhookconfigurations/" + installTarget}, true},
		"not update the target configuration (patch is its write)": {[]string{"update", "mutatingwebhookconfigurations/" + installTarget}, false},
		"not patch a configuration that is not a target":           {[]string{"patch", "mutatingwebhookconfigurations/not-a-target"}, false},
		"not patch configurations by no name":                      {[]string{"patch", "mutatingwebhookconfigurations"}, false},
		"not delete the target configuration":                      {[]string{"delete", "mutatingwebhookconfigurations/" + installTarget}, false},
		"not create mutating webhook configurations":               {[]string{"create", "mutatingwebhookconfigurations"}, false},
		"list configurations (the manager caches them)":            {[]string{"list", "mutatingwebhookconfigurations"}, true},
		"watch configurations (the manager caches them)":           {[]string{"watch", "mutatingwebhookconfigurations"}, true},
		"patch the validating target configuration":                {[]string{"patch", "validatingwebhookconfigurations/" + installValidating}, true},
		"not update the validating target (patch is its write)":    {[]string{"update", "validatingwebhookconfigurations/" + installValidating}, false},
		"not patch a validating configuration that is no target":   {[]string{"patch", "validatingwebhookconfigurations/anything"}, false},
		"not patch the mutating target's name as validating":       {[]string{"patch", "validatingwebhookconfigurations/" + installTarget}, false},
		"not delete the validating target configuration":           {[]string{"delete", "validatingwebhookconfigurations/" + installValidating}, false},
		"not create validating webhook configurations":             {[]string{"create", "validatingwebhookconfigurations"}, false},
		"list validating configurations (the manager caches them)": {[]string{"list", "validatingwebhookconfigurations"}, true},
		// The guard policy bounds the token, and kube-apiserver runs no
		// admission policy on writes to admission policies: no write verb
		// on any policy or binding (TestInstall_breakersTokenCannotLoosenItsGuard).
		"read the guard policy":                  {[]string{"get", "validatingadmissionpolicies.admissionregistration.k8s.io/webhook-guard"}, true},
		"watch the guard policy":                 {[]string{"watch", "validatingadmissionpolicies.admissionregistration.k8s.io"}, true},
		"read the guard binding":                 {[]string{"get", "validatingadmissionpolicybindings.admissionregistration.k8s.io/webhook-guard"}, true},
		"not create the guard policy":            {[]string{"create", "validatingadmissionpolicies.admissionregistration.k8s.io"}, false},
		"not create the guard binding":           {[]string{"create", "validatingadmissionpolicybindings.admissionregistration.k8s.io"}, false},
		"not update the guard policy":            {[]string{"update", "validatingadmissionpolicies.admissionregistration.k8s.io/webhook-guard"}, false},
		"not update the guard binding":           {[]string{"update", "validatingadmissionpolicybindings.admissionregistration.k8s.io/webhook-guard"}, false},
		"not patch the guard policy":             {[]string{"patch", "validatingadmissionpolicies.admissionregistration.k8s.io/webhook-guard"}, false},
		"not patch the guard binding":            {[]string{"patch", "validatingadmissionpolicybindings.admissionregistration.k8s.io/webhook-guard"}, false},
		"not delete the guard policy":            {[]string{"delete", "validatingadmissionpolicies.admissionregistration.k8s.io/webhook-guard"}, false},
		"not delete the guard binding":           {[]string{"delete", "validatingadmissionpolicybindings.admissionregistration.k8s.io/webhook-guard"}, false},
		"not deletecollection the guard policy":  {[]string{"deletecollection", "validatingadmissionpolicies.admissionregistration.k8s.io"}, false},
		"not deletecollection the guard binding": {[]string{"deletecollection", "validatingadmissionpolicybindings.admissionregistration.k8s.io"}, false},
		"not delete another policy":              {[]string{"delete", "validatingadmissionpolicies.admissionregistration.k8s.io/other"}, false},
		"not patch another policy binding":       {[]string{"patch", "validatingadmissionpolicybindings.admissionregistration.k8s.io/other"}, false},
		"not read Secrets in kube-system":        {[]string{"get", "secrets", "-n", "kube-system"}, false},
		// No webhook server, so no certificate: no Secret at all, not even
		// the one components/static-admission keeps its CA in
		// (TestInstall_staticAdmissionRBACIsItsCertificateSecretOnly).
		"not read the certificate Secret (no webhook server)":     {[]string{"get", "secrets/webhook-guard-certs", "-n", installNamespace}, false},
		"not update the certificate Secret (no webhook server)":   {[]string{"update", "secrets/webhook-guard-certs", "-n", installNamespace}, false},
		"not create Secrets in its namespace":                     {[]string{"create", "secrets", "-n", installNamespace}, false},
		"not read another Secret in its namespace":                {[]string{"get", "secrets/other", "-n", installNamespace}, false},
		"not list Secrets in its namespace":                       {[]string{"list", "secrets", "-n", installNamespace}, false},
		"not list Secrets anywhere":                               {[]string{"list", "secrets", "-A"}, false},
		"not create ConfigMaps cluster-wide":                      {[]string{"create", "configmaps", "-A"}, false},
		"not read ConfigMaps in its namespace (config is a file)": {[]string{"get", "configmaps", "-n", installNamespace}, false},
		// The Lease is in kube-system, which policy engines'
		// */* webhooks leave out (docs/security.md).
		"create Leases in kube-system":                         {[]string{"create", "leases.coordination.k8s.io", "-n", "kube-system"}, true},
		"update its own Lease in kube-system":                  {[]string{"update", "leases.coordination.k8s.io/" + installLeaseName, "-n", "kube-system"}, true},
		"not update another Lease in kube-system":              {[]string{"update", "leases.coordination.k8s.io/kube-controller-manager", "-n", "kube-system"}, false},
		"not patch its own Lease (update renews it)":           {[]string{"patch", "leases.coordination.k8s.io/" + installLeaseName, "-n", "kube-system"}, false},
		"not delete Leases in kube-system":                     {[]string{"delete", "leases.coordination.k8s.io/" + installLeaseName, "-n", "kube-system"}, false},
		"get a Lease in kube-system (another installation's)":  {[]string{"get", "leases.coordination.k8s.io/other", "-n", "kube-system"}, true},
		"not list Leases in kube-system":                       {[]string{"list", "leases.coordination.k8s.io", "-n", "kube-system"}, false},
		"not create Leases in its namespace":                   {[]string{"create", "leases.coordination.k8s.io", "-n", installNamespace}, false},
		"get its Lease's name in its namespace (the handover)": {[]string{"get", "leases.coordination.k8s.io/" + installLeaseName, "-n", installNamespace}, true},
		"not get another Lease in its namespace":               {[]string{"get", "leases.coordination.k8s.io/other", "-n", installNamespace}, false},
		"not create Leases in default":                         {[]string{"create", "leases.coordination.k8s.io", "-n", "default"}, false},
		// Before it first leads, where the other revision of a rollout
		// keeps its Lease (the handover).
		"list ReplicaSets in its namespace": {[]string{"list", "replicasets.apps", "-n", installNamespace}, true},
		"not list ReplicaSets elsewhere":    {[]string{"list", "replicasets.apps", "-n", "default"}, false},
		"not update ReplicaSets":            {[]string{"update", "replicasets.apps", "-n", installNamespace}, false},
		"not list Pods in its namespace":    {[]string{"list", "pods", "-n", installNamespace}, false},
		// Whether another installation runs: its Deployment says where
		// its Lease is.
		"get another installation's Deployment by its name": {[]string{"get", "deployments.apps/webhook-guard", "-n", "anywhere"}, true},
		"not get another Deployment":                        {[]string{"get", "deployments.apps/other", "-n", installNamespace}, false},
		"not list Deployments":                              {[]string{"list", "deployments.apps", "-A"}, false},
		"not update its own Deployment":                     {[]string{"update", "deployments.apps/webhook-guard", "-n", installNamespace}, false},
		// Events about cluster-scoped objects in kube-system, out of
		// reach of policy engines' */* webhooks.
		"create events.k8s.io Events in kube-system":               {[]string{"create", "events.events.k8s.io", "-n", "kube-system"}, true},
		"patch events.k8s.io Events in kube-system":                {[]string{"patch", "events.events.k8s.io", "-n", "kube-system"}, true},
		"not create events.k8s.io Events in default":               {[]string{"create", "events.events.k8s.io", "-n", "default"}, false},
		"not delete Events in kube-system":                         {[]string{"delete", "events.events.k8s.io", "-n", "kube-system"}, false},
		"not list Events in kube-system":                           {[]string{"list", "events.events.k8s.io", "-n", "kube-system"}, false},
		"create core Events for leader election, on its Lease":     {[]string{"create", "events", "-n", "kube-system"}, true},
		"not create core Events in its namespace":                  {[]string{"create", "events", "-n", installNamespace}, false},
		"create core Events in default (the marking canary)":       {[]string{"create", "events", "-n", "default"}, true},
		"not patch core Events in default (the canary is created)": {[]string{"patch", "events", "-n", "default"}, false},
		"get a Service in any namespace":                           {[]string{"get", "services", "-n", "anywhere"}, true},
		// The probe resolves Services from a watch. A leaked
		// token enumerates Services, and no more (docs/security.md).
		"list Services (the probe watches its targets' Services)":  {[]string{"list", "services", "-n", "anywhere"}, true},
		"watch Services (the probe watches its targets' Services)": {[]string{"watch", "services", "-A"}, true},
		// The example targets name no path probe Service, and the
		// ClusterRole never grants the path probe: its grant is a Role in
		// the Service's namespace (TestPathProbeRBAC_grantsTheTargetsNamespaceOnly).
		"not get through a Service's proxy": {[]string{"get", "services/https:slow-mutator:443", "--subresource=proxy", "-n", "slow-mutator"}, false},
		"not create Services":               {[]string{"create", "services", "-n", "anywhere"}, false},
		"not update Services":               {[]string{"update", "services", "-n", "anywhere"}, false},
		"not patch Services":                {[]string{"patch", "services", "-n", "anywhere"}, false},
		"not delete Services":               {[]string{"delete", "services", "-n", "anywhere"}, false},
		"not get Endpoints":                 {[]string{"get", "endpoints", "-n", "anywhere"}, false},
		"not list Endpoints":                {[]string{"list", "endpoints", "-A"}, false},
		"not list EndpointSlices":           {[]string{"list", "endpointslices.discovery.k8s.io", "-A"}, false},
		"get a cert-manager Certificate to diagnose TLS failures": {[]string{"get", "certificates.cert-manager.io", "-n", "anywhere"}, true},
		"not list cert-manager Certificates":                      {[]string{"list", "certificates.cert-manager.io", "-n", "anywhere"}, false},
		"create SelfSubjectReviews":                               {[]string{"create", "selfsubjectreviews.authentication.k8s.io"}, true},
		"create SelfSubjectAccessReviews":                         {[]string{"create", "selfsubjectaccessreviews.authorization.k8s.io"}, true},
		"not create Pods in its namespace":                        {[]string{"create", "pods", "-n", installNamespace}, false},
		"not impersonate":                                         {[]string{"impersonate", "serviceaccounts", "-A"}, false},
		// The token cannot mutate anything. The marking policies
		// are installed with everything else; the service only reads them.
		"read marking policies":                         {[]string{"get", "mutatingadmissionpolicies.admissionregistration.k8s.io/" + installMarking}, true},
		"watch marking policies":                        {[]string{"watch", "mutatingadmissionpolicies.admissionregistration.k8s.io"}, true},
		"not create mutating admission policies":        {[]string{"create", "mutatingadmissionpolicies.admissionregistration.k8s.io"}, false},
		"not create mutating admission policy bindings": {[]string{"create", "mutatingadmissionpolicybindings.admissionregistration.k8s.io"}, false},
		"not update the marking policy":                 {[]string{"update", "mutatingadmissionpolicies.admissionregistration.k8s.io/" + installMarking}, false},
		"not patch the marking policy":                  {[]string{"patch", "mutatingadmissionpolicies.admissionregistration.k8s.io/" + installMarking}, false},
		"not delete the marking policy":                 {[]string{"delete", "mutatingadmissionpolicies.admissionregistration.k8s.io/" + installMarking}, false},
		"not update the marking binding":                {[]string{"update", "mutatingadmissionpolicybindings.admissionregistration.k8s.io/" + installMarking}, false},
		"not delete the marking binding":                {[]string{"delete", "mutatingadmissionpolicybindings.admissionregistration.k8s.io/" + installMarking}, false},
		"not update any mutating admission policy":      {[]string{"update", "mutatingadmissionpolicies.admissionregistration.k8s.io/other"}, false},
	}
	require.GreaterOrEqual(t, len(cases), 10)
	installAskAll(t, ctx, cases)
}

// TestInstall_breakersTokenCannotLoosenItsGuard: with the installed
// ServiceAccount's real token, every write to the guard policy and its
// binding is Forbidden (kube-apiserver runs no admission policy on them,
// so RBAC is their only bound), and the shipped policy refuses the
// token's repoint of an approved webhook's clientConfig at another
// server, while it admits the token's own field (the control).
func TestInstall_breakersTokenCannotLoosenItsGuard(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns, installNamespace)
	installApply(t, ctx, "default")
	id, err := env.ServiceAccount(ctx, installNamespace, installServiceAccount)
	require.NoError(t, err)
	require.Equal(t, installUser, id.Username)

	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	require.NoError(t, id.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, policy), "the token reads its policy")
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	require.NoError(t, id.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, binding))
	audit := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"validationActions":["Audit"]}}`))
	ignore := policy.DeepCopy()
	ignore.Spec.FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
	loosened := binding.DeepCopy()
	loosened.Spec.ValidationActions = []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}
	other := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "webhook-guard-escalation"}, Spec: policy.Spec}
	otherBinding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "webhook-guard-escalation"}, Spec: binding.Spec}
	for name, write := range map[string]func() error{
		"create a policy":             func() error { return id.Client.Create(ctx, other.DeepCopy()) },
		"create a binding":            func() error { return id.Client.Create(ctx, otherBinding.DeepCopy()) },
		"update the policy to Ignore": func() error { return id.Client.Update(ctx, ignore.DeepCopy()) },
		"update the binding to Audit": func() error { return id.Client.Update(ctx, loosened.DeepCopy()) },
		"patch the policy": func() error {
			return id.Client.Patch(ctx, policy.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"failurePolicy":"Ignore"}}`)))
		},
		"patch the binding to Audit": func() error { return id.Client.Patch(ctx, binding.DeepCopy(), audit) },
		"delete the policy":          func() error { return id.Client.Delete(ctx, policy.DeepCopy()) },
		"delete the binding":         func() error { return id.Client.Delete(ctx, binding.DeepCopy()) },
		"delete every policy":        func() error { return id.Client.DeleteAllOf(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{}) },
		"delete every binding": func() error {
			return id.Client.DeleteAllOf(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{})
		},
		"apply the policy server-side": func() error {
			data, err := json.Marshal(policyApply(ignore))
			if err != nil {
				return err
			}
			return id.Client.Patch(ctx, policyApply(ignore), client.RawPatch(types.ApplyPatchType, data), client.FieldOwner("escalation"), client.ForceOwnership)
		},
	} {
		err := write()
		assert.True(t, apierrors.IsForbidden(err), "%s: want Forbidden, got %v", name, err)
	}
	live := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, live))
	assert.Equal(t, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, live.Spec.ValidationActions)

	// The approved webhook, as its administrator installed it.
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: installTarget},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{configMapWebhook(installTargetWebhook, ns, "https://127.0.0.1:9/mutate", nil, admissionregistrationv1.Fail)},
	}
	if err := env.Client.Delete(ctx, mwc.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
		require.NoError(t, err)
	}
	require.NoError(t, env.Client.Create(ctx, mwc))
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), mwc); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", installTarget, err)
		}
	})
	repoint := client.RawPatch(types.JSONPatchType, []byte(`[
		{"op":"replace","path":"/webhooks/0/clientConfig/url","value":"https://127.0.0.1:1/steal"},
		{"op":"replace","path":"/webhooks/0/rules","value":[{"apiGroups":["*"],"apiVersions":["*"],"operations":["*"],"resources":["*/*"],"scope":"*"}]}]`))
	var denied error
	require.Eventually(t, func() bool {
		denied = id.Client.Patch(ctx, mwc.DeepCopy(), repoint, client.DryRunAll)
		return denied != nil && strings.Contains(denied.Error(), "may change only the fields it owns")
	}, transition, 100*time.Millisecond, "the shipped policy never refused the token's repoint: %v", denied)
	t.Logf("the token's repoint, refused: %v", denied)
	assert.True(t, apierrors.IsForbidden(denied))
	assert.Contains(t, denied.Error(), "webhooks[name="+installTargetWebhook+"]")
	control := client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"}]`))
	assert.NoError(t, id.Client.Patch(ctx, mwc.DeepCopy(), control, client.DryRunAll), "control: the token's own field")
}

// policyApply is p as a server-side apply request sends it.
func policyApply(p *admissionregistrationv1.ValidatingAdmissionPolicy) *admissionregistrationv1.ValidatingAdmissionPolicy {
	out := &admissionregistrationv1.ValidatingAdmissionPolicy{Spec: p.Spec}
	out.Name = p.Name
	out.APIVersion, out.Kind = admissionregistrationv1.SchemeGroupVersion.String(), "ValidatingAdmissionPolicy"
	return out
}

// TestInstall_staticAdmissionRBACIsItsCertificateSecretOnly: the one
// permission components/static-admission adds to the default installation
// is its certificate Secret: create (which RBAC cannot limit by name), and
// get, update and patch of webhook-guard-certs alone.
func TestInstall_staticAdmissionRBACIsItsCertificateSecretOnly(t *testing.T) {
	ctx := context.Background()
	dumpOnFailure(t, installNamespace)
	objs := installDocs(t, installBuild(t, ctx, "static-admission"))
	installApply(t, ctx, "static-admission")
	t.Cleanup(func() {
		// Leave the default installation's RBAC, as the other tests expect.
		installRemoveOtherOverlaysRBAC(t, context.Background(), installDocs(t, installBuild(t, context.Background(), "default")))
	})
	installRemoveOtherOverlaysRBAC(t, ctx, objs)
	installOnlyOwnBindings(t, ctx, objs)

	secret := "secrets/webhook-guard-certs"
	installAskAll(t, ctx, map[string]installCanI{
		"create Secrets in its namespace (create has no name)": {[]string{"create", "secrets", "-n", installNamespace}, true},
		"read its certificate Secret":                          {[]string{"get", secret, "-n", installNamespace}, true},
		"update its certificate Secret":                        {[]string{"update", secret, "-n", installNamespace}, true},
		"patch its certificate Secret":                         {[]string{"patch", secret, "-n", installNamespace}, true},
		"not delete its certificate Secret":                    {[]string{"delete", secret, "-n", installNamespace}, false},
		"not read another Secret in its namespace":             {[]string{"get", "secrets/other", "-n", installNamespace}, false},
		"not update another Secret in its namespace":           {[]string{"update", "secrets/other", "-n", installNamespace}, false},
		"not list Secrets in its namespace":                    {[]string{"list", "secrets", "-n", installNamespace}, false},
		"not watch Secrets in its namespace":                   {[]string{"watch", "secrets", "-n", installNamespace}, false},
		"not create Secrets in another namespace":              {[]string{"create", "secrets", "-n", "default"}, false},
		"not read a Secret of that name in another namespace":  {[]string{"get", secret, "-n", "kube-system"}, false},
	})
}

// installAskAll asks every question of cases about the installed
// ServiceAccount, each in a subtest. The RBAC authorizer learns of changed
// bindings from its informers: it first waits until every answer is the
// one wanted, then asks every question again. One round is a kubectl run
// per question, about a hundred: on a loaded machine it can take longer
// than half a minute.
func installAskAll(t *testing.T, ctx context.Context, cases map[string]installCanI) {
	t.Helper()
	names := slices.Sorted(maps.Keys(cases))
	var wrong []string
	ok := assert.Eventually(t, func() bool {
		wrong = wrong[:0]
		for _, name := range names {
			if got, _ := installAsk(ctx, cases[name].args); got != cases[name].want {
				wrong = append(wrong, name)
			}
		}
		return len(wrong) == 0
	}, 2*time.Minute, 200*time.Millisecond, "the installed RBAC never answered every question as it should")
	if !ok {
		t.Fatalf("answered wrongly at the last try: %q", wrong)
	}

	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, out := installAsk(ctx, c.args)
			assert.Equal(t, c.want, got, "kubectl auth can-i %s --as=%s said:\n%s", strings.Join(c.args, " "), installUser, out)
		})
	}
}

// installKey names a built object: kind namespace/name.
func installKey(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	return fmt.Sprintf("%s %s/%s", obj["kind"], ns, meta["name"])
}

// installRemoveOtherOverlaysRBAC deletes the Roles, ClusterRoles and
// bindings that another overlay installs and objs (one overlay's build)
// does not: kubectl apply prunes nothing, and what an earlier test applied
// (components/static-admission's Role on the certificate Secret) must not
// answer for this installation.
func installRemoveOtherOverlaysRBAC(t *testing.T, ctx context.Context, objs []map[string]any) {
	t.Helper()
	keep := sets.New[string]()
	for _, obj := range objs {
		keep.Insert(installKey(obj))
	}
	for _, overlay := range installOverlays {
		for _, obj := range installDocs(t, installBuild(t, ctx, overlay)) {
			apiVersion, _ := obj["apiVersion"].(string)
			if apiVersion != rbacv1.SchemeGroupVersion.String() || keep.Has(installKey(obj)) {
				continue
			}
			if err := env.Client.Delete(ctx, &unstructured.Unstructured{Object: obj}); err != nil && !apierrors.IsNotFound(err) {
				require.NoError(t, err, "deleting %s", installKey(obj))
			}
		}
	}
}

// installAsk asks the apiserver, as admin, whether the installed
// ServiceAccount may do something. kubectl exits 1 for "no", so the answer
// is read from stdout.
func installAsk(ctx context.Context, args []string) (bool, string) {
	r := env.Kubectl(ctx, "", nil, append(append([]string{"auth", "can-i"}, args...), "--as="+installUser)...)
	answer := strings.Fields(r.Stdout)
	return len(answer) > 0 && answer[0] == "yes", r.Stdout + r.Stderr
}

// installOnlyOwnBindings fails when the ServiceAccount is bound by anything
// but the installation itself: then "can-i" answers would say nothing about
// deploy/kustomize.
func installOnlyOwnBindings(t *testing.T, ctx context.Context, objs []map[string]any) {
	t.Helper()
	own := sets.New[string]()
	for _, obj := range objs {
		meta, _ := obj["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		own.Insert(fmt.Sprintf("%s %s/%s", obj["kind"], ns, meta["name"]))
	}
	bindsSA := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == installNamespace && s.Name == installServiceAccount
		})
	}
	var foreign []string
	crbs := &rbacv1.ClusterRoleBindingList{}
	require.NoError(t, env.Client.List(ctx, crbs))
	for _, b := range crbs.Items {
		if bindsSA(b.Subjects) && !own.Has("ClusterRoleBinding /"+b.Name) {
			foreign = append(foreign, "ClusterRoleBinding "+b.Name)
		}
	}
	rbs := &rbacv1.RoleBindingList{}
	require.NoError(t, env.Client.List(ctx, rbs))
	for _, b := range rbs.Items {
		if bindsSA(b.Subjects) && !own.Has(fmt.Sprintf("RoleBinding %s/%s", b.Namespace, b.Name)) {
			foreign = append(foreign, fmt.Sprintf("RoleBinding %s/%s", b.Namespace, b.Name))
		}
	}
	require.Empty(t, foreign, "another test bound %s; use another ServiceAccount there", installUser)
}

// installConfig returns the GuardConfiguration the installed Deployment
// mounts, read through the API from the ConfigMap its "config" volume
// names (kustomize adds a content hash to the name).
func installConfig(t *testing.T, ctx context.Context) string {
	t.Helper()
	dep := &appsv1.Deployment{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: "webhook-guard"}, dep))
	var name string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "config" && v.ConfigMap != nil {
			name = v.ConfigMap.Name
		}
	}
	require.True(t, strings.HasPrefix(name, "webhook-guard-config"), "the Deployment mounts no webhook-guard-config ConfigMap (volume %q)", name)
	cm := &corev1.ConfigMap{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: installNamespace, Name: name}, cm))
	require.Contains(t, cm.Data, "config.yaml")
	return cm.Data["config.yaml"]
}

// installFastConfig is harness.FastConfig for this test.
func installFastConfig(t *testing.T, installed string) string {
	t.Helper()
	cfg, err := harness.FastConfig(installed)
	require.NoError(t, err)
	return cfg
}

// installStatusRow is the part of one /status row this test reads.
type installStatusRow struct {
	Configuration        string `json:"configuration"`
	Webhook              string `json:"webhook"`
	ConsecutiveSuccesses int    `json:"consecutiveSuccesses"`
	ConsecutiveFailures  int    `json:"consecutiveFailures"`
	Problem              string `json:"problem"`
}

func installStatus(ctx context.Context, url string) (installStatusRow, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return installStatusRow{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return installStatusRow{}, err
	}
	defer resp.Body.Close()
	var rows []installStatusRow
	if err := json.NewDecoder(resp.Body).Decode(&rows); err != nil {
		return installStatusRow{}, err
	}
	for _, r := range rows {
		if r.Configuration == installTarget && r.Webhook == installTargetWebhook {
			return r, nil
		}
	}
	return installStatusRow{}, fmt.Errorf("no row for %s/%s in %s", installTarget, installTargetWebhook, url)
}

// installGuardArgs are the flags of the out-of-cluster guard: the
// installed Deployment's leader election, on a Lease in kube-system
// (deploy.TestDeployment_leaseIsInKubeSystem). Like the default installation
// it runs no webhook server (no --webhook-cert-dir), so it manages no
// certificate and touches no Secret.
func installGuardArgs(t *testing.T) []string {
	t.Helper()
	return []string{"--leader-elect", "--leader-election-namespace", metav1.NamespaceSystem}
}

// installWebhookState is what the test reads from the target configuration.
type installWebhookState struct {
	policy     admissionregistrationv1.FailurePolicyType
	marker     bool
	annotation string
}

// installTargetState is the mutating target's owned fields as stored.
func installTargetState(ctx context.Context) (installWebhookState, error) {
	return installState(ctx, circuit.KindMutating, installTarget, installTargetWebhook)
}

// installState is a target's owned fields as stored.
func installState(ctx context.Context, kind circuit.Kind, name, webhook string) (installWebhookState, error) {
	obj := kind.New()
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
		return installWebhookState{}, err
	}
	view, err := circuit.View(obj)
	if err != nil {
		return installWebhookState{}, err
	}
	for _, wh := range view.Webhooks {
		if wh.Name != webhook {
			continue
		}
		s := installWebhookState{annotation: view.Annotations[circuit.Annotation]}
		if wh.FailurePolicy != nil {
			s.policy = *wh.FailurePolicy
		}
		s.marker = slices.ContainsFunc(wh.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool {
			return c.Name == circuit.BypassCondition
		})
		return s, nil
	}
	return installWebhookState{}, fmt.Errorf("webhook %s not found in %s", webhook, name)
}

// installEventReasons lists the reasons of the events.k8s.io Events in
// kube-system about the target configuration: where the guard records
// Events about cluster-scoped objects (circuit.EventsNamespace).
func installEventReasons(ctx context.Context, kind circuit.Kind, name string) (sets.Set[string], error) {
	list, err := env.Clientset.EventsV1().Events(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	reasons := sets.New[string]()
	for _, e := range list.Items {
		if e.Regarding.Kind == kind.ObjectKind() && e.Regarding.Name == name {
			reasons.Insert(e.Reason)
		}
	}
	return reasons, nil
}

// TestInstall_guardRunsAsInstalledServiceAccount runs the real guard as
// the installed ServiceAccount, with the installed configuration (timings
// shortened, see installFastConfig), against a real slow webhook: the
// installed RBAC must be enough for a whole open and close, and the
// service must not hit a single Forbidden.
func TestInstall_guardRunsAsInstalledServiceAccount(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	dumpOnFailure(t, ns, installNamespace)
	installApply(t, ctx, "default")
	cfg := installFastConfig(t, installConfig(t, ctx))

	const path = "/mutate"
	wh := startWebhook(t, harness.WebhookOptions{})
	wh.SetBehaviour(path, harness.Allow())
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: installTarget},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{configMapWebhook(installTargetWebhook, ns, wh.URL(path), wh.CA.CertPEM, admissionregistrationv1.Fail)},
	}
	if err := env.Client.Delete(ctx, mwc.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
		require.NoError(t, err)
	}
	require.NoError(t, env.Client.Create(ctx, mwc))
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), mwc); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", installTarget, err)
		}
	})
	// The validating target: a validator that denies every ConfigMap it sees.
	wh.SetBehaviour(validatePath, harness.Deny(validatingDenial))
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: installValidating},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{validatingWebhook(installValidatingWebhook, ns, wh.URL(validatePath), wh.CA.CertPEM, admissionregistrationv1.Fail)},
	}
	if err := env.Client.Delete(ctx, vwc.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
		require.NoError(t, err)
	}
	require.NoError(t, env.Client.Create(ctx, vwc))
	t.Cleanup(func() {
		if err := env.Client.Delete(context.Background(), vwc); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", installValidating, err)
		}
	})

	id, err := env.ServiceAccount(ctx, installNamespace, installServiceAccount)
	require.NoError(t, err)
	require.Equal(t, installUser, id.Username)
	g := env.StartGuardT(t, harness.GuardOptions{Name: "installed", Kubeconfig: id.KubeconfigPath, Config: cfg, Args: installGuardArgs(t)})
	const wait = 60 * time.Second
	notExited := func() {
		if exited, code := g.Exited(); exited {
			require.FailNow(t, "the guard exited", "exit code %d; logs:\n%s", code, g.Logs())
		}
	}

	// Healthy: the leader probes and counts successes; nothing changes.
	require.Eventually(t, func() bool {
		notExited()
		row, err := installStatus(ctx, g.StatusURL)
		return err == nil && row.ConsecutiveSuccesses >= 2
	}, wait, 100*time.Millisecond, "the guard never probed %s healthy", installTarget)
	st, err := installTargetState(ctx)
	require.NoError(t, err)
	assert.Equal(t, installWebhookState{policy: admissionregistrationv1.Fail}, st, "a healthy webhook's configuration must not change")
	// Control: the apiserver calls the closed mutating webhook and the
	// validator denies (once its informers have the new configurations).
	require.Eventually(t, func() bool {
		_, err := createConfigMap(ctx, env.Client, ns)
		return err != nil && strings.Contains(err.Error(), validatingDenial) && wh.APIServerCalls(path) >= 1
	}, wait, 50*time.Millisecond, "control: the apiserver never called the closed webhooks")

	// Slow: the apiserver's 1s timeout is exceeded; both circuits open in
	// Bypass mode.
	wh.SetBehaviour(path, harness.Delayed(2*time.Second, harness.Allow()))
	wh.SetBehaviour(validatePath, harness.Delayed(2*time.Second, harness.Deny(validatingDenial)))
	targets := []struct {
		kind          circuit.Kind
		name, webhook string
	}{{circuit.KindMutating, installTarget, installTargetWebhook}, {circuit.KindValidating, installValidating, installValidatingWebhook}}
	for _, tg := range targets {
		require.Eventually(t, func() bool {
			notExited()
			st, err := installState(ctx, tg.kind, tg.name, tg.webhook)
			return err == nil && st.policy == admissionregistrationv1.Ignore && st.marker && strings.Contains(st.annotation, tg.webhook)
		}, wait, 100*time.Millisecond, "the circuit never opened on %s", tg.name)
	}
	require.Eventually(t, func() bool {
		before, beforeValidate := wh.APIServerCalls(path), wh.APIServerCalls(validatePath)
		_, err := createConfigMap(ctx, env.Client, ns)
		return err == nil && wh.APIServerCalls(path) == before && wh.APIServerCalls(validatePath) == beforeValidate
	}, wait, 50*time.Millisecond, "Bypass: admission never went through without calling the slow webhooks")

	// Healthy again: the circuits close and restore exactly what was there.
	wh.SetBehaviour(path, harness.Allow())
	wh.SetBehaviour(validatePath, harness.Deny(validatingDenial))
	for _, tg := range targets {
		require.Eventually(t, func() bool {
			notExited()
			st, err := installState(ctx, tg.kind, tg.name, tg.webhook)
			return err == nil && st == installWebhookState{policy: admissionregistrationv1.Fail}
		}, wait, 100*time.Millisecond, "the circuit never closed on %s", tg.name)

		// Events about the cluster-scoped configuration are in
		// kube-system, which the events Role allows and kube-apiserver
		// accepts.
		require.Eventually(t, func() bool {
			reasons, err := installEventReasons(ctx, tg.kind, tg.name)
			return err == nil && reasons.HasAll("CircuitOpened", "CircuitClosed")
		}, wait, 200*time.Millisecond, "no CircuitOpened and CircuitClosed events.k8s.io Events about %s in kube-system", tg.name)
	}

	// Leader election used the Lease in kube-system, with the installed
	// RBAC.
	lease := &coordinationv1.Lease{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: installLeaseName}, lease))

	// The installed RBAC was enough: nothing the service tried was refused.
	assert.NotContains(t, strings.ToLower(g.Logs()), "forbidden", "the guard was refused something by the installed RBAC")
}
