{{- define "ragstream.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ragstream.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ragstream.labels" -}}
app.kubernetes.io/name: {{ include "ragstream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ragstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ragstream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ragstream.secretName" -}}
{{- .Values.existingSecret | default (include "ragstream.fullname" .) -}}
{{- end -}}

{{/* Longer than the longest run: a stop ends runs while their clients still listen. */}}
{{- define "ragstream.terminationGrace" -}}
{{- $run := int .Values.config.runTimeoutSeconds -}}
{{- $grace := .Values.terminationGracePeriodSeconds | default (add $run 30) | int -}}
{{- if le $grace $run -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be longer than config.runTimeoutSeconds (%d), the longest run" $grace $run) -}}
{{- end -}}
{{- $grace -}}
{{- end -}}
