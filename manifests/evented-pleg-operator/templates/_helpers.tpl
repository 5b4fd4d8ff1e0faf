{{/* The prefix of every object name: fullnameOverride as given, else nameOverride, else "evented-pleg". */}}
{{- define "epo.name" -}}
{{- .Values.fullnameOverride | default .Values.nameOverride | default "evented-pleg" | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{/* global.imageRegistry, when set, is put before image.repository (a mirror of the whole path). */}}
{{- define "epo.repository" -}}
{{- with (.Values.global | default dict).imageRegistry }}{{ trimSuffix "/" . }}/{{ end }}{{ .Values.image.repository -}}
{{- end -}}
{{- define "epo.image" -}}
{{- if .Values.image.digest -}}
{{ include "epo.repository" . }}@{{ .Values.image.digest }}
{{- else -}}
{{ include "epo.repository" . }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}
{{- define "epo.labels" -}}
app.kubernetes.io/part-of: evented-pleg-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "epo.operatorName" -}}{{ include "epo.name" . }}-operator{{- end -}}
{{- define "epo.agentName" -}}{{ include "epo.name" . }}-agent{{- end -}}
{{/*
The ServiceAccounts the pods run as: the chart's own (serviceAccount.create), or one the user made
(create: false, name required). The RBAC bindings and the admission policies (which match on the
account's username) follow the name.
*/}}
{{- define "epo.serviceAccountName" -}}
{{- $sa := .sa | default dict -}}
{{- if and (hasKey $sa "create") (not $sa.create) -}}
{{- required (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false" .component .component) $sa.name -}}
{{- else -}}
{{- $sa.name | default .default -}}
{{- end -}}
{{- end -}}
{{- define "epo.operatorServiceAccount" -}}
{{- include "epo.serviceAccountName" (dict "sa" .Values.operator.serviceAccount "component" "operator" "default" (include "epo.operatorName" .)) -}}
{{- end -}}
{{- define "epo.agentServiceAccount" -}}
{{- include "epo.serviceAccountName" (dict "sa" .Values.agent.serviceAccount "component" "agent" "default" (include "epo.agentName" .)) -}}
{{- end -}}
{{- define "epo.operatorUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "epo.operatorServiceAccount" . }}
{{- end -}}
{{- define "epo.agentUser" -}}
system:serviceaccount:{{ .Values.agent.namespace }}:{{ include "epo.agentServiceAccount" . }}
{{- end -}}
{{/* Selector labels are immutable on a Deployment/DaemonSet: keep them to name + instance + component. */}}
{{- define "epo.operatorSelector" -}}
app.kubernetes.io/name: {{ include "epo.operatorName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}
{{- define "epo.agentSelector" -}}
app.kubernetes.io/name: {{ include "epo.agentName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}
{{/* Common labels plus the selector's name and component (instance is already in epo.labels). */}}
{{- define "epo.operatorLabels" -}}
{{ include "epo.labels" . }}
app.kubernetes.io/name: {{ include "epo.operatorName" . }}
app.kubernetes.io/component: operator
{{- end -}}
{{- define "epo.agentLabels" -}}
{{ include "epo.labels" . }}
app.kubernetes.io/name: {{ include "epo.agentName" . }}
app.kubernetes.io/component: agent
{{- end -}}

{{/*
nodeAffinity: the given affinity's, with kubernetes.io/arch In image.architectures added to every required
node selector term (the terms are ORed, so each must carry it): pods land only on nodes the image runs on.
*/}}
{{- define "epo.nodeAffinity" -}}
{{- $node := deepCopy (get (.affinity | default dict) "nodeAffinity" | default dict) -}}
{{- $required := get $node "requiredDuringSchedulingIgnoredDuringExecution" | default dict -}}
{{- $arch := dict "key" "kubernetes.io/arch" "operator" "In" "values" .architectures -}}
{{- $terms := list -}}
{{- range (get $required "nodeSelectorTerms" | default (list dict)) -}}
{{- $terms = append $terms (set (deepCopy .) "matchExpressions" (append (get . "matchExpressions" | default list) $arch)) -}}
{{- end -}}
{{- $_ := set $required "nodeSelectorTerms" $terms -}}
{{- $_ := set $node "requiredDuringSchedulingIgnoredDuringExecution" $required -}}
nodeAffinity: {{- toYaml $node | nindent 2 }}
{{- end -}}
{{/* drain.listNamespaces, on unless set to false: a release upgraded with --reuse-values from a chart
without the key keeps what it had (`namespaces list`). "true" or "". */}}
{{- define "epo.listNamespaces" -}}
{{- if or (not (hasKey .Values.drain "listNamespaces")) .Values.drain.listNamespaces }}true{{ end -}}
{{- end -}}

{{/*
The Node annotations only the operator writes (protocol.WRITERS, Writer.OPERATOR, under eventedpleg.io/;
tests/chart checks the two agree). node-keys-vap.yaml refuses them to everyone else.
*/}}
{{- define "epo.operatorNodeKeys" -}}
{{- $keys := list -}}
{{- range list "desired-config" "agent-options" "owner" "was-unschedulable" "cordoned" "autoscaler-hold" "drain-timeouts" "blocked" "tainted-since" "taint" "awaiting-approval" "cause" -}}
{{- $keys = append $keys (printf "eventedpleg.io/%s" .) -}}
{{- end -}}
{{ $keys | toJson }}
{{- end -}}

{{/*
The label validations of the operator's and the agent's Node policies (they define variables oldLabels,
newLabels and newAnnotations): of a Node's labels only eventedpleg.io/state (protocol.LABEL_STATE) may
change, and only to the value of the state annotation in the same write (absent with it), so a writer
can show no state the annotation does not hold. Every other label steers workloads and stays as it was.
*/}}
{{- define "epo.stateLabelOnly" -}}
- expression: >-
    variables.newLabels.all(k, k == 'eventedpleg.io/state' ||
      (k in variables.oldLabels && variables.oldLabels[k] == variables.newLabels[k])) &&
    variables.oldLabels.all(k, k == 'eventedpleg.io/state' || k in variables.newLabels)
  message: a Node's labels may not change, but eventedpleg.io/state
  reason: Forbidden
- expression: >-
    variables.newLabels[?'eventedpleg.io/state'].orValue('') ==
      variables.oldLabels[?'eventedpleg.io/state'].orValue('') ||
    variables.newLabels[?'eventedpleg.io/state'].orValue('') ==
      variables.newAnnotations[?'eventedpleg.io/state'].orValue('')
  message: >-
    the label eventedpleg.io/state may change only to the value of the annotation eventedpleg.io/state in
    the same write (removed with it)
  reason: Forbidden
{{- end -}}
