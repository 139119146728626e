{{/*
Chart name, overridable with nameOverride.
*/}}
{{- define "meshfed-hub.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full resource name: fullnameOverride, or the release name when it already
contains the chart name, or <release>-<chart>. Truncated to 63 characters
(the DNS label limit of some name fields).
*/}}
{{- define "meshfed-hub.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "meshfed-hub.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "meshfed-hub.labels" -}}
helm.sh/chart: {{ include "meshfed-hub.chart" . }}
{{ include "meshfed-hub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: hub
app.kubernetes.io/part-of: meshfed
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels: stable across upgrades, so never the version.
*/}}
{{- define "meshfed-hub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meshfed-hub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
ServiceAccount name.
*/}}
{{- define "meshfed-hub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "meshfed-hub.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "meshfed-hub.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
--debug-addr: debug.host and debug.port, with an IPv6 host bracketed. Fails
when something outside the pod must reach a loopback-only debug server.
*/}}
{{- define "meshfed-hub.debugAddr" -}}
{{- $host := .Values.debug.host | default "" | trimPrefix "[" | trimSuffix "]" }}
{{- if and (has $host (list "127.0.0.1" "localhost" "::1")) (or .Values.probes.enabled .Values.metrics.prometheusAnnotations) }}
{{- fail (printf "debug.host %q is loopback-only: the kubelet's probes and Prometheus cannot reach it. Set debug.host to \"\" (all interfaces), or set probes.enabled=false and metrics.prometheusAnnotations=false" $host) }}
{{- end }}
{{- if contains ":" $host }}
{{- printf "[%s]:%d" $host (int .Values.debug.port) }}
{{- else }}
{{- printf "%s:%d" $host (int .Values.debug.port) }}
{{- end }}
{{- end }}

{{/*
Name of the headless Service spokes dial: <fullname>-sync, within the
63-character limit of Service names.
*/}}
{{- define "meshfed-hub.syncServiceName" -}}
{{- printf "%s-sync" (include "meshfed-hub.fullname" . | trunc 58 | trimSuffix "-") }}
{{- end }}

{{/*
Name of the Service proxies dial: <fullname>-xds, within the 63-character
limit of Service names.
*/}}
{{- define "meshfed-hub.xdsServiceName" -}}
{{- printf "%s-xds" (include "meshfed-hub.fullname" . | trunc 59 | trimSuffix "-") }}
{{- end }}

{{/*
The pod's affinity: the affinity value, plus an anti-affinity between the
hub's own pods over kubernetes.io/hostname as podAntiAffinity says ("soft":
preferred, "hard": required, "none") unless affinity sets podAntiAffinity
itself. Empty when there is neither.
*/}}
{{- define "meshfed-hub.affinity" -}}
{{- $mode := .Values.podAntiAffinity }}
{{- if not (has $mode (list "soft" "hard" "none")) }}
{{- fail (printf "podAntiAffinity %q: want \"soft\", \"hard\" or \"none\"" (toString $mode)) }}
{{- end }}
{{- $affinity := deepCopy (.Values.affinity | default dict) }}
{{- if and (ne $mode "none") (not (hasKey $affinity "podAntiAffinity")) }}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "meshfed-hub.selectorLabels" . | fromYaml)) }}
{{- if eq $mode "soft" }}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) }}
{{- else }}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) }}
{{- end }}
{{- end }}
{{- with $affinity }}
{{- toYaml . }}
{{- end }}
{{- end }}
