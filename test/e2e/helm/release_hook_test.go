package helm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/admission/admissiontest"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/test/e2e/harness"
)

// hookUser is the pre-delete hook's username: the release identity the
// guard derives from its own (circuit.ReleaseUsername).
var hookUser = "system:serviceaccount:" + releaseNamespace + ":" + hookServiceAccount

// hookDeletePolicy is the helm.sh/hook-delete-policy of every hook object:
// each goes before the next hook creates it again, and when the hook
// ends, whether it succeeded or failed, so that no token of the hook's
// ServiceAccount outlives the uninstall that needed it.
const hookDeletePolicy = "before-hook-creation,hook-succeeded,hook-failed"

// renderHook renders templates/release_hook.yaml with the example targets,
// one YAML document an object.
func renderHook(t *testing.T) []string {
	t.Helper()
	tmpl := runHelm(t, append([]string{"template", "webhook-guard", chartDir, "--namespace", releaseNamespace, "--show-only", "templates/release_hook.yaml"}, exampleValues()...)...)
	require.NoError(t, tmpl.err, "helm template:\n%s", tmpl.stderr)
	return strings.Split(tmpl.stdout, "\n---\n")
}

// hookObjects returns the hook's objects but the Job (the ServiceAccount
// and its RBAC), as YAML documents, and the Job's container arguments.
func hookObjects(t *testing.T) (rbac []string, jobArgs []string) {
	t.Helper()
	for _, doc := range renderHook(t) {
		var obj map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		if obj["kind"] != "Job" {
			rbac = append(rbac, doc)
			continue
		}
		var job struct {
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Args []string `json:"args"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &job))
		jobArgs = job.Spec.Template.Spec.Containers[0].Args
	}
	require.NotEmpty(t, jobArgs, "the chart renders no hook Job")
	return rbac, jobArgs
}

// applyHookRBAC creates the hook's ServiceAccount and RBAC as helm creates
// them before the Job, deletes them when t ends, and returns the
// ServiceAccount's identity once its RBAC lets it read the mutating
// target.
func applyHookRBAC(t *testing.T, ctx context.Context, rbac []string) *harness.Identity {
	t.Helper()
	docs := []byte(strings.Join(rbac, "\n---\n"))
	r := env.Kubectl(ctx, "", docs, "apply", "-f", "-")
	require.NoError(t, r.Err, "kubectl apply of the hook's RBAC:\n%s%s", r.Stdout, r.Stderr)
	t.Cleanup(func() {
		env.Kubectl(context.Background(), "", docs, "delete", "--ignore-not-found", "-f", "-")
	})
	id, err := env.ServiceAccount(ctx, releaseNamespace, hookServiceAccount)
	require.NoError(t, err)
	require.Equal(t, hookUser, id.Username)
	require.Eventually(t, func() bool {
		return id.Client.Get(ctx, client.ObjectKey{Name: mutatingTarget}, &admissionregistrationv1.MutatingWebhookConfiguration{}) == nil
	}, 30*time.Second, 100*time.Millisecond, "the hook's RBAC never took effect")
	return id
}

// TestChart_releaseHookObjectsGoWhateverTheHookDoes: every object of the
// pre-delete hook, its ServiceAccount and RBAC included, is deleted when
// the hook ends, failed or not: a failed uninstall leaves no account
// behind whose token could still patch the targets.
func TestChart_releaseHookObjectsGoWhateverTheHookDoes(t *testing.T) {
	kinds := []string{}
	for _, doc := range renderHook(t) {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
		kinds = append(kinds, obj.Kind)
		assert.Equal(t, "pre-delete", obj.Metadata.Annotations["helm.sh/hook"], obj.Kind)
		assert.Equal(t, hookDeletePolicy, obj.Metadata.Annotations["helm.sh/hook-delete-policy"], obj.Kind)
	}
	assert.ElementsMatch(t, []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Job"}, kinds)
}

// TestHelm_releaseHookTokenDoesOnlyTheRelease installs the chart, lets the
// installed guard put its policy in place, then, as the pre-delete hook's
// ServiceAccount with the RBAC the chart renders for it, tries what a
// leaked hook token would: repoint a target webhook's clientConfig and add
// a webhook to a target, each with the override annotation that lets
// anyone but the release identity change owned fields. kube-apiserver
// refuses both with the guard policy's words for the release identity
// (admission.ReasonReleaserOutsideOwnedFields), and leaves the targets as
// they were; the write the release itself makes first (the override
// annotation) and last (its removal) are admitted. RBAC refuses the hook
// every other write on the targets, and every other configuration.
// TestHelm_preDeleteHookReleasesEveryCircuit runs the release itself as
// the same account.
func TestHelm_releaseHookTokenDoesOnlyTheRelease(t *testing.T) {
	ctx := context.Background()
	ns := "helm-release-token-e2e"
	require.NoError(t, env.EnsureNamespace(ctx, ns))
	dumpOnFailure(t, ns)
	wh, err := harness.StartWebhook(harness.WebhookOptions{Host: "127.0.0.1"})
	require.NoError(t, err)
	t.Cleanup(wh.Close)
	wh.SetBehaviour(mutatePath, harness.Allow())
	wh.SetBehaviour(validatePath, harness.Allow())

	install := runHelm(t, append([]string{"install", "webhook-guard", chartDir, "--namespace", releaseNamespace, "--create-namespace"}, exampleValues()...)...)
	require.NoError(t, install.err, "helm install:\n%s%s", install.stdout, install.stderr)
	t.Cleanup(func() { runHelm(t, "uninstall", "webhook-guard", "--namespace", releaseNamespace, "--no-hooks") })
	mutating := target{circuit.KindMutating, mutatingTarget, mutatingWebhook, mutatePath}
	validating := target{circuit.KindValidating, validatingTarget, validatingWebhook, validatePath}
	for _, tg := range []target{mutating, validating} {
		createTarget(t, ns, wh, tg)
	}

	// The installed guard writes its policy, rendered for its own identity
	// and the release identity it derives; then it stops, as the hook's
	// scale-down stops it. The policy stays in kube-apiserver.
	g := startInstalledGuard(t, "release-token")
	require.Eventually(t, func() bool {
		if exited, code := g.Exited(); exited {
			require.FailNow(t, "the guard exited", "exit code %d; logs:\n%s", code, g.Logs())
		}
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		return env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, policy) == nil &&
			env.Client.Get(ctx, client.ObjectKey{Name: admission.PolicyName}, binding) == nil &&
			strings.Contains(policy.Annotations[admission.PolicyInputsAnnotation], `"releaser":"`+hookUser+`"`)
	}, 60*time.Second, 100*time.Millisecond, "the guard never put its policy, for the release identity %s, in place", hookUser)
	g.Stop()

	rbac, _ := hookObjects(t)
	id := applyHookRBAC(t, ctx, rbac)

	// RBAC: get and patch on the targets by name, nothing else on them,
	// and nothing on any other configuration.
	for _, c := range []struct {
		verb, resource string
		want           bool
	}{
		{"patch", "mutatingwebhookconfigurations/" + mutatingTarget, true},
		{"patch", "validatingwebhookconfigurations/" + validatingTarget, true},
		{"update", "mutatingwebhookconfigurations/" + mutatingTarget, false},
		{"delete", "mutatingwebhookconfigurations/" + mutatingTarget, false},
		{"create", "mutatingwebhookconfigurations", false},
		{"patch", "mutatingwebhookconfigurations/some-other-configuration", false},
		{"patch", "validatingwebhookconfigurations/some-other-configuration", false},
		{"list", "mutatingwebhookconfigurations", false},
		{"create", "validatingadmissionpolicies", false},
		{"patch", "validatingadmissionpolicies/" + admission.PolicyName, false},
	} {
		r := env.Kubectl(ctx, "", nil, "auth", "can-i", c.verb, c.resource, "--as="+hookUser)
		answer := strings.Fields(r.Stdout)
		assert.Equal(t, c.want, len(answer) > 0 && answer[0] == "yes", "can the hook %s %s? %s%s", c.verb, c.resource, r.Stdout, r.Stderr)
	}

	// patch sends, as the hook's account, edit applied to the live target
	// with the override annotation added, as a JSON merge patch (the
	// account may not update), and returns whether the stored object is
	// still the one it read, and the error.
	patch := func(tg target, edit func(view *admissionregistrationv1.MutatingWebhookConfiguration)) (bool, error) {
		t.Helper()
		live := tg.kind.New()
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: tg.name}, live))
		view, err := circuit.View(live.DeepCopyObject().(client.Object))
		require.NoError(t, err)
		if view.Annotations == nil {
			view.Annotations = map[string]string{}
		}
		view.Annotations[circuit.OverrideAnnotation] = "a leaked hook token"
		edit(view)
		sent := client.Object(view)
		if tg.kind == circuit.KindValidating {
			sent = admissiontest.AsValidating(view)
		}
		err = id.Client.Patch(ctx, sent, client.MergeFrom(live))
		after := tg.kind.New()
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: tg.name}, after))
		return after.GetResourceVersion() == live.GetResourceVersion(), err
	}
	denied := func(t *testing.T, unchanged bool, err error, tg target, what string) {
		t.Helper()
		require.Error(t, err, "kube-apiserver admitted the hook's write")
		assert.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
		msg := err.Error()
		assert.Contains(t, msg, "ValidatingAdmissionPolicy '"+admission.PolicyName+"'")
		assert.Contains(t, msg, tg.kind.Singular()+` "`+tg.name+`": webhook-guard's release identity (`+hookUser+`) may change only what a release restores`)
		assert.Contains(t, msg, "this request also changes "+what)
		assert.True(t, unchanged, "a denied write changed %s", tg.name)
		t.Logf("denied: %s", msg)
	}

	t.Run("repointing a target webhook's clientConfig with the override is refused", func(t *testing.T) {
		unchanged, err := patch(mutating, func(view *admissionregistrationv1.MutatingWebhookConfiguration) {
			url := "https://127.0.0.1:1/attacker"
			view.Webhooks[0].ClientConfig.URL = &url
			view.Webhooks[0].ClientConfig.CABundle = nil
		})
		denied(t, unchanged, err, mutating, "webhooks[name="+mutatingWebhook+"]")
	})

	t.Run("adding a webhook to a target with the override is refused", func(t *testing.T) {
		for _, tg := range []target{mutating, validating} {
			unchanged, err := patch(tg, func(view *admissionregistrationv1.MutatingWebhookConfiguration) {
				added := *view.Webhooks[0].DeepCopy()
				added.Name = "added-by-the-hook.example.com"
				url := "https://127.0.0.1:1/attacker"
				added.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url}
				view.Webhooks = append(view.Webhooks, added)
			})
			denied(t, unchanged, err, tg, "webhooks (added, removed or reordered)")
		}
	})

	t.Run("the release's own writes of the override annotation are admitted", func(t *testing.T) {
		unchanged, err := patch(mutating, func(*admissionregistrationv1.MutatingWebhookConfiguration) {})
		require.NoError(t, err, "the release's first write, the override annotation, was refused")
		assert.False(t, unchanged)
		unchanged, err = patch(mutating, func(view *admissionregistrationv1.MutatingWebhookConfiguration) {
			delete(view.Annotations, circuit.OverrideAnnotation)
		})
		require.NoError(t, err, "the release's last write, removing the override annotation, was refused")
		assert.False(t, unchanged)
	})
}
