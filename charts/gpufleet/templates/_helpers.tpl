{{/* Labels on every object: kustomize's common label of deploy/, plus Helm's own. */}}
{{- define "gpufleet.labels" -}}
app.kubernetes.io/part-of: gpufleet
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Labels on pod templates: no chart version, so that an upgrade of the chart alone rolls no pod. */}}
{{- define "gpufleet.podLabels" -}}
app.kubernetes.io/part-of: gpufleet
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpufleet.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The scheduling profile: values.scheduler.profile, or the shipped default (files/profile.yaml). */}}
{{- define "gpufleet.profile" -}}
{{- if .Values.scheduler.profile -}}
{{ .Values.scheduler.profile }}
{{- else -}}
{{ .Files.Get "files/profile.yaml" }}
{{- end -}}
{{- end -}}

{{/* The agent config: values.agent.config, or the shipped default (files/agent-config.yaml). */}}
{{- define "gpufleet.agentConfig" -}}
{{- if .Values.agent.config -}}
{{ .Values.agent.config }}
{{- else -}}
{{ .Files.Get "files/agent-config.yaml" }}
{{- end -}}
{{- end -}}

{{/* flags.mpsRoot of the agent config (the agent's default when unset): the DaemonSet mounts it. */}}
{{- define "gpufleet.mpsRoot" -}}
{{- $config := fromYaml (include "gpufleet.agentConfig" .) -}}
{{- if hasKey $config "Error" -}}
{{- fail (printf "agent.config is not a YAML mapping: %s" (get $config "Error")) -}}
{{- end -}}
{{- $flags := get $config "flags" | default dict -}}
{{- get $flags "mpsRoot" | default "/run/nvidia/mps" | trimSuffix "/" -}}
{{- end -}}

{{/* gpufleet.dra.publish of the agent config: the DaemonSet then mounts the kubelet's DRA plugin
directories and the CDI directory ("true" or ""). */}}
{{- define "gpufleet.draPublish" -}}
{{- $config := fromYaml (include "gpufleet.agentConfig" .) -}}
{{- $gpufleet := get $config "gpufleet" | default dict -}}
{{- $dra := get $gpufleet "dra" | default dict -}}
{{- if get $dra "publish" -}}true{{- end -}}
{{- end -}}
