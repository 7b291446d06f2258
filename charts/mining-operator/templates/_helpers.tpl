{{/* The chart's name, and the release-qualified name every object carries. */}}
{{- define "mining.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mining.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "mining.operator" -}}{{ include "mining.fullname" . | trunc 54 | trimSuffix "-" }}-operator{{- end -}}
{{- define "mining.frontend" -}}{{ include "mining.fullname" . | trunc 54 | trimSuffix "-" }}-frontend{{- end -}}

{{/* Where workflows live: the watched namespace, else the release's. */}}
{{- /* Where MCP workflows (and their Jobs and Pods) live: never the release
       namespace, which holds the trust roots (the ownership key, the
       leader Lease, the quota ledgers, our ServiceAccounts). */}}
{{- define "mining.workflowNamespace" -}}
{{- $default := printf "%s-workflows" .Release.Namespace | trunc 63 | trimSuffix "-" -}}
{{- $name := .Values.workflowNamespace.name | default .Values.watchNamespace | default $default -}}
{{- if eq $name .Release.Namespace -}}
{{- fail (printf "workflowNamespace: the workflows cannot live in the release namespace %s, beside the ownership key, the leader Lease and the quota ledgers that people who may edit workflows must not touch. Leave workflowNamespace.name (and watchNamespace) empty for %s, or name another namespace" .Release.Namespace $default) -}}
{{- end -}}
{{- if and .Values.watchNamespace (ne $name .Values.watchNamespace) -}}
{{- fail (printf "workflowNamespace.name %s differs from watchNamespace %s: the operator would never see the workflows the frontend creates" $name .Values.watchNamespace) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{- /* Where MCP callers' ServiceAccounts live: never where tool Pods run. */}}
{{- define "mining.callerNamespace" -}}
{{- $default := printf "%s-callers" .Release.Namespace | trunc 63 | trimSuffix "-" -}}
{{- $name := .Values.callerNamespace.name | default $default -}}
{{- if eq $name (include "mining.workflowNamespace" .) -}}
{{- fail (printf "callerNamespace: callers' ServiceAccounts cannot live in the workflow namespace %s, where tool Pods could act as them (the frontend refuses their tokens). Leave callerNamespace.name empty for %s, or name another namespace" $name $default) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{- define "mining.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "mining.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "mining.selector" -}}
app.kubernetes.io/name: {{ include "mining.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* A component's ServiceAccount name: (dict "root" . "component" "operator"|"frontend").
     Its own name unless serviceAccount.name says another; an existing one
     (create: false) must be named. */}}
{{- define "mining.serviceAccountName" -}}
{{- $values := index .root.Values .component -}}
{{- $account := $values.serviceAccount | default dict -}}
{{- if and (eq (toString $account.create) "false") (not $account.name) -}}
{{- fail (printf "%s.serviceAccount.create is false: set %s.serviceAccount.name to the existing ServiceAccount to use" .component .component) -}}
{{- end -}}
{{- $account.name | default (include (printf "mining.%s" .component) .root) -}}
{{- end -}}

{{/* The Pod Security "restricted" profile, for the chart's other Pods (helm test). */}}
{{- define "mining.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "mining.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* An image reference: (dict "root" . "image" .Values.X.image "own" true).
     global.imageRegistry (a mirror) prefixes every image; the project's own
     images (own) come from imageRegistry otherwise, tagged with the chart's
     appVersion unless a tag is given; a digest, when given, pins an image
     instead of its tag. */}}
{{- define "mining.image" -}}
{{- $registry := ((.root.Values.global).imageRegistry) | default "" -}}
{{- if and .own (not $registry) }}{{ $registry = .root.Values.imageRegistry | default "" }}{{ end -}}
{{- $registry = $registry | trimSuffix "/" -}}
{{- $tag := .image.tag | default (ternary .root.Chart.AppVersion "" (eq (toString .own) "true")) -}}
{{- if and (not .image.digest) (not $tag) }}{{ fail (printf "%s: set a tag or a digest" .image.repository) }}{{ end -}}
{{- with $registry }}{{ . }}/{{ end }}{{ .image.repository }}
{{- if .image.digest }}@{{ .image.digest }}{{ else }}:{{ $tag }}{{ end }}
{{- end -}}

{{/* The frontend's Host allow-list: its Service's DNS names plus the configured ones. */}}
{{- define "mining.frontendHosts" -}}
{{- $svc := include "mining.frontend" . -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- with include "mining.publicUrl" . }}
{{- /* The public host (an entry without a port matches any port). */}}
{{- $hosts = append $hosts (regexReplaceAll ":[0-9]+$" (urlParse .).host "") -}}
{{- end }}
{{- concat $hosts .Values.frontend.allowedHosts | uniq | join "," -}}
{{- end -}}

{{/* The URL clients reach /mcp at: frontend.publicUrl, else the Ingress's. */}}
{{- define "mining.publicUrl" -}}
{{- $ingress := .Values.frontend.ingress -}}
{{- if .Values.frontend.publicUrl -}}
{{- .Values.frontend.publicUrl -}}
{{- else if $ingress.enabled -}}
{{- printf "%s://%s/mcp" (ternary "https" "http" (gt (len $ingress.tls) 0)) $ingress.host -}}
{{- end -}}
{{- end -}}

{{/* The tokens Secret of `auth.mode: tokens`. */}}
{{- define "mining.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "mining.frontend" .)) .Values.frontend.auth.existingSecret -}}
{{- end -}}

{{- define "mining.ownershipSecret" -}}
{{- default (printf "%s-ownership" (include "mining.frontend" .)) .Values.frontend.ownership.existingSecret -}}
{{- end -}}

{{/* The chart's PriorityClass name (created or named). */}}
{{- define "mining.priorityClass" -}}
{{- if .Values.priorityClass.name -}}
{{- .Values.priorityClass.name -}}
{{- else if .Values.priorityClass.create -}}
{{- include "mining.fullname" . | trunc 49 | trimSuffix "-" }}-control-plane
{{- end -}}
{{- end -}}

{{/* A component's priorityClassName line, when it has one: (dict "root" . "override" .Values.X.priorityClassName). */}}
{{- define "mining.priorityClassName" -}}
{{- $class := .override | default (include "mining.priorityClass" .root) -}}
{{- with $class }}
priorityClassName: {{ . }}
{{- end -}}
{{- end -}}

{{/* A component's topologySpreadConstraints: (dict "root" . "component" "operator" "values" .Values.operator).
     Its own list, each without a labelSelector given the component's; else, with
     topologySpread.default, one that spreads replicas over nodes when it can. */}}
{{- define "mining.topologySpread" -}}
{{- $selector := dict "matchLabels" (include "mining.selector" (dict "root" .root "component" .component) | fromYaml) -}}
{{- $constraints := list -}}
{{- range .values.topologySpreadConstraints -}}
{{- $constraints = append $constraints (merge (deepCopy .) (dict "labelSelector" $selector)) -}}
{{- end -}}
{{- if and (not $constraints) .root.Values.topologySpread.default -}}
{{- $constraints = list (dict "maxSkew" 1 "topologyKey" "kubernetes.io/hostname" "whenUnsatisfiable" "ScheduleAnyway" "labelSelector" $selector) -}}
{{- end -}}
{{- with $constraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/*
The OTLP exporter's environment, when tracing.otlpEndpoint is set.
*/}}
{{- define "mining.otlpEnv" -}}
{{- with .Values.tracing.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ $.Values.tracing.protocol | quote }}
{{- end }}
{{- end }}

{{/* Whether runs' files are kept: a store is chosen and the frontend (whose key signs the upload tokens) is installed. */}}
{{- define "mining.outputsEnabled" -}}
{{- if and .Values.frontend.enabled (ne .Values.outputs.store "none") }}true{{ end -}}
{{- end -}}

{{/* The outputs Service's in-cluster URL (tool Pods upload to it, the frontend reads from it). */}}
{{- define "mining.outputsUrl" -}}
http://{{ include "mining.operator" . }}-outputs.{{ .Release.Namespace }}.svc:8082
{{- end -}}
