{{- define "epo.name" -}}evented-pleg{{- end -}}
{{- define "epo.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- define "epo.labels" -}}
app.kubernetes.io/part-of: evented-pleg-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "epo.operatorName" -}}{{ include "epo.name" . }}-operator{{- end -}}
{{- define "epo.agentName" -}}{{ include "epo.name" . }}-agent{{- end -}}
