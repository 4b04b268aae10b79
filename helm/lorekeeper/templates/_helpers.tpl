{{/* Names and labels. */}}
{{- define "lorekeeper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-<chart>", cut so that KubeRay's suffixes (-head-svc, -serve-svc, -raycluster-xxxxx)
still fit the 63-character limit of names. */}}
{{- define "lorekeeper.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "lorekeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lorekeeper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lorekeeper.labels" -}}
{{ include "lorekeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The Secret every credential comes from: the user's, or the one this chart makes. */}}
{{- define "lorekeeper.secretName" -}}
{{- if .Values.secrets.existingSecret -}}
{{- .Values.secrets.existingSecret -}}
{{- else -}}
{{- printf "%s-secrets" (include "lorekeeper.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Secret keys and the settings that read them from files (schemas/settings.py: X_FILE twins). */}}
{{- define "lorekeeper.secretFiles" -}}
blob-access-key: LOREKEEPER_BLOB_ACCESS_KEY_FILE
blob-secret-key: LOREKEEPER_BLOB_SECRET_KEY_FILE
text-username: LOREKEEPER_TEXT_USERNAME_FILE
text-password: LOREKEEPER_TEXT_PASSWORD_FILE
vector-api-key: LOREKEEPER_VECTOR_API_KEY_FILE
graph-username: LOREKEEPER_GRAPH_USERNAME_FILE
graph-password: LOREKEEPER_GRAPH_PASSWORD_FILE
api-keys: LOREKEEPER_API_KEYS_FILE
{{- end -}}

{{- define "lorekeeper.secretDir" -}}/var/run/secrets/lorekeeper{{- end -}}

{{/* Refuse to render with no credentials, naming what is missing. */}}
{{- define "lorekeeper.checkSecrets" -}}
{{- if not .Values.secrets.existingSecret -}}
{{- $missing := list -}}
{{- range $key := list "blobAccessKey" "blobSecretKey" "textUsername" "textPassword" "vectorApiKey" "graphUsername" "graphPassword" "apiKeys" -}}
{{- if not (get $.Values.secrets $key) -}}
{{- $missing = append $missing (printf "secrets.%s" $key) -}}
{{- end -}}
{{- end -}}
{{- if and $.Values.serve.narrator.apiKeyFromSecret (not $.Values.secrets.narratorApiKey) -}}
{{- $missing = append $missing "secrets.narratorApiKey" -}}
{{- end -}}
{{- if $.Values.sourceBucket.url -}}
{{- range $key := list "sourceBlobAccessKey" "sourceBlobSecretKey" -}}
{{- if not (get $.Values.secrets $key) -}}
{{- $missing = append $missing (printf "secrets.%s" $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $missing -}}
{{- fail (printf "no credentials: set secrets.existingSecret to the name of a Secret you created, or set %s (there are no default passwords)" (join ", " $missing)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Store URLs for the ConfigMap: the bundled StatefulSets' Services, or the external endpoints. */}}
{{- define "lorekeeper.storeSettings" -}}
{{- $fullname := include "lorekeeper.fullname" . -}}
{{- if eq .Values.stores.mode "bundled" -}}
LOREKEEPER_BLOB_URL: {{ printf "s3://%s?endpoint=http://%s-minio:9000" .Values.stores.bundled.minio.bucket $fullname | quote }}
LOREKEEPER_TEXT_URL: {{ printf "https://%s-opensearch:9200" $fullname | quote }}
LOREKEEPER_TEXT_VERIFY_CERTS: "false"
LOREKEEPER_VECTOR_URL: {{ printf "http://%s-qdrant:6333" $fullname | quote }}
LOREKEEPER_GRAPH_URL: {{ printf "bolt://%s-neo4j:7687" $fullname | quote }}
{{- else -}}
{{- $ext := .Values.stores.external -}}
LOREKEEPER_BLOB_URL: {{ required "stores.external.blobUrl is required with stores.mode=external (s3://BUCKET?endpoint=https://host)" $ext.blobUrl | quote }}
LOREKEEPER_TEXT_URL: {{ required "stores.external.textUrl is required with stores.mode=external" $ext.textUrl | quote }}
LOREKEEPER_TEXT_VERIFY_CERTS: {{ $ext.textVerifyCerts | toString | quote }}
LOREKEEPER_VECTOR_URL: {{ required "stores.external.vectorUrl is required with stores.mode=external" $ext.vectorUrl | quote }}
LOREKEEPER_GRAPH_URL: {{ required "stores.external.graphUrl is required with stores.mode=external" $ext.graphUrl | quote }}
{{- with $ext.graphDatabase }}
LOREKEEPER_GRAPH_DATABASE: {{ . | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{/* Autoscaling bounds must be ordered; JSON Schema cannot compare two fields. */}}
{{- define "lorekeeper.checkBounds" -}}
{{- range $group := list "cpuWorkers" "gpuWorkers" -}}
{{- $g := get $.Values.ray $group -}}
{{- if or (gt (int $g.minReplicas) (int $g.replicas)) (gt (int $g.replicas) (int $g.maxReplicas)) -}}
{{- fail (printf "ray.%s: need minReplicas <= replicas <= maxReplicas (got %v <= %v <= %v)" $group $g.minReplicas $g.replicas $g.maxReplicas) -}}
{{- end -}}
{{- end -}}
{{- range $name := list "narrator" "search" -}}
{{- $d := get $.Values.serve $name -}}
{{- if gt (int $d.minReplicas) (int $d.maxReplicas) -}}
{{- fail (printf "serve.%s: minReplicas %v is above maxReplicas %v" $name $d.minReplicas $d.maxReplicas) -}}
{{- end -}}
{{- end -}}
{{- $narrator := .Values.serve.narrator -}}
{{- if and (eq $narrator.engine "openai") (not $narrator.baseUrl) -}}
{{- fail "serve.narrator.baseUrl is required with serve.narrator.engine=openai (an OpenAI-compatible endpoint)" -}}
{{- end -}}
{{- if and (eq $narrator.engine "vllm") (not .Values.ray.gpuWorkers.enabled) -}}
{{- fail "serve.narrator.engine=vllm needs GPU workers: set ray.gpuWorkers.enabled=true (or use engine openai)" -}}
{{- end -}}
{{- if and (eq $narrator.engine "vllm") (lt (float64 $narrator.numGpus) 1.0) -}}
{{- fail "serve.narrator.engine=vllm needs serve.narrator.numGpus >= 1" -}}
{{- end -}}
{{- if and (or .Values.ray.gpuWorkers.enabled (and .Values.ingestJob.enabled .Values.ingestJob.useGpuWorkers)) (not .Values.ray.gpuWorkers.nodeSelector) -}}
{{- fail "ray.gpuWorkers.nodeSelector is required with GPU workers: the label of your GPU node pool (e.g. cloud.google.com/gke-accelerator: nvidia-l4, or nvidia.com/gpu.present: \"true\")" -}}
{{- end -}}
{{- end -}}

{{/*
A Ray pod template. Arguments (a dict): root (the chart context), cluster ("serving" or "ingest"),
role ("head", "cpu" or "gpu"), group (the values of that group).
*/}}
{{- define "lorekeeper.rayPodTemplate" -}}
{{- $root := .root -}}
{{- $values := $root.Values -}}
{{- $group := .group -}}
{{- $gpu := eq .role "gpu" -}}
metadata:
  labels:
    {{- include "lorekeeper.selectorLabels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ printf "ray-%s" .role }}
    lorekeeper.io/cluster: {{ .cluster }}
    # every Ray pod, serving or ingestion: what the ray-metrics Service selects
    lorekeeper.io/ray-node: "true"
    {{- with $values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
    {{- with $values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  securityContext:
    runAsNonRoot: true
    runAsUser: 1000
    runAsGroup: 100
    fsGroup: 100
    seccompProfile:
      type: RuntimeDefault
  {{- with $values.image.pullSecrets }}
  imagePullSecrets:
    {{- range . }}
    - name: {{ . }}
    {{- end }}
  {{- end }}
  {{- with $group.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $group.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: {{ ternary "ray-head" "ray-worker" (eq .role "head") }}
      image: {{ printf "%s:%s" $values.image.repository (ternary $values.image.gpuTag $values.image.cpuTag $gpu) | quote }}
      imagePullPolicy: {{ $values.image.pullPolicy }}
      {{- if eq .role "head" }}
      ports:
        - { name: gcs-server, containerPort: 6379 }
        - { name: dashboard, containerPort: 8265 }
        - { name: client, containerPort: 10001 }
        - { name: serve, containerPort: 8000 }
        - { name: metrics, containerPort: 8080 }
      {{- else }}
      ports:
        - { name: serve, containerPort: 8000 }
        - { name: metrics, containerPort: 8080 }
      {{- end }}
      envFrom:
        - configMapRef:
            name: {{ include "lorekeeper.fullname" $root }}-config
      env:
        {{- range $key, $variable := include "lorekeeper.secretFiles" $root | fromYaml }}
        - name: {{ $variable }}
          value: {{ printf "%s/%s" (include "lorekeeper.secretDir" $root) $key | quote }}
        {{- end }}
        {{- if $values.serve.narrator.apiKeyFromSecret }}
        - name: LOREKEEPER_NARRATOR_API_KEY_FILE
          value: {{ printf "%s/narrator-api-key" (include "lorekeeper.secretDir" $root) | quote }}
        {{- end }}
        {{- if $values.sourceBucket.url }}
        - name: LOREKEEPER_SOURCE_BLOB_ACCESS_KEY_FILE
          value: {{ printf "%s/source-blob-access-key" (include "lorekeeper.secretDir" $root) | quote }}
        - name: LOREKEEPER_SOURCE_BLOB_SECRET_KEY_FILE
          value: {{ printf "%s/source-blob-secret-key" (include "lorekeeper.secretDir" $root) | quote }}
        {{- end }}
        {{- with $values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      resources:
        {{- $resources := deepCopy $group.resources }}
        {{- if $gpu }}
        {{- $_ := set $resources "limits" (merge (dict "nvidia.com/gpu" (toString $group.gpusPerWorker)) ($resources.limits | default dict)) }}
        {{- end }}
        {{- toYaml $resources | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        capabilities:
          drop: [ALL]
      volumeMounts:
        - name: lorekeeper-secrets
          mountPath: {{ include "lorekeeper.secretDir" $root }}
          readOnly: true
        - name: ray-logs
          mountPath: /tmp/ray
        {{- if $gpu }}
        - name: model-cache
          mountPath: /home/ray/.cache/huggingface
        {{- end }}
  volumes:
    - name: lorekeeper-secrets
      secret:
        secretName: {{ include "lorekeeper.secretName" $root }}
        defaultMode: 0440
    - name: ray-logs
      emptyDir: {}
    {{- if $gpu }}
    - name: model-cache
      {{- if $values.ray.gpuWorkers.modelCacheClaim }}
      persistentVolumeClaim:
        claimName: {{ $values.ray.gpuWorkers.modelCacheClaim }}
        readOnly: true
      {{- else }}
      emptyDir: {}
      {{- end }}
    {{- end }}
{{- end -}}

{{/* The Ray cluster of the RayService and of an ingestion RayJob. Arguments: root, cluster, gpu (bool). */}}
{{- define "lorekeeper.rayClusterSpec" -}}
{{- $root := .root -}}
{{- $ray := $root.Values.ray -}}
rayVersion: {{ $ray.version | quote }}
enableInTreeAutoscaling: true
authOptions:
  mode: {{ $ray.auth.mode }}
  {{- with $ray.auth.existingSecret }}
  secretName: {{ . }}
  {{- end }}
autoscalerOptions:
  idleTimeoutSeconds: {{ $ray.autoscaler.idleTimeoutSeconds }}
  upscalingMode: {{ $ray.autoscaler.upscalingMode }}
  securityContext:
    allowPrivilegeEscalation: false
    runAsNonRoot: true
    capabilities:
      drop: [ALL]
headGroupSpec:
  rayStartParams:
    num-cpus: {{ $ray.head.numCpus | quote }}
    dashboard-host: "0.0.0.0"
    metrics-export-port: "8080"
  template:
    {{- include "lorekeeper.rayPodTemplate" (dict "root" $root "cluster" .cluster "role" "head" "group" $ray.head) | nindent 4 }}
workerGroupSpecs:
  - groupName: cpu
    replicas: {{ $ray.cpuWorkers.replicas }}
    minReplicas: {{ $ray.cpuWorkers.minReplicas }}
    maxReplicas: {{ $ray.cpuWorkers.maxReplicas }}
    rayStartParams:
      metrics-export-port: "8080"
    template:
      {{- include "lorekeeper.rayPodTemplate" (dict "root" $root "cluster" .cluster "role" "cpu" "group" $ray.cpuWorkers) | nindent 6 }}
  {{- if .gpu }}
  - groupName: gpu
    replicas: {{ $ray.gpuWorkers.replicas }}
    minReplicas: {{ $ray.gpuWorkers.minReplicas }}
    maxReplicas: {{ $ray.gpuWorkers.maxReplicas }}
    rayStartParams:
      metrics-export-port: "8080"
      num-gpus: {{ $ray.gpuWorkers.gpusPerWorker | toString | quote }}
    template:
      {{- include "lorekeeper.rayPodTemplate" (dict "root" $root "cluster" .cluster "role" "gpu" "group" $ray.gpuWorkers) | nindent 6 }}
  {{- end }}
{{- end -}}


{{/* The Ray Serve config: cluster/serve-config.yaml with the numbers of values.serve. */}}
{{- define "lorekeeper.serveConfig" -}}
{{- $s := .Values.serve -}}
proxy_location: EveryNode
http_options:
  host: 0.0.0.0
  port: 8000
applications:
  - name: lorekeeper
    route_prefix: /
    import_path: serve.deployments:build_app
    args: {}
    deployments:
      - name: Ingress
        num_replicas: {{ $s.ingress.replicas }}
        ray_actor_options:
          num_cpus: {{ $s.ingress.numCpus }}
      - name: Narrator
        autoscaling_config:
          min_replicas: {{ $s.narrator.minReplicas }}
          max_replicas: {{ $s.narrator.maxReplicas }}
          target_ongoing_requests: {{ $s.narrator.targetOngoingRequests }}
        max_ongoing_requests: {{ $s.narrator.maxOngoingRequests }}
        ray_actor_options:
          num_cpus: {{ $s.narrator.numCpus }}
          num_gpus: {{ $s.narrator.numGpus }}
      - name: Search
        autoscaling_config:
          min_replicas: {{ $s.search.minReplicas }}
          max_replicas: {{ $s.search.maxReplicas }}
          target_ongoing_requests: {{ $s.search.targetOngoingRequests }}
        ray_actor_options:
          num_cpus: {{ $s.search.numCpus }}
      - name: Gate
        num_replicas: {{ $s.gate.replicas }}
        ray_actor_options:
          num_cpus: {{ $s.gate.numCpus }}
{{- end -}}
