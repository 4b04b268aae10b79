{{/*
One bundled store: a headless Service and a one-replica StatefulSet with a PersistentVolumeClaim.
Arguments (a dict): root; name (minio, opensearch, qdrant, neo4j); store (its values); uid (the
image's non-root user); ports (list of dicts name/port); dataPath; container (YAML of the
store-specific container fields: args, env, probes).
*/}}
{{- define "lorekeeper.bundledStore" -}}
{{- $root := .root -}}
{{- $fullname := printf "%s-%s" (include "lorekeeper.fullname" $root) .name -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ $fullname }}
  labels:
    {{- include "lorekeeper.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
spec:
  clusterIP: None
  selector:
    {{- include "lorekeeper.selectorLabels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
  ports:
    {{- range .ports }}
    - name: {{ .name }}
      port: {{ .port }}
      targetPort: {{ .name }}
    {{- end }}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ $fullname }}
  labels:
    {{- include "lorekeeper.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .name }}
spec:
  serviceName: {{ $fullname }}
  replicas: 1
  selector:
    matchLabels:
      {{- include "lorekeeper.selectorLabels" $root | nindent 6 }}
      app.kubernetes.io/component: {{ .name }}
  template:
    metadata:
      labels:
        {{- include "lorekeeper.selectorLabels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .name }}
    spec:
      securityContext:
        runAsNonRoot: true
        runAsUser: {{ .uid }}
        runAsGroup: {{ .uid }}
        fsGroup: {{ .uid }}
        seccompProfile:
          type: RuntimeDefault
      containers:
        - name: {{ .name }}
          image: {{ .store.image | quote }}
          imagePullPolicy: IfNotPresent
          ports:
            {{- range .ports }}
            - name: {{ .name }}
              containerPort: {{ .port }}
            {{- end }}
          {{- .container | nindent 10 }}
          resources:
            {{- toYaml .store.resources | nindent 12 }}
          securityContext:
            allowPrivilegeEscalation: false
            capabilities:
              drop: [ALL]
          volumeMounts:
            - name: data
              mountPath: {{ .dataPath }}
  volumeClaimTemplates:
    - metadata:
        name: data
      spec:
        accessModes: [ReadWriteOnce]
        {{- with $root.Values.stores.bundled.storageClassName }}
        storageClassName: {{ . }}
        {{- end }}
        resources:
          requests:
            storage: {{ .store.storage }}
{{- end -}}

{{/* An environment variable from the chart's Secret. Arguments: root, name, key. */}}
{{- define "lorekeeper.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "lorekeeper.secretName" .root }}
      key: {{ .key }}
{{- end -}}
