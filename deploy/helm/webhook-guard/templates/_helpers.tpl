{{/*
The names are the kustomize base's, fixed: "guard status" finds the
Deployment, the ConfigMap's volume, the Lease and the status reader by
them, and the ClusterRoles are cluster-wide. One release per cluster; a
second installation beside it (instance) needs other ClusterRole names,
which this chart does not render.
*/}}

{{/* webhook-guard.namespace is where every namespaced object goes. */}}
{{- define "webhook-guard.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
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
webhook-guard.mutatingTargets lists "<configuration>/<webhook>" of every
mutating target, sorted, without repeats, as JSON (a template returns a
string).
*/}}
{{- define "webhook-guard.mutatingTargets" -}}
{{- $out := list -}}
{{- range .Values.targets -}}
{{- if ne (.kind | default "Mutating") "Validating" -}}
{{- $out = append $out (printf "%s/%s" .configuration .webhook) -}}
{{- end -}}
{{- end -}}
{{- $out | uniq | sortAlpha | toJson -}}
{{- end }}

{{/*
webhook-guard.validate fails the release with the guard's own words when
values.schema.json was skipped (--skip-schema-validation): the approvals.
*/}}
{{- define "webhook-guard.validate" -}}
{{- if not .Values.targets -}}
{{- fail "targets: Required value: list at least one approved webhook" -}}
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
webhook-guard.marking parses marking.policies ("guard manifests marking"
output) into a JSON list of objects, and fails unless it holds exactly the
marking policy and binding of each mutating target and nothing else.
*/}}
{{- define "webhook-guard.marking" -}}
{{- $want := include "webhook-guard.mutatingTargets" . | fromJsonArray -}}
{{- $objs := list -}}
{{- $policies := list -}}
{{- $bindings := list -}}
{{- $how := "render it from the same targets with the guard of this release, \"guard manifests marking --config config.yaml > marking.yaml\" (or docker run --rm -v \"$PWD:/w\" -w /w <image> manifests marking --config config.yaml > marking.yaml), and pass it with --set-file marking.policies=marking.yaml" -}}
{{- range regexSplit "(?m)^---[ \t]*$" .Values.marking.policies -1 -}}
{{- if regexMatch "(?m)^[^#\\s]" . -}}
{{- $obj := fromYaml . -}}
{{- if hasKey $obj "Error" -}}
{{- fail (printf "marking.policies: not YAML (%s); %s" $obj.Error $how) -}}
{{- end -}}
{{- $marks := index (($obj.metadata | default dict).annotations | default dict) "webhook-guard.io/marks" | default "" -}}
{{- if and (eq $obj.apiVersion "admissionregistration.k8s.io/v1") (eq $obj.kind "MutatingAdmissionPolicy") -}}
{{- $policies = append $policies $marks -}}
{{- else if and (eq $obj.apiVersion "admissionregistration.k8s.io/v1") (eq $obj.kind "MutatingAdmissionPolicyBinding") -}}
{{- $bindings = append $bindings $marks -}}
{{- else -}}
{{- fail (printf "marking.policies: holds a %s %s; it may hold only the MutatingAdmissionPolicies and bindings that \"guard manifests marking\" renders: %s" (toString $obj.kind) (toString (($obj.metadata | default dict).name)) $how) -}}
{{- end -}}
{{- $objs = append $objs $obj -}}
{{- end -}}
{{- end -}}
{{- $policies = $policies | sortAlpha -}}
{{- $bindings = $bindings | sortAlpha -}}
{{- if or (ne (toJson $policies) (toJson $want)) (ne (toJson $bindings) (toJson $want)) -}}
{{- fail (printf "marking.policies was not rendered for these targets: it marks %s (policies) and %s (bindings), the mutating targets are %s; %s" (toJson $policies) (toJson $bindings) (toJson $want) $how) -}}
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
- --breaker=system:serviceaccount:{{ include "webhook-guard.namespace" . }}:webhook-guard
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
