{{/* Names and labels. */}}
{{- define "httpbus.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "httpbus.fullname" -}}
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

{{- define "httpbus.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "httpbus.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: httpbus
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels that select one component's pods: (dict "root" $ "component" "producer"). */}}
{{- define "httpbus.selectorLabels" -}}
app.kubernetes.io/name: {{ include "httpbus.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "httpbus.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "httpbus.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "httpbus.secretName" -}}
{{- default (include "httpbus.fullname" .) .Values.secret.existingSecret -}}
{{- end -}}

{{- define "httpbus.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
The Spark image (the Dockerfile's spark target) of the jobs that run Spark: the audit and export
CronJobs and the migration check. The service image carries no Spark.
*/}}
{{- define "httpbus.sparkImage" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- printf "%s:%s" .Values.image.repository (default (printf "%s-spark" $tag) .Values.image.sparkTag) -}}
{{- end -}}

{{/*
The storage clusters, as the services' settings read them (ClusterConfig in
segments.config). Rendered as YAML; callers parse it back with fromYaml.
*/}}
{{- define "httpbus.clusters" -}}
{{- $clusters := dict -}}
{{- with .Values.kafka -}}
{{- if .enabled -}}
{{- $client := dict -}}
{{- range $k, $v := .client -}}
{{- $_ := set $client $k (toString $v) -}}
{{- end -}}
{{- $_ := set $clusters .name (dict
      "backend" "kafka"
      "bootstrap_servers" .bootstrapServers
      "replication_factor" (int .replicationFactor)
      "min_insync_replicas" (int .minInsyncReplicas)
      "linger_ms" (int .lingerMs)
      "produce_timeout_s" .produceTimeoutSeconds
      "client" $client) -}}
{{- end -}}
{{- end -}}
{{- with .Values.pulsar -}}
{{- if .enabled -}}
{{- $_ := set $clusters .name (dict
      "backend" "pulsar"
      "service_url" .serviceUrl
      "admin_url" .adminUrl
      "tenant" .tenant
      "namespace" .namespace
      "batching" .batching
      "produce_timeout_s" .produceTimeoutSeconds) -}}
{{- end -}}
{{- end -}}
{{- if not $clusters -}}
{{- fail "enable at least one storage cluster: kafka.enabled or pulsar.enabled" -}}
{{- end -}}
{{- if not (hasKey $clusters .Values.defaultCluster) -}}
{{- fail (printf "defaultCluster %q is not an enabled cluster (%s)" .Values.defaultCluster (keys $clusters | sortAlpha | join ", ")) -}}
{{- end -}}
{{- if and .Values.auditTrail.cluster (not (hasKey $clusters .Values.auditTrail.cluster)) -}}
{{- fail (printf "auditTrail.cluster %q is not an enabled cluster (%s)" .Values.auditTrail.cluster (keys $clusters | sortAlpha | join ", ")) -}}
{{- end -}}
{{- toYaml $clusters -}}
{{- end -}}

{{- define "httpbus.metastore" -}}
{{- with .Values.metastore.zookeeper -}}
kind: zookeeper
hosts: {{ .hosts | quote }}
root: {{ .root | quote }}
session_timeout_s: {{ .sessionTimeoutSeconds }}
{{- end -}}
{{- end -}}

{{- define "httpbus.auditTrail" -}}
cluster: {{ with .Values.auditTrail.cluster }}{{ . | quote }}{{ else }}null{{ end }}
topic: {{ .Values.auditTrail.topic | quote }}
partitions: {{ int .Values.auditTrail.partitions }}
{{- end -}}

{{/*
One settings file per service: what its settings class reads, from the shared values, then the
component's `config` map on top. Keys are exactly the settings fields (snake_case).
*/}}
{{- define "httpbus.config.controlPlane" -}}
{{- $c := dict
    "host" "0.0.0.0"
    "port" (int .Values.controlPlane.port)
    "metastore" (include "httpbus.metastore" . | fromYaml)
    "clusters" (include "httpbus.clusters" . | fromYaml)
    "default_cluster" .Values.defaultCluster
    "storage_topic_prefix" .Values.storageTopicPrefix
    "archive" (include "httpbus.archive" . | fromYaml) -}}
{{- toYaml (mergeOverwrite $c (deepCopy .Values.controlPlane.config)) -}}
{{- end -}}

{{/*
The control plane's `archive` setting (core.archive.ArchiveStorage, docs/archive.md): where
topics may archive. The S3 keys are not here: they come from archive.s3CredentialsSecret as
environment overrides (httpbus.archiveEnv).
*/}}
{{- define "httpbus.archive" -}}
{{- with .Values.archive -}}
{{- if and .localRoot (not .localVolume) -}}
{{- fail "archive.localRoot needs archive.localVolume (a volume every control plane replica shares): a folder in the pod is lost with it" -}}
{{- end -}}
s3_endpoint: {{ with .s3Endpoint }}{{ . | quote }}{{ else }}null{{ end }}
s3_region: {{ .s3Region | quote }}
s3_buckets: {{ toJson (.s3Buckets | default list) }}
local_root: {{ with .localRoot }}{{ . | quote }}{{ else }}null{{ end }}
interval_s: {{ .intervalSeconds }}
grace_s: {{ .graceSeconds }}
{{- end -}}
{{- end -}}

{{/* The archive's S3 keys, by reference to the Secret archive.s3CredentialsSecret names. */}}
{{- define "httpbus.archiveEnv" -}}
{{- with .Values.archive.s3CredentialsSecret -}}
{{- if .name }}
- name: HTTPBUS_ARCHIVE__S3_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .accessKeyIdKey }}
- name: HTTPBUS_ARCHIVE__S3_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .name }}
      key: {{ .secretAccessKeyKey }}
{{- end }}
{{- end -}}
{{- end -}}

{{- define "httpbus.config.producer" -}}
{{- $c := dict
    "host" "0.0.0.0"
    "port" (int .Values.producer.port)
    "processes" .Values.producer.processes
    "metastore" (include "httpbus.metastore" . | fromYaml)
    "clusters" (include "httpbus.clusters" . | fromYaml)
    "audit" (include "httpbus.auditTrail" . | fromYaml) -}}
{{- toYaml (mergeOverwrite $c (deepCopy .Values.producer.config)) -}}
{{- end -}}

{{- define "httpbus.config.worker" -}}
{{- $c := dict
    "host" "0.0.0.0"
    "port" (int .Values.worker.port)
    "processes" .Values.worker.processes
    "metastore" (include "httpbus.metastore" . | fromYaml)
    "clusters" (include "httpbus.clusters" . | fromYaml)
    "audit" (include "httpbus.auditTrail" . | fromYaml) -}}
{{- toYaml (mergeOverwrite $c (deepCopy .Values.worker.config)) -}}
{{- end -}}

{{/*
The audit job's settings file, read by `httpbus audit run` as ControlPlaneSettings: the
metastore (subscriptions, cutovers), the clusters with the audit trail, Spark's master and the
Kafka connector jars (in the image, see the Dockerfile); database_url comes from the Secret.
*/}}
{{- define "httpbus.config.auditJob" -}}
{{- $c := dict
    "metastore" (include "httpbus.metastore" . | fromYaml)
    "clusters" (include "httpbus.clusters" . | fromYaml)
    "default_cluster" .Values.defaultCluster
    "storage_topic_prefix" .Values.storageTopicPrefix
    "audit" (include "httpbus.auditTrail" . | fromYaml)
    "spark_master" .Values.audit.spark.master
    "spark_jars" .Values.audit.spark.jars -}}
{{- toYaml (mergeOverwrite $c (deepCopy .Values.audit.config)) -}}
{{- end -}}

{{/*
PYSPARK_SUBMIT_ARGS of a Spark job (split like a shell line by pyspark, which appends them to
its spark-submit command): the driver's address for the executors, then the job's spark.conf.
Called with (dict "conf" <the job's spark.conf> "name" <its values key, for the error>).
*/}}
{{- define "httpbus.spark.submitArgs" -}}
{{- $name := .name -}}
{{- $args := list "--conf" "spark.driver.host=$(POD_IP)" "--conf" "spark.driver.bindAddress=0.0.0.0" -}}
{{- range $k, $v := .conf -}}
{{- $kv := printf "%s=%v" $k $v -}}
{{- if contains "'" $kv -}}
{{- fail (printf "%s.spark.conf %s: a value may not hold a single quote" $name $k) -}}
{{- end -}}
{{- $args = append (append $args "--conf") (squote $kv) -}}
{{- end -}}
{{- append $args "pyspark-shell" | join " " -}}
{{- end -}}

{{- define "httpbus.audit.submitArgs" -}}
{{- include "httpbus.spark.submitArgs" (dict "conf" .Values.audit.spark.conf "name" "audit") -}}
{{- end -}}

{{/* The settings file of the export CronJob: a ControlPlaneSettings (httpbus export). */}}
{{- define "httpbus.config.exportJob" -}}
{{- $c := dict
    "metastore" (include "httpbus.metastore" . | fromYaml)
    "clusters" (include "httpbus.clusters" . | fromYaml)
    "default_cluster" .Values.defaultCluster
    "storage_topic_prefix" .Values.storageTopicPrefix
    "spark_master" .Values.export.spark.master
    "spark_jars" .Values.export.spark.jars -}}
{{- toYaml (mergeOverwrite $c (deepCopy .Values.export.config)) -}}
{{- end -}}

{{/* The settings file of the migration check: a ControlPlaneSettings (httpbus topic
migration check); database_url, where every window is kept, comes from the Secret. */}}
{{- define "httpbus.config.migrationCheck" -}}
{{- $c := dict
    "metastore" (include "httpbus.metastore" . | fromYaml)
    "clusters" (include "httpbus.clusters" . | fromYaml)
    "default_cluster" .Values.defaultCluster
    "storage_topic_prefix" .Values.storageTopicPrefix
    "spark_master" .Values.migrationCheck.spark.master
    "spark_jars" .Values.migrationCheck.spark.jars -}}
{{- toYaml (mergeOverwrite $c (deepCopy .Values.migrationCheck.config)) -}}
{{- end -}}

{{/* The relational store (users and roles, reports, the trace index, migration windows)
for the control plane and the migration check: the Secret's database-url when it has one,
else the settings' default (a SQLite file in the pod: one replica's own, lost with it). */}}
{{- define "httpbus.databaseUrlEnv" -}}
- name: HTTPBUS_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "httpbus.secretName" . }}
      key: database-url
      optional: true
{{- end -}}

{{/* Secret settings every service gets as HTTPBUS_ environment overrides. */}}
{{- define "httpbus.secretEnv" -}}
{{- $secret := include "httpbus.secretName" . -}}
{{- range $name := keys .Values.secret.env | sortAlpha }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ $name }}
{{- end }}
{{- end -}}

