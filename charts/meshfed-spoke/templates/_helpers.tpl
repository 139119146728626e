{{/*
Chart name, overridable with nameOverride.
*/}}
{{- define "meshfed-spoke.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full resource name: fullnameOverride, or the release name when it already
contains the chart name, or <release>-<chart>. Truncated to 63 characters
(the DNS label limit of some name fields).
*/}}
{{- define "meshfed-spoke.fullname" -}}
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
{{- define "meshfed-spoke.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "meshfed-spoke.labels" -}}
helm.sh/chart: {{ include "meshfed-spoke.chart" . }}
{{ include "meshfed-spoke.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: spoke
app.kubernetes.io/part-of: meshfed
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels: stable across upgrades, so never the version.
*/}}
{{- define "meshfed-spoke.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meshfed-spoke.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
ServiceAccount name.
*/}}
{{- define "meshfed-spoke.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "meshfed-spoke.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "meshfed-spoke.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}


{{/*
clusterID, checked: required, and a DNS label as the spoke demands.
*/}}
{{- define "meshfed-spoke.clusterID" -}}
{{- $id := required "clusterID is required: set it to this cluster's ID (a DNS label, unique in the clusterset, matching the spoke certificate's spiffe://<trustDomain>/meshfed/cluster/<clusterID>), e.g. --set clusterID=east" .Values.clusterID }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $id) }}
{{- fail (printf "clusterID %q is not a DNS label (lower-case letters, digits and '-', at most 63 characters)" $id) }}
{{- end }}
{{- $id }}
{{- end }}

{{/*
hub.address, checked: required, and host:port or a comma-separated list of
host:port.
*/}}
{{- define "meshfed-spoke.hubAddress" -}}
{{- $addr := required "hub.address is required: set it to the hub's federation address, host:port (the hub chart's headless sync Service), e.g. --set hub.address=meshfed-hub-sync.meshfed.svc:9443" .Values.hub.address }}
{{- range splitList "," $addr }}
{{- if not (regexMatch "^[^\\s/,]+:[0-9]{1,5}$" .) }}
{{- fail (printf "hub.address %q: %q is not host:port" $addr .) }}
{{- end }}
{{- end }}
{{- $addr }}
{{- end }}

{{/*
export, checked: "exported" or "all".
*/}}
{{- define "meshfed-spoke.export" -}}
{{- if not (has .Values.export (list "exported" "all")) }}
{{- fail (printf "export %q: want \"exported\" or \"all\"" .Values.export) }}
{{- end }}
{{- .Values.export }}
{{- end }}

{{/*
"true" when more than one spoke pod can run, and they must elect a leader:
kind DaemonSet, or a Deployment of more than one replica; else "".
*/}}
{{- define "meshfed-spoke.leaderElection" -}}
{{- if not (has .Values.kind (list "Deployment" "DaemonSet")) }}
{{- fail (printf "kind %q: want \"Deployment\" or \"DaemonSet\"" (toString .Values.kind)) }}
{{- end }}
{{- if or (eq .Values.kind "DaemonSet") (gt (int .Values.replicaCount) 1) }}
{{- if .Values.mcp.enabled }}
{{- fail "mcp.enabled needs a single spoke pod (kind Deployment, replicaCount 1): only the leader of several hears from the hub, and istiod could reach a standby" }}
{{- end }}
{{- if .Values.remoteViews.enabled }}
{{- fail "remoteViews.enabled needs a single spoke pod (kind Deployment, replicaCount 1): only the leader of several hears from the hub, and istiod could reach a standby" }}
{{- end }}true{{ end }}
{{- end }}
