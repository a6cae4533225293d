{{- define "lockstep.fullname" -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- define "lockstep.labels" -}}
app.kubernetes.io/name: lockstep-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: lockstep
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{- define "lockstep.selector" -}}
app.kubernetes.io/name: lockstep-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "lockstep.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- define "lockstep.agentImage" -}}
{{- if .Values.agent.image.repository -}}
{{- printf "%s:%s" .Values.agent.image.repository (default .Chart.AppVersion .Values.agent.image.tag) -}}
{{- end -}}
{{- end -}}
