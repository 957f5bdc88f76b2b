package startcheck

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/webhook-guard/webhook-guard/internal/admission"
	"github.com/webhook-guard/webhook-guard/internal/breaker/decide"
	"github.com/webhook-guard/webhook-guard/internal/circuit"
	"github.com/webhook-guard/webhook-guard/internal/cli/factory"
	"github.com/webhook-guard/webhook-guard/internal/config"
	"github.com/webhook-guard/webhook-guard/internal/status"
)

// checkOtherInstances runs the start checks that concern other
// installations, then the one step that follows from them:
//
//   - checkOtherPolicies: no other installation's guard policy covers a
//     configuration this one manages;
//   - checkPolicyOwner: no other running installation owns this one's
//     guard policy (two installations without an instance name);
//   - takeOverRetired: circuits on this installation's configurations that
//     a breaker identity which no longer runs opened are signed anew by
//     this one, which then closes them.
func checkOtherInstances(ctx context.Context, c client.Client, cs kubernetes.Interface, cfg *config.Configuration, opts admission.Options) error {
	if err := checkOtherPolicies(ctx, c, cfg, opts); err != nil {
		return err
	}
	if err := checkPolicyOwner(ctx, c, opts, time.Now()); err != nil {
		return err
	}
	return takeOverRetired(ctx, c, newStartRecorder(cs, logf.FromContext(ctx)), cfg, opts, time.Now())
}

// checkOtherPolicies refuses to start when another installation's guard
// policy (a webhook-guard ValidatingAdmissionPolicy of another name)
// covers a configuration this one manages: each policy exempts only its
// own breaker, so two installations on one configuration would deny each
// other's writes. Installations on disjoint configurations coexist. For
// each such policy it says whether its installation still runs, and the
// command that deletes the policy of one that does not.
func checkOtherPolicies(ctx context.Context, c client.Reader, cfg *config.Configuration, opts admission.Options) error {
	policies := &admissionregistrationv1.ValidatingAdmissionPolicyList{}
	// By name, not by managed-by: Helm sets managed-by to Helm on the guard
	// policies the chart installs.
	if err := c.List(ctx, policies, client.MatchingLabels{"app.kubernetes.io/name": "webhook-guard"}); err != nil {
		return fmt.Errorf("listing other installations' guard policies: %w", err)
	}
	var clashes, remedies []string
	for _, p := range policies.Items {
		if p.Name == opts.Policy() || p.Spec.MatchConstraints == nil {
			continue
		}
		clashed := false
		for _, rule := range p.Spec.MatchConstraints.ResourceRules {
			for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
				if !slices.Contains(rule.Resources, kind.Resource()) {
					continue
				}
				for _, name := range cfg.Names(kind) {
					if slices.Contains(rule.ResourceNames, name) {
						clashes = append(clashes, fmt.Sprintf("%s %s (ValidatingAdmissionPolicy %s)", kind.Singular(), name, p.Name))
						clashed = true
					}
				}
			}
		}
		if !clashed {
			continue
		}
		remedy := fmt.Sprintf("if the installation of %s is gone, delete its policy with: %s", p.Name, deletePolicyCommand(p.Name))
		if other, ok := policyBreaker(&p); ok {
			instance := strings.TrimPrefix(strings.TrimPrefix(p.Name, admission.PolicyName), "-")
			switch state, why := installationLiveness(ctx, c, other, instance, time.Now()); state {
			case gone:
				remedy = fmt.Sprintf("the installation of %s (%s) no longer runs: %s; delete its policy with: %s", p.Name, other, why, deletePolicyCommand(p.Name))
			case alive:
				remedy = fmt.Sprintf("the installation of %s (%s) runs: %s", p.Name, other, why)
			}
		}
		remedies = append(remedies, remedy)
	}
	if len(clashes) > 0 {
		return fmt.Errorf("another webhook-guard installation manages %s; two installations must not manage one configuration. "+
			"Remove it from one of them, or give this one another instance name, or delete the policy of an installation that is gone: %s. "+
			"Then start this one again: it takes over the open circuits of an installation that no longer runs", strings.Join(clashes, "; "), strings.Join(remedies, "; "))
	}
	return nil
}

// deletePolicyCommand is the command that removes a guard policy and its
// binding.
func deletePolicyCommand(name string) string {
	return "kubectl delete validatingadmissionpolicy,validatingadmissionpolicybinding " + name
}

