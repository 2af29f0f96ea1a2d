{{- define "llama-operator.name" -}}llama-operator{{- end }}

{{- define "llama-operator.fullname" -}}
{{- if contains "llama-operator" .Release.Name }}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}{{ printf "%s-llama-operator" .Release.Name | trunc 63 | trimSuffix "-" }}{{ end }}
{{- end }}

{{- define "llama-operator.labels" -}}
app.kubernetes.io/name: llama-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "llama-operator.selectorLabels" -}}
app.kubernetes.io/name: llama-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "llama-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}{{ default (include "llama-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}{{ default "default" .Values.serviceAccount.name }}{{ end }}
{{- end }}

{{/* What the operator does in the namespaces it serves: no Secrets, no exec, no pod writes. */}}
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
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [monitoring.coreos.com]
  resources: [podmonitors]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}

{{/* watchNamespaces as a list, whether the values give a list or a comma-separated string. */}}
{{- define "llama-operator.watchNamespaces" -}}
{{- $given := .Values.watchNamespaces -}}
{{- if kindIs "string" $given }}{{ $given = splitList "," $given }}{{ end -}}
{{- $out := list -}}
{{- range $given }}{{ $name := trim . }}{{ if $name }}{{ $out = append $out $name }}{{ end }}{{ end -}}
{{- toJson $out -}}
{{- end }}

{{- define "llama-operator.image" -}}
{{- if .Values.image.digest }}{{ printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}{{ end }}
{{- end }}
