{{/* Labels on every object: what deploy/ sets, plus Helm's own. */}}
{{- define "gofit.labels" -}}
app.kubernetes.io/part-of: gofit
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gofit.webhookLabels" -}}
app.kubernetes.io/name: gofit-webhook
{{ include "gofit.labels" . }}
{{- end -}}

{{/* The image: repository@digest, else repository:tag (appVersion by default). */}}
{{- define "gofit.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "gofit.env" -}}
{{- range $k, $v := . }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{- define "gofit.qosNamespace" -}}
{{ .Values.node.qosConfig.namespace | default (include "gofit.nodeNamespace" .) }}
{{- end -}}

{{/* Where the monitoring objects go: monitoring.namespace, else the webhook's, else the agent's. */}}
{{- define "gofit.monitoringNamespace" -}}
{{- if .Values.monitoring.namespace -}}
{{ .Values.monitoring.namespace }}
{{- else if .Values.webhook.enabled -}}
{{ include "gofit.webhookNamespace" . }}
{{- else -}}
{{ include "gofit.nodeNamespace" . }}
{{- end -}}
{{- end -}}

{{/* The namespaces: the component's value, else the release's. */}}
{{- define "gofit.webhookNamespace" -}}
{{ .Values.webhook.namespace | default .Release.Namespace }}
{{- end -}}

{{- define "gofit.nodeNamespace" -}}
{{ .Values.node.namespace | default .Release.Namespace }}
{{- end -}}

{{/* The ServiceAccounts: serviceAccount.name, else gofit-webhook / gofit-node. */}}
{{- define "gofit.webhookServiceAccount" -}}
{{ .Values.webhook.serviceAccount.name | default "gofit-webhook" }}
{{- end -}}

{{- define "gofit.nodeServiceAccount" -}}
{{ .Values.node.serviceAccount.name | default "gofit-node" }}
{{- end -}}