// checkPolicyOwner refuses to start when this installation's guard policy
// (opts.Policy()) exempts another breaker identity whose installation
// still runs, or may: two installations without an instance name, under
// different ServiceAccounts or namespaces, would each put their own
// identity back into the one policy on every change the other makes,
// without end. It names the other identity and the remedies.
//
// It lets the start go on when that installation no longer runs
// (installationLiveness: its Lease was released, expired or never
// existed); this one then takes the policy over. It also lets it go on
// when the other identity is a ServiceAccount in this one's namespace:
// both then contend for one leader-election Lease, so only one of them
// writes at a time (a rollout to another ServiceAccount).
func checkPolicyOwner(ctx context.Context, c client.Reader, opts admission.Options, now time.Time) error {
	live := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	if err := c.Get(ctx, client.ObjectKey{Name: opts.Policy()}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading the guard policy ValidatingAdmissionPolicy %s: %w", opts.Policy(), err)
	}
	other, ok := policyBreaker(live)
	if !ok || other == opts.Breaker() {
		return nil
	}
	if theirs, ok := ServiceAccountNamespace(other); ok {
		if mine, ok := ServiceAccountNamespace(opts.Breaker()); ok && mine == theirs {
			return nil
		}
	}
	state, why := installationLiveness(ctx, c, other, opts.Instance, now)
	if state == gone {
		return nil
	}
	instance := "instance: <name> in its configuration, which names its policy " + admission.PolicyName + "-<name>"
	if opts.Instance != "" {
		instance = "another instance: name in its configuration"
	}
	return fmt.Errorf("the guard policy ValidatingAdmissionPolicy %s belongs to another webhook-guard installation, %s (%s); "+
		"two installations with one policy would each rewrite it with their own identity, without end. "+
		"Give this installation its own instance name (%s), or remove the other installation; "+
		"if it no longer runs, delete its policy with: %s, and start this one again",
		opts.Policy(), other, why, instance, deletePolicyCommand(opts.Policy()))
}

// policyBreaker returns the breaker identity a guard policy exempts: the
// one its webhook-guard.io/rule-inputs annotation names, or, for a policy
// written before it, the username its isBreaker variable compares with
// (admission.RenderPolicy). It only tells installations apart.
func policyBreaker(policy *admissionregistrationv1.ValidatingAdmissionPolicy) (string, bool) {
	if breaker, ok := admission.PolicyBreaker(policy); ok {
		return breaker, true
	}
	const prefix = "request.userInfo.username == "
	for _, v := range policy.Spec.Variables {
		if v.Name != "isBreaker" || !strings.HasPrefix(v.Expression, prefix) {
			continue
		}
		return unquoteCEL(strings.TrimPrefix(v.Expression, prefix))
	}
	return "", false
}

// unquoteCEL reads a CEL string literal as circuit.QuoteCEL writes it: in
// single quotes, with Go's escapes and \' for a quote.
func unquoteCEL(s string) (string, bool) {
	if len(s) < 2 || s[0] != '\'' || s[len(s)-1] != '\'' {
		return "", false
	}
	inner := s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		switch {
		case inner[i] == '"':
			b.WriteString(`\"`)
		case inner[i] == '\\' && i+1 < len(inner) && inner[i+1] == '\'':
			b.WriteByte('\'')
			i++
		case inner[i] == '\\' && i+1 < len(inner):
			b.WriteString(inner[i : i+2])
			i++
		default:
			b.WriteByte(inner[i])
		}
	}
	out, err := strconv.Unquote(`"` + b.String() + `"`)
	return out, err == nil
}

// ServiceAccountNamespace returns the namespace of a ServiceAccount's
// username, system:serviceaccount:<namespace>:<name>.
func ServiceAccountNamespace(username string) (string, bool) {
	rest, ok := strings.CutPrefix(username, "system:serviceaccount:")
	if !ok {
		return "", false
	}
	ns, name, ok := strings.Cut(rest, ":")
	return ns, ok && ns != "" && name != ""
}

// liveness is what a Lease tells of whether an installation runs.
type liveness int

const (
	// unknown: its Lease cannot be found or read.
	unknown liveness = iota
	// alive: its Lease is held and was renewed within its duration.
	alive
	// gone: its Lease was released, has expired, or does not exist.
	gone
)

