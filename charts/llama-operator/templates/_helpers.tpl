{{/* The chart's name as its parent knows it: an alias (dependencies[].alias) renames it, so two aliased
copies in one release get objects of their own. */}}
{{- define "llama-operator.name" -}}{{ .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end }}

{{- define "llama-operator.fullname" -}}
{{- $name := include "llama-operator.name" . }}
{{- if .Values.fullnameOverride }}{{ .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains $name .Release.Name }}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}{{ printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}{{ end }}
{{- end }}

{{/* monitoring.labels, on every ServiceMonitor, PodMonitor and PrometheusRule (and, through the config, the
operator's own PodMonitors), then the object's own additionalLabels. */}}
{{- define "llama-operator.monitoringLabels" -}}
{{- $labels := merge (dict) (.extra | default dict) (.root.Values.monitoring | default dict).labels -}}
{{- with $labels }}{{ toYaml . }}{{ end }}
{{- end }}

{{- define "llama-operator.labels" -}}
app.kubernetes.io/name: {{ include "llama-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "llama-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llama-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "llama-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}{{ default (include "llama-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}{{ default "default" .Values.serviceAccount.name }}{{ end }}
{{- end }}

{{/* What the operator does in the namespaces it serves: no Secrets, no exec, no pod writes but one condition
in a pod's status (the LoRA adapters' readiness gate, set once the adapters are loaded). */}}
{{- define "llama-operator.namespacedRules" -}}
- apiGroups: [serving.llama-operator.dev]
  resources: [llamaservices]
  verbs: [get, list, watch, patch, update]
- apiGroups: [serving.llama-operator.dev]
  resources: [llamaservices/status]
  verbs: [get, patch, update]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, update, delete]
# The stage DaemonSet of a LlamaService with spec.model.cache.nodeLocal (docs/cold-start.md).
- apiGroups: [apps]
  resources: [daemonsets]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, update, delete]
# patch: before a scale-down, the replicas' pod-deletion-cost and drain protection (reconcile/scale_down.py).
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, patch]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [monitoring.coreos.com]
  resources: [podmonitors]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [leaderworkerset.x-k8s.io]
  resources: [leaderworkersets]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
# An InferencePool per LlamaService when the Gateway API Inference Extension's CRD is served.
- apiGroups: [inference.networking.k8s.io]
  resources: [inferencepools]
  verbs: [get, list, watch, create, patch, update, delete]
# The router's demand Leases (its own namespace; it has no write access to LlamaServices): copied onto them.
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch]
{{- end }}

{{/* watchNamespaces as a list, whether the values give a list or a comma-separated string. */}}
{{- define "llama-operator.watchNamespaces" -}}
{{- $given := .Values.watchNamespaces -}}
{{- if kindIs "string" $given }}{{ $given = splitList "," $given }}{{ end -}}
{{- $out := list -}}
{{- range $given }}{{ $name := trim . }}{{ if $name }}{{ $out = append $out $name }}{{ end }}{{ end -}}
{{- /* The operator follows the activator's endpoints in its own namespace: watch it too. */ -}}
{{- if and $out .Values.activator.enabled (not (has .Release.Namespace $out)) }}{{ $out = append $out .Release.Namespace }}{{ end -}}
{{- toJson $out -}}
{{- end }}

{{/* A repository with global.imageRegistry (a parent chart's mirror) in place of its own registry: the first
path segment is a registry when it has a dot or a port, or is localhost (as Docker reads a reference). */}}
{{- define "llama-operator.repository" -}}
{{- $registry := (.root.Values.global | default dict).imageRegistry | default "" | trimSuffix "/" -}}
{{- $repository := .repository -}}
{{- if $registry }}
{{- $parts := splitList "/" $repository -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- $repository = rest $parts | join "/" }}
{{- end }}
{{- $repository = printf "%s/%s" $registry $repository }}
{{- end }}
{{- $repository -}}
{{- end }}