{{/* The outbox relay's image (the Dockerfile's outbox target: a JRE and httpbus[outbox]). */}}
{{- define "httpbus.outboxImage" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- printf "%s:%s" .Values.image.repository (default (printf "%s-outbox" $tag) .Values.image.outboxTag) -}}
{{- end -}}

{{/*
One relay's settings file (outbox_relay.settings.RelaySettings): what the relay entry names,
then outbox.config, then the relay's own config on top. The produce token and the database
password are never in it: they come from the Secrets the relay names, as HTTPBUS_PRODUCE_TOKEN
and HTTPBUS_DATABASE__PASSWORD. Called with (dict "root" $ "relay" <an entry of outbox.relays>).
*/}}
{{- define "httpbus.config.outboxRelay" -}}
{{- $root := .root -}}
{{- $r := .relay -}}
{{- $o := $root.Values.outbox -}}
{{- $config := mergeOverwrite (deepCopy ($o.config | default dict)) (deepCopy ($r.config | default dict)) -}}
{{- if hasKey $config "produce_token" -}}
{{- fail (printf "outbox relay %s: no produce_token in config; name its Secret in produceTokenSecret" $r.name) -}}
{{- end -}}
{{- if and (hasKey $config "database") (hasKey (get $config "database") "password") -}}
{{- fail (printf "outbox relay %s: no database password in config; name its Secret in database.passwordSecret" $r.name) -}}
{{- end -}}
{{- $db := dict
    "host" $r.database.host
    "port" (int ($r.database.port | default 5432))
    "user" ($r.database.user | default "postgres")
    "dbname" $r.database.dbname
    "table" ($r.database.table | default "public.outbox")
    "slot" $r.database.slot
    "publication" ($r.database.publication | default $r.database.slot) -}}
{{- $producer := $o.producerUrl | default (printf "http://%s-producer:%d" (include "httpbus.fullname" $root) (int $root.Values.producer.service.port)) -}}
{{- $c := dict
    "name" $r.name
    "producer_url" $producer
    "project" $r.project
    "topic" $r.topic
    "source" ($r.source | default (printf "/%s/%s" $r.project $r.topic))
    "database" $db
    "offsets_file" "/var/lib/httpbus-outbox/offsets.dat"
    "metrics_host" "0.0.0.0"
    "metrics_port" (int $o.metricsPort) -}}
{{- toYaml (mergeOverwrite $c $config) -}}
{{- end -}}