// installationLiveness reads the leader-election Leases of the
// installation of identity and instance, where an installation keeps
// them: named status.LeaseName(instance), in the namespace its
// Deployment's --leader-election-namespace names (its Deployment is the
// shipped one's name, factory.DefaultDeployment, in its ServiceAccount's
// namespace; the chart's leaseNamespace, or an overlay's), in its
// ServiceAccount's namespace (releases before the move to kube-system,
// and a guard started with --leader-election-namespace there) and in
// kube-system (the shipped manifests since). A Deployment that cannot be
// read leaves the last two. It is alive when any Lease is; unknown when
// none is and one cannot be read; gone when every one it found was
// released or has expired, or it found none. A Lease in kube-system is
// named by the instance alone, so it is alive when any installation of
// that instance name leads, which is the one a second installation of
// that name would fight. It says what it found, for messages. An
// installation started without --leader-elect holds no Lease and is taken
// for gone.
func installationLiveness(ctx context.Context, c client.Reader, identity, instance string, now time.Time) (liveness, string) {
	ns, ok := ServiceAccountNamespace(identity)
	if !ok {
		return unknown, "it is not a ServiceAccount, so webhook-guard cannot find its Lease"
	}
	name := status.LeaseName(instance)
	namespaces := slices.Compact([]string{ns, metav1.NamespaceSystem})
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: factory.DefaultDeployment}, d); err == nil {
		if where, ok := factory.LeaseNamespaceOf(d); ok && !slices.Contains(namespaces, where) {
			namespaces = append([]string{where}, namespaces...)
		}
	}
	var missing []string
	result, why := gone, ""
	for _, where := range namespaces {
		state, says := leaseLiveness(ctx, c, client.ObjectKey{Namespace: where, Name: name}, now)
		switch {
		case state == alive:
			return alive, says
		case says == "":
			missing = append(missing, where+"/"+name)
		case state == unknown, result == gone && why == "":
			result, why = state, says
		}
	}
	if why == "" {
		return gone, "it holds no Lease " + strings.Join(missing, " nor ")
	}
	return result, why
}

// leaseLiveness reads one Lease: alive, gone (released or expired),
// unknown (unreadable), or gone with nothing to say when it does not
// exist.
func leaseLiveness(ctx context.Context, c client.Reader, key client.ObjectKey, now time.Time) (liveness, string) {
	lease := &coordinationv1.Lease{}
	if err := c.Get(ctx, key, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return gone, ""
		}
		return unknown, fmt.Sprintf("its Lease %s cannot be read: %v", key, err)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder == "" {
		return gone, fmt.Sprintf("its Lease %s was released", key)
	}
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return alive, fmt.Sprintf("its Lease %s is held by %s", key, holder)
	}
	renewed := lease.Spec.RenewTime.Time
	if expires := renewed.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second); now.After(expires) {
		return gone, fmt.Sprintf("its Lease %s, held by %s, expired at %s", key, holder, expires.UTC().Format(time.RFC3339))
	}
	return alive, fmt.Sprintf("its Lease %s is held by %s, renewed at %s", key, holder, renewed.UTC().Format(time.RFC3339))
}

// signerRetired reports whether the breaker that signs record entries as
// signer no longer runs, and why. A signer is an identity, or an identity
// and an instance as "identity/instance" (Signer); both readings are
// weighed, and the signer is retired only when neither runs. One reading
// runs when its Lease is alive, or when its Lease cannot be told and its
// guard policy still exempts it (a running installation keeps its policy,
// and puts it back within moments if it is deleted).
func signerRetired(ctx context.Context, c client.Reader, signer string, now time.Time) (bool, string, error) {
	type reading struct{ identity, instance string }
	readings := []reading{{signer, ""}}
	if i := strings.LastIndex(signer, "/"); i > 0 {
		readings = append([]reading{{signer[:i], signer[i+1:]}}, readings...)
	}
	why := ""
	for _, r := range readings {
		name := admission.Options{Instance: r.instance}.Policy()
		policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		exempts := false
		policyWhy := fmt.Sprintf("no ValidatingAdmissionPolicy %s exempts it", name)
		switch err := c.Get(ctx, client.ObjectKey{Name: name}, policy); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, "", fmt.Errorf("reading the guard policy ValidatingAdmissionPolicy %s: %w", name, err)
		default:
			exempted, _ := policyBreaker(policy)
			exempts = exempted == r.identity
		}
		state, leaseWhy := installationLiveness(ctx, c, r.identity, r.instance, now)
		switch {
		case state == alive, state == unknown && exempts:
			return false, "", nil
		case state == gone && why == "":
			why = leaseWhy
		case why == "":
			why = policyWhy + " and " + leaseWhy
		}
	}
	return true, why, nil
}

