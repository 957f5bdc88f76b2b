{{/*
The names are the kustomize base's, fixed: "guard status" finds the
Deployment, the ConfigMap's volume, the Lease and the status reader by
them, and the ClusterRoles are cluster-wide. One release per cluster; a
second installation beside it (instance) needs other ClusterRole names,
which this chart does not render.
*/}}

{{/* webhook-guard.serviceAccountName is the guard's ServiceAccount. */}}
{{- define "webhook-guard.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default "webhook-guard" -}}
{{- end }}

{{/*
webhook-guard.releaseServiceAccountName is the pre-delete hook's
ServiceAccount: the guard's with "-release" (circuit.ReleaseSuffix), the
release identity the guard policy lets hand circuits back.
*/}}
{{- define "webhook-guard.releaseServiceAccountName" -}}
{{- printf "%s-release" (include "webhook-guard.serviceAccountName" .) -}}
{{- end }}

{{/* webhook-guard.namespace is where every namespaced object goes. */}}
{{- define "webhook-guard.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end }}

{{/*
webhook-guard.leaseNamespace holds the leader-election Lease
(values.yaml, leaseNamespace).
*/}}
{{- define "webhook-guard.leaseNamespace" -}}
{{- .Values.leaseNamespace | default (include "webhook-guard.namespace" .) -}}
{{- end }}

{{/*
webhook-guard.lease is the name of the leader-election Lease
(status.LeaseName).
*/}}
{{- define "webhook-guard.lease" -}}
{{ with .Values.instance }}{{ . }}.{{ end }}webhook-guard.webhook-guard.io
{{- end }}

{{/*
webhook-guard.labels are put on every object, beside the object's own
(app.kubernetes.io/name and component, as in the kustomize base). Selectors
use only the object's own. Helm itself sets app.kubernetes.io/managed-by.
*/}}
{{- define "webhook-guard.labels" -}}
app.kubernetes.io/part-of: webhook-guard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
webhook-guard.markingServed is "true" where the cluster serves
admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes 1.36 or
later, the API not turned off), as the guard checks by discovery at start;
"" elsewhere. helm install and upgrade read the cluster's discovery;
helm template knows only what --api-versions lists.
*/}}
{{- define "webhook-guard.markingServed" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}true{{- end -}}
{{- end }}

{{/*
webhook-guard.markingRendered is "true" when the marking policies are
rendered: marking.enabled and the cluster serves them.
*/}}
{{- define "webhook-guard.markingRendered" -}}
{{- if and .Values.marking.enabled (include "webhook-guard.markingServed" .) -}}true{{- end -}}
{{- end }}

{{/* webhook-guard.image is the manager's image reference. */}}
{{- define "webhook-guard.image" -}}
{{- $repository := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repository = printf "%s/%s" . $repository }}{{ end -}}
{{- if .Values.image.digest -}}
{{ $repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/*
webhook-guard.config is the GuardConfiguration, from the values of the
same names. Every field of the file is one (test/e2e/helm
TestChart_carriesEveryConfigurationField).
*/}}
{{- define "webhook-guard.config" -}}
{{- $cfg := dict "apiVersion" "config.webhook-guard.io/v1alpha1" "kind" "GuardConfiguration" "targets" .Values.targets -}}
{{- with .Values.instance }}{{ $_ := set $cfg "instance" . }}{{ end -}}
{{- if not (kindIs "invalid" .Values.holdWhenAllFail) }}{{ $_ := set $cfg "holdWhenAllFail" .Values.holdWhenAllFail }}{{ end -}}
{{- with .Values.apiserverScrapeInterval }}{{ $_ := set $cfg "apiserverScrapeInterval" . }}{{ end -}}
{{ toYaml $cfg }}
{{- end }}

{{/*
webhook-guard.validate fails the release with the guard's own words when
values.schema.json was skipped (--skip-schema-validation): the approvals.
*/}}
{{- define "webhook-guard.validate" -}}
{{- /*
One release per cluster: the cluster-wide names are fixed. On install and
upgrade (lookup reads nothing in helm template), a ClusterRole
webhook-guard-targets of another Helm release refuses this one in words
that say what to do, before Helm's own ownership error.
*/ -}}
{{- with lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "" "webhook-guard-targets" -}}
{{- $owner := .metadata.annotations | default dict -}}
{{- $name := get $owner "meta.helm.sh/release-name" -}}
{{- $namespace := get $owner "meta.helm.sh/release-namespace" -}}
{{- if and $name (or (ne $name $.Release.Name) (ne $namespace $.Release.Namespace)) -}}
{{- fail (printf "webhook-guard is already installed in this cluster as release %q in namespace %q: its cluster-wide objects (ClusterRoles, bindings, the guard policy) have fixed names, so a cluster runs one release of this chart. Upgrade that release (helm upgrade %s -n %s), or uninstall it first" $name $namespace $name $namespace) -}}
{{- end -}}
{{- end -}}
{{- if .Values.marking.policies -}}
{{- fail "marking.policies is no longer read: the chart renders the marking policies of the targets itself. Drop --set-file marking.policies=..." -}}
{{- end -}}
{{- range $i, $t := .Values.targets -}}
{{- if eq ($t.mode | default "") "Observe" -}}
{{- /* Observe changes nothing: no approval needed. */ -}}
{{- else if eq ($t.kind | default "Mutating") "Validating" -}}
{{- if ne (toString $t.allowAdmissionWithoutValidation) "true" -}}
{{- fail (printf "targets[%d].allowAdmissionWithoutValidation: must be true: opening the circuit admits requests without this webhook's validation, a security decision, and only an operator can approve that" $i) -}}
{{- end -}}
{{- else if ne (toString $t.allowAdmissionWithoutMutation) "true" -}}
{{- fail (printf "targets[%d].allowAdmissionWithoutMutation: must be true: opening the circuit admits objects without this webhook's mutation, and only an operator can approve that" $i) -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
webhook-guard.marking renders the marking policy and binding of each
mutating target, in the order of the targets, without repeats, into a JSON
list of objects: exactly what "guard manifests marking" renders, with no
step before helm. files/marking.json is the guard's template of them
(marking.TemplateJSON, written by "make manifests"); a circuit's objects
are the template with its names (the webhook's also with each "." as
"[.]", in the patterns that find its entry), its ID (the first 10 hex characters of
the SHA-256 of "<configuration>/<webhook>") and its digest (16 of the
SHA-256 of the template's digest, a space and "<configuration>/<webhook>")
put in (TestTemplateJSON_filledIsRender does the same in Go).
*/}}
{{- define "webhook-guard.marking" -}}
{{- $template := .Files.Get "files/marking.json" -}}
{{- $digest := (fromJson $template).digest -}}
{{- $objs := list -}}
{{- $seen := dict -}}
{{- range .Values.targets -}}
{{- $circuit := printf "%s/%s" .configuration .webhook -}}
{{- if and (ne (.kind | default "Mutating") "Validating") (not (hasKey $seen $circuit)) -}}
{{- $_ := set $seen $circuit true -}}
{{- $filled := $template | replace "@ID@" ($circuit | sha256sum | trunc 10) | replace "@DIGEST@" (printf "%s %s" $digest $circuit | sha256sum | trunc 16) | replace "@CONFIGURATION@" .configuration | replace "@WEBHOOK_PATTERN@" (.webhook | replace "." "[.]") | replace "@WEBHOOK@" .webhook | fromJson -}}
{{- $objs = append (append $objs $filled.policy) $filled.binding -}}
{{- end -}}
{{- end -}}
{{- toJson $objs -}}
{{- end }}

{{/*
webhook-guard.releaseArgs are the arguments of the pre-delete hook's
"guard release" (release_hook.yaml), one YAML list item a line; the e2e
test runs the guard with the same.
*/}}
{{- define "webhook-guard.releaseArgs" -}}
- release
- --all
- --scale-down
- --timeout=2m
- --config=/etc/webhook-guard/config.yaml
- --namespace={{ include "webhook-guard.namespace" . }}
- --deployment=webhook-guard
- --breaker=system:serviceaccount:{{ include "webhook-guard.namespace" . }}:{{ include "webhook-guard.serviceAccountName" . }}
{{- end }}

{{/*
webhook-guard.testArgs are the arguments of the "helm test" Pod's guard
(tests/status.yaml), one YAML list item a line; the e2e test runs the
guard with the same.
*/}}
{{- define "webhook-guard.testArgs" -}}
- status
- --exit-code
- --wait=60s
- --namespace={{ include "webhook-guard.namespace" . }}
{{- end }}

{{/*
webhook-guard.policy renders the guard ValidatingAdmissionPolicy and its
binding into a JSON list of the two objects: exactly what "guard manifests
policy" renders for this release's ServiceAccount and targets, with no
step before helm. files/policy.json is the guard's template of them
(admission.PolicyTemplateJSON, written by "make manifests"); the chart puts
in the objects' name, the breaker's and the release identity's usernames,
each kind's managed configurations (sorted; the targets in Observe mode are
not managed) as resourceNames and as the CEL map literal of their sorted
webhook names, and the inputs annotation (TestPolicyTemplateJSON_filledIsRender
does the same in Go; test/e2e/helm compares with the guard's own rendering).
The guard only reads these objects: its ServiceAccount may not write them.
*/}}
{{- define "webhook-guard.policy" -}}
{{- $template := .Files.Get "files/policy.json" -}}
{{- $t := fromJson $template -}}
{{- $ns := include "webhook-guard.namespace" . -}}
{{- $breaker := printf "system:serviceaccount:%s:%s" $ns (include "webhook-guard.serviceAccountName" .) -}}
{{- $releaser := printf "%s-release" $breaker -}}
{{- $name := printf "webhook-guard%s" (.Values.instance | empty | ternary "" (printf "-%s" .Values.instance)) -}}
{{- $managed := dict "Mutating" (dict) "Validating" (dict) -}}
{{- range .Values.targets -}}
{{- if ne (.mode | default "") "Observe" -}}
{{- if or (contains "'" .webhook) (contains "\\" .webhook) (contains "'" .configuration) (contains "\\" .configuration) -}}
{{- fail (printf "targets: %s/%s: a name with a quote or a backslash is not a Kubernetes name" .configuration .webhook) -}}
{{- end -}}
{{- $byConfig := get $managed (.kind | default "Mutating") -}}
{{- $_ := set $byConfig .configuration (append (get $byConfig .configuration | default list) .webhook | uniq | sortAlpha) -}}
{{- end -}}
{{- end -}}
{{- $kinds := list -}}
{{- $names := dict -}}
{{- range $kind, $resource := dict "Mutating" "mutatingwebhookconfigurations" "Validating" "validatingwebhookconfigurations" -}}
{{- $byConfig := get $managed $kind -}}
{{- $entries := list -}}
{{- range $config := keys $byConfig | sortAlpha -}}
{{- $hooks := list -}}
{{- range get $byConfig $config }}{{ $hooks = append $hooks (printf "'%s'" .) }}{{ end -}}
{{- $entries = append $entries (printf "'%s': [%s]" $config (join ", " $hooks)) -}}
{{- end -}}
{{- if and (eq $kind "Mutating") (empty (get $managed "Mutating")) (empty (get $managed "Validating")) -}}
{{- $entries = append $entries (printf "'%s': ['']" $t.noManaged) -}}
{{- end -}}
{{- $kinds = append $kinds (printf "'%s': {%s}" $resource (join ", " $entries)) -}}
{{- $_ := set $names $kind (keys $byConfig | sortAlpha | default (list $t.noManaged)) -}}
{{- end -}}
{{- $inputs := dict "breaker" $breaker "releaser" $releaser "mutating" (get $managed "Mutating") "validating" (get $managed "Validating") -}}
{{- $filled := $template
  | replace "[\"@MUTATING_NAMES@\"]" (get $names "Mutating" | toJson)
  | replace "[\"@VALIDATING_NAMES@\"]" (get $names "Validating" | toJson)
  | replace "\"@INPUTS@\"" ($inputs | toJson | toJson)
  | replace "@MANAGED@" (printf "{%s}" (join ", " $kinds))
  | replace "@POLICY_NAME@" $name
  | replace $t.breaker $breaker
  | replace $t.releaser $releaser
  | fromJson -}}
{{- toJson (list $filled.policy $filled.binding) -}}
{{- end }}
