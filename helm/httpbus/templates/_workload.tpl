{{/*
The shape the three services share: a Deployment, its Service and its PodDisruptionBudget.
Called with (dict "root" $ "values" .Values.producer "component" "producer" "role" "producer"
"adminToken" true "autoscaled" true); "archive" true gives the pods the archive's S3 keys and
local root (the control plane's).
*/}}
{{- define "httpbus.deployment" -}}
{{- $root := .root -}}
{{- $v := .values -}}
{{- $fullname := include "httpbus.fullname" $root -}}
{{- $selector := include "httpbus.selectorLabels" (dict "root" $root "component" .component) -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $fullname }}-{{ .component }}
  labels:
    {{- include "httpbus.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  {{- if not .autoscaled }}
  replicas: {{ int $v.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  strategy:
    type: RollingUpdate
    rollingUpdate:
      # Start the new pod before stopping an old one: capacity never drops during an upgrade.
      maxSurge: 1
      maxUnavailable: 0
  selector:
    matchLabels:
      {{- $selector | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "httpbus.labels" $root | nindent 8 }}
        app.kubernetes.io/component: {{ .component }}
      annotations:
        # A changed settings file or secret rolls the pods (settings are read once, at start).
        checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
        checksum/secret: {{ toYaml $root.Values.secret | sha256sum }}
        {{- with $root.Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "httpbus.serviceAccountName" $root }}
      automountServiceAccountToken: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      terminationGracePeriodSeconds: {{ int $v.terminationGracePeriodSeconds }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      {{- with $v.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- range . }}
        - {{ toYaml (merge (dict "labelSelector" (dict "matchLabels" ($selector | fromYaml))) .) | nindent 10 | trim }}
        {{- end }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "httpbus.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args: [{{ .role | quote }}, "--config", "/etc/httpbus/{{ .role }}.yaml"]
          ports:
            - name: http
              containerPort: {{ int $v.port }}
              protocol: TCP
          env:
            # The pod's name is unique, so it is the member id the process joins the metastore
            # group under (the default, host and pid, repeats: every container's pid is 1).
            - name: HTTPBUS_MEMBER_ID
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            - name: PYTHONUNBUFFERED
              value: "1"
            {{- if .adminToken }}
            - name: HTTPBUS_ADMIN_TOKEN
              valueFrom:
                secretKeyRef:
                  name: {{ include "httpbus.secretName" $root }}
                  key: admin-token
            {{- end }}
            {{- if .databaseUrl }}
            {{- include "httpbus.databaseUrlEnv" $root | nindent 12 }}
            {{- end }}
            {{- if .archive }}
            {{- with include "httpbus.archiveEnv" $root | trim }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- end }}
            {{- with include "httpbus.secretEnv" $root | trim }}
            {{- . | nindent 12 }}
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- with $v.preStopSleepSeconds }}
          lifecycle:
            # Keep serving while the endpoint removal reaches every kube-proxy and ingress, so
            # no client is sent to a pod that already stopped listening.
            preStop:
              exec:
                command: ["sleep", {{ . | int | toString | quote }}]
          {{- end }}
          startupProbe:
            httpGet: {path: /healthz, port: http}
            {{- toYaml $root.Values.probes.startup | nindent 12 }}
          livenessProbe:
            httpGet: {path: /healthz, port: http}
            {{- toYaml $root.Values.probes.liveness | nindent 12 }}
          readinessProbe:
            httpGet: {path: /readyz, port: http}
            {{- toYaml $root.Values.probes.readiness | nindent 12 }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.containerSecurityContext | nindent 12 }}
          volumeMounts:
            - name: config
              mountPath: /etc/httpbus
              readOnly: true
            - name: tmp
              mountPath: /tmp
            {{- if and .archive $root.Values.archive.localRoot }}
            # The archive's local root (docs/archive.md): shared by every replica.
            - name: archive
              mountPath: {{ $root.Values.archive.localRoot }}
            {{- end }}
      volumes:
        - name: config
          configMap:
            name: {{ $fullname }}
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        {{- if and .archive $root.Values.archive.localRoot }}
        - {{ toYaml (merge (dict "name" "archive") $root.Values.archive.localVolume) | nindent 10 | trim }}
        {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{- define "httpbus.service" -}}
{{- $root := .root -}}
{{- $v := .values -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "httpbus.fullname" $root }}-{{ .component }}
  labels:
    {{- include "httpbus.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
    {{- if $v.metrics }}
    httpbus.io/metrics: "true"
    {{- end }}
  {{- with $v.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ $v.service.type }}
  selector:
    {{- include "httpbus.selectorLabels" (dict "root" $root "component" .component) | nindent 4 }}
  ports:
    - name: http
      port: {{ int $v.service.port }}
      targetPort: http
      protocol: TCP
{{- end -}}

{{- define "httpbus.pdb" -}}
{{- $root := .root -}}
{{- $pdb := .values.pdb -}}
{{- if $pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "httpbus.fullname" $root }}-{{ .component }}
  labels:
    {{- include "httpbus.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  {{- if hasKey $pdb "minAvailable" }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $pdb.maxUnavailable | default 1 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "httpbus.selectorLabels" (dict "root" $root "component" .component) | nindent 6 }}
{{- end }}
{{- end -}}