// takeOverRetired takes over the open circuits that a breaker identity
// which no longer runs (signerRetired) opened on this installation's
// configurations: an installation given an instance name or another one,
// or moved to another namespace or ServiceAccount, would otherwise find
// its own earlier circuits signed by a stranger and leave them open for
// ever. Each configuration gets one patch, which signs those entries with
// this installation's signer and changes nothing else (decide.TakeOver),
// with the resourceVersion of the read as precondition (a conflict is
// read and decided again: replicas starting together take over once), and
// a CircuitTakenOver Event per circuit that names both identities. The
// breaker then closes them as its own.
//
// When this installation's guard policy still exempts the retired identity
// (checkPolicyOwner let the start go on because it no longer runs), the
// policy denies the patch until the installer applies this installation's
// policy; the guard writes no admission policy, so it waits a few seconds
// for that and then says what to apply.
func takeOverRetired(ctx context.Context, c client.Client, rec recorder.EventRecorder, cfg *config.Configuration, opts admission.Options, now time.Time) error {
	log := logf.FromContext(ctx)
	signer := Signer(opts.Breaker(), opts.Instance)
	type verdict struct {
		retired bool
		why     string
	}
	verdicts := map[string]verdict{}
	for _, kind := range []circuit.Kind{circuit.KindMutating, circuit.KindValidating} {
		for _, name := range cfg.Names(kind) {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				obj := kind.New()
				if err := c.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
					if apierrors.IsNotFound(err) {
						return nil
					}
					return err
				}
				view, err := circuit.View(obj)
				if err != nil {
					return err
				}
				record, err := circuit.Decode(view.Annotations)
				if err != nil {
					return nil // the breaker reports an unreadable record and changes nothing
				}
				retired := map[string]string{}
				for _, webhook := range record.Webhooks() {
					by := record[webhook].By
					if record[webhook].Mine(signer) {
						continue
					}
					v, ok := verdicts[by]
					if !ok {
						gone, why, err := signerRetired(ctx, c, by, now)
						if err != nil {
							return err
						}
						v = verdict{gone, why}
						verdicts[by] = v
					}
					if v.retired {
						retired[by] = v.why
					}
				}
				if len(retired) == 0 {
					return nil
				}
				next, taken, err := decide.TakeOver(view, signer, retired)
				if err != nil || len(taken) == 0 {
					return err
				}
				patch, err := circuit.Patch(view, next)
				if err != nil {
					return err
				}
				if err := patchAsPolicyAllows(ctx, c, obj, patch); err != nil {
					return err
				}
				for _, tk := range taken {
					rec.Eventf(obj, nil, corev1.EventTypeNormal, decide.TakenOver, "TakeOver", "%s", tk.Message)
					log.Info("Took over an open circuit of a breaker identity that no longer runs", "kind", kind, "configuration", name, "webhook", tk.Webhook, "from", tk.From, "by", signer)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("taking over the open circuits on %s %s of breaker identities that no longer run: %w", kind.Singular(), name, err)
			}
		}
	}
	return nil
}

// patchAsPolicyAllows retries a Forbidden write policyRetries times,
// policyRetryInterval apart (10 s in all): kube-apiserver enforces a
// changed guard policy within moments (its informer).
const (
	policyRetries       = 20
	policyRetryInterval = 500 * time.Millisecond
)

// patchAsPolicyAllows applies patch to obj. kube-apiserver enforces a
// guard policy a moment after it changes (its informer); a write that a
// policy the installer has just applied will admit may be denied
// meanwhile, as Forbidden, so that is retried for a few seconds
// (policyRetries). Still denied, the live policy exempts another identity:
// the error says what to apply.
func patchAsPolicyAllows(ctx context.Context, c client.Client, obj client.Object, patch []byte) error {
	var err error
	for range policyRetries {
		err = c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(circuit.FieldManager))
		if !apierrors.IsForbidden(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(policyRetryInterval):
		}
	}
	return fmt.Errorf("the guard policy denies this identity's write (it exempts another breaker identity, or this installation's policy was never applied); "+
		"apply this installation's manifests (helm upgrade, or kustomize build ... | kubectl apply -f -; \"guard manifests policy --breaker <this identity>\" renders the policy): %w", err)
}
