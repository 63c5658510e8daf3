{{/* The release's name for its objects, at most 63 characters. */}}
{{- define "trellis.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The headless Service that gives each pod its stable DNS name. */}}
{{- define "trellis.peers" -}}
{{- printf "%s-peers" (include "trellis.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "trellis.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "trellis.labels" -}}
{{ include "trellis.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
The grace period on SIGTERM: the daemon bounds its own stop (listeners,
running turns, releasing its leases) at 5 s, and its last commit of events
has half the lease; 5 s more of room. Killed before that, its sessions
would wait for their leases to expire instead of being taken at once.
*/}}
{{- define "trellis.gracePeriod" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add 10 (div (add .Values.leaseSeconds 1) 2) -}}
{{- else -}}
{{- .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{- define "trellis.scheme" -}}
{{- if .Values.tls.enabled }}HTTPS{{ else }}HTTP{{ end -}}
{{- end -}}