{{/* imagePullSecrets of the chart's pods: imagePullSecrets, then global.imagePullSecrets (names or
{name: ...}), each once. */}}
{{- define "llama-operator.imagePullSecrets" -}}
{{- $names := list -}}
{{- range .Values.imagePullSecrets }}{{ $names = append $names .name }}{{ end -}}
{{- range (.Values.global | default dict).imagePullSecrets }}
{{- if kindIs "string" . }}{{ $names = append $names . }}{{ else }}{{ $names = append $names .name }}{{ end }}
{{- end -}}
{{- $secrets := list -}}
{{- range $names | uniq }}{{ $secrets = append $secrets (dict "name" .) }}{{ end -}}
{{- with $secrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "llama-operator.image" -}}
{{- $repository := include "llama-operator.repository" (dict "root" . "repository" .Values.image.repository) -}}
{{- if .Values.image.digest }}{{ printf "%s@%s" $repository .Values.image.digest }}
{{- else }}{{ printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) }}{{ end }}
{{- end }}

{{/* The activator's image: activator.image.* where set, else the operator's image values. */}}
{{- define "llama-operator.activatorImage" -}}
{{- $own := .Values.activator.image | default dict -}}
{{- $repository := include "llama-operator.repository" (dict "root" . "repository" ($own.repository | default .Values.image.repository)) -}}
{{- if $own.digest }}{{ printf "%s@%s" $repository $own.digest }}
{{- else if $own.tag }}{{ printf "%s:%s" $repository $own.tag }}
{{- else if and (not $own.repository) .Values.image.digest }}{{ printf "%s@%s" $repository .Values.image.digest }}
{{- else }}{{ printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) }}{{ end }}
{{- end }}

{{/* The operator's configuration: .Values.config plus the files that .Values.prometheus mounts (the
Secrets stay Secrets: the ConfigMap holds only their paths). */}}
{{- define "llama-operator.prometheusDir" -}}/etc/llama-operator-prometheus{{- end }}
{{- define "llama-operator.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- if .Values.activator.enabled }}
{{- $_ := set $config "activatorService" (printf "%s-activator" (include "llama-operator.fullname" .)) }}
{{- $_ := set $config "activatorNamespace" .Release.Namespace }}
{{- if and .Values.activator.endpointPickerPort .Values.watchNamespaces (not $config.inferencePoolEndpointPicker) }}
{{- /* the router is the pools' endpoint picker: the Service the chart puts in each watched namespace */}}
{{- $_ := set $config "inferencePoolEndpointPicker" (printf "%s-epp" (include "llama-operator.fullname" .)) }}
{{- $_ := set $config "inferencePoolEndpointPickerPort" .Values.activator.endpointPickerPort }}
{{- end }}
{{- end }}
{{- with (.Values.monitoring | default dict).labels }}
{{- $_ := set $config "podMonitorLabels" (merge (dict) ($config.podMonitorLabels | default dict) .) }}
{{- end }}
{{- $dir := include "llama-operator.prometheusDir" . -}}
{{- $p := .Values.prometheus | default dict -}}
{{- with $p.ca }}
{{- if and .configMap .secret }}{{ fail "prometheus.ca: give configMap or secret, not both" }}{{ end }}
{{- if or .configMap .secret }}
{{- if $config.prometheusCaFile }}{{ fail "prometheus.ca and config.prometheusCaFile both set: keep one" }}{{ end }}
{{- $_ := set $config "prometheusCaFile" (printf "%s/ca/%s" $dir .key) }}
{{- end }}
{{- end }}
{{- with $p.basicAuth }}
{{- if .secretName }}
{{- if or $config.prometheusBasicAuthUsernameFile $config.prometheusBasicAuthPasswordFile }}{{ fail "prometheus.basicAuth and config.prometheusBasicAuth*File both set: keep one" }}{{ end }}
{{- $_ := set $config "prometheusBasicAuthUsernameFile" (printf "%s/basic-auth/%s" $dir .usernameKey) }}
{{- $_ := set $config "prometheusBasicAuthPasswordFile" (printf "%s/basic-auth/%s" $dir .passwordKey) }}
{{- end }}
{{- end }}
{{- with $p.bearerToken }}
{{- if .secretName }}
{{- if $config.prometheusBearerTokenFile }}{{ fail "prometheus.bearerToken and config.prometheusBearerTokenFile both set: keep one" }}{{ end }}
{{- $_ := set $config "prometheusBearerTokenFile" (printf "%s/token/%s" $dir .key) }}
{{- end }}
{{- end }}
{{- toYaml $config }}
{{- end }}
