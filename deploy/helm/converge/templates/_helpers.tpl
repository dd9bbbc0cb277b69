{{/* Names. */}}
{{- define "converge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "converge.fullname" -}}
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

{{- define "converge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "converge.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object; selectorLabels is the stable subset. */}}
{{- define "converge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{ include "converge.selectorLabels" . }}
{{- end -}}

{{- define "converge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "converge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The image reference of the converge server. */}}
{{- define "converge.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Secret names. */}}
{{- define "converge.databaseSecret" -}}
{{- default (printf "%s-database" (include "converge.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}
{{- define "converge.apiTokensSecret" -}}
{{- default (printf "%s-api-tokens" (include "converge.fullname" .)) .Values.apiTokens.existingSecret -}}
{{- end -}}
{{- define "converge.workerAuthSecret" -}}
{{- default (printf "%s-worker-auth" (include "converge.fullname" .)) .Values.workerAuth.existingSecret -}}
{{- end -}}
{{- define "converge.tlsSecret" -}}
{{- default (printf "%s-tls" (include "converge.fullname" .)) .Values.tls.secretName -}}
{{- end -}}
{{- define "converge.workerTLSSecret" -}}
{{- default (printf "%s-worker-tls" (include "converge.fullname" .)) .Values.tls.mtls.workerSecretName -}}
{{- end -}}

{{/* Whether API tokens are configured. */}}
{{- define "converge.apiAuth" -}}
{{- if or .Values.apiTokens.tokens .Values.apiTokens.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* converge.apiIdentities: "true" when API_CLIENT_IDENTITIES is set (tls.mtls.identities.api). */}}
{{- define "converge.apiIdentities" -}}
{{- if .Values.tls.mtls.identities.api -}}true{{- end -}}
{{- end -}}

{{/* converge.apiAuthenticated: "true" when the API needs credentials (tokens or certificate identities). */}}
{{- define "converge.apiAuthenticated" -}}
{{- if or (include "converge.apiAuth" .) (include "converge.apiIdentities" .) -}}true{{- end -}}
{{- end -}}

{{/* Fail fast on contradictory or missing settings (the binary would refuse them at boot). */}}
{{- define "converge.validate" -}}
{{- if and (not .Values.database.url) (not .Values.database.existingSecret) -}}
{{- fail "database: set database.url or database.existingSecret (DATABASE_URL is required)" -}}
{{- end -}}
{{- if and .Values.database.url .Values.database.existingSecret -}}
{{- fail "database: set database.url or database.existingSecret, not both" -}}
{{- end -}}
{{- if and .Values.database.readReplica .Values.database.url (not .Values.database.readUrl) -}}
{{- fail "database.readReplica is true but database.readUrl is empty" -}}
{{- end -}}
{{- $ids := .Values.tls.mtls.identities -}}
{{- if and (or $ids.api $ids.workers $ids.mesh) (not (and .Values.tls.enabled .Values.tls.mtls.enabled)) -}}
{{- fail "tls.mtls.identities: the allow-lists name client-certificate identities, so they need tls.enabled and tls.mtls.enabled" -}}
{{- end -}}
{{- if and (include "converge.apiAuthenticated" .) .Values.apiTokens.open -}}
{{- fail "apiTokens: open=true contradicts tokens/existingSecret/tls.mtls.identities.api (API_AUTH=none and API_TOKENS_FILE or API_CLIENT_IDENTITIES): set one" -}}
{{- end -}}
{{- if and (not (include "converge.apiAuthenticated" .)) (not .Values.apiTokens.open) -}}
{{- fail "apiTokens: set apiTokens.tokens or apiTokens.existingSecret (or tls.mtls.identities.api), or apiTokens.open=true to serve the API without tokens" -}}
{{- end -}}
{{- $plane := or .Values.workerAuth.enabled (and .Values.tls.enabled .Values.tls.mtls.enabled) -}}
{{- if and $plane .Values.workerAuth.open -}}
{{- fail "workerAuth: open=true contradicts workerAuth.enabled / tls.mtls.enabled (WORKER_AUTH=none with credentials): set one" -}}
{{- end -}}
{{- if and (not $plane) (not .Values.workerAuth.open) -}}
{{- fail "workerAuth: enable workerAuth or tls.mtls, or set workerAuth.open=true to run the worker plane without credentials" -}}
{{- end -}}
{{- if and (include "converge.apiAuthenticated" .) .Values.workerAuth.open -}}
{{- fail "workerAuth.open=true beside API tokens: anyone who reaches a broker could forge task results the API's tokens guard; enable workerAuth or tls.mtls" -}}
{{- end -}}
{{- if and .Values.workerAuth.enabled (not .Values.workerAuth.existingSecret) (or (not .Values.workerAuth.token) (not .Values.workerAuth.meshToken)) -}}
{{- fail "workerAuth.enabled: set workerAuth.token and workerAuth.meshToken, or workerAuth.existingSecret" -}}
{{- end -}}
{{- if and .Values.tls.mtls.enabled (not .Values.tls.enabled) -}}
{{- fail "tls.mtls.enabled needs tls.enabled" -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.certManager.enabled) (not .Values.tls.secretName) -}}
{{- fail "tls.enabled: set tls.secretName (tls.crt, tls.key, ca.crt) or tls.certManager.enabled" -}}
{{- end -}}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) -}}
{{- fail "tls.certManager.enabled: set tls.certManager.issuerRef.name" -}}
{{- end -}}
{{- if and .Values.broker.autoscaling.enabled (not .Values.split) -}}
{{- fail "broker.autoscaling.enabled needs split=true: with split=false there are no broker pods (ROLE=all pods are the control Deployment, which has no autoscaler)" -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled (not .Values.networkPolicy.database.cidrs) -}}
{{- fail "networkPolicy.enabled: set networkPolicy.database.cidrs (where Postgres is): the policies allow converge pods no other way to the database" -}}
{{- end -}}
{{- if and .Values.networkPolicy.enabled .Values.database.iamAuth (not .Values.networkPolicy.httpsEgressCidrs) -}}
{{- fail "networkPolicy.enabled with database.iamAuth: set networkPolicy.httpsEgressCidrs (AWS STS, for the IAM token's credentials): the policies allow no other egress on 443" -}}
{{- end -}}
{{- if and .Values.tls.mtls.enabled (not .Values.tls.certManager.enabled) (not .Values.tls.mtls.workerSecretName) .Values.workers -}}
{{- fail "tls.mtls.enabled: set tls.mtls.workerSecretName (the workers' client keypair) or tls.certManager.enabled" -}}
{{- end -}}
{{- if and .Values.split (eq (int .Values.ports.http) (int .Values.ports.health)) -}}
{{- fail (printf "ports.health equals ports.http (%d): broker pods listen on both (LISTEN_ADDR and HEALTH_ADDR), so the second could not bind; set them apart" (int .Values.ports.http)) -}}
{{- end -}}
{{- $b := .Values.broker.autoscaling -}}
{{- if and .Values.split $b.enabled (gt (int $b.minReplicas) (int $b.maxReplicas)) -}}
{{- fail (printf "broker.autoscaling: minReplicas %d exceeds maxReplicas %d (the API server refuses the autoscaler)" (int $b.minReplicas) (int $b.maxReplicas)) -}}
{{- end -}}
{{- $names := dict -}}
{{- range $w := .Values.workers -}}
{{- if hasKey $names $w.name -}}
{{- fail (printf "workers: two entries are named %s (each is a Deployment named after it): name them apart" $w.name) -}}
{{- end -}}
{{- $_ := set $names $w.name true -}}
{{- if dig "autoscaling" "enabled" false $w -}}
{{- $min := int (dig "autoscaling" "minReplicas" 2 $w) -}}
{{- $max := int (dig "autoscaling" "maxReplicas" 20 $w) -}}
{{- if gt $min $max -}}
{{- fail (printf "workers[%s].autoscaling: minReplicas %d exceeds maxReplicas %d (the API server refuses the autoscaler)" $w.name $min $max) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
converge.env: the converge container's environment. Argument: a dict with
root (the chart context) and role (all | control | broker).
*/}}
{{- define "converge.env" -}}
{{- $ := .root -}}
{{- $v := $.Values -}}
{{- $role := .role -}}
{{- $broker := ne $role "control" -}}
{{- $scheme := ternary "https" "http" $v.tls.enabled -}}
- name: ROLE
  value: {{ $role }}
- name: LISTEN_ADDR
  value: {{ printf "%s://0.0.0.0:%d" $scheme (int $v.ports.http) | quote }}
{{- if eq $role "broker" }}
- name: HEALTH_ADDR
  value: {{ printf ":%d" (int $v.ports.health) | quote }}
{{- end }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "converge.databaseSecret" $ }}
      key: DATABASE_URL
{{- if and $v.database.readReplica (ne $role "broker") }}
- name: DATABASE_READ_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "converge.databaseSecret" $ }}
      key: DATABASE_READ_URL
{{- end }}
{{- if $v.database.iamAuth }}
- name: DB_IAM_AUTH
  value: "true"
{{- if $v.database.awsRegion }}
- name: AWS_REGION
  value: {{ $v.database.awsRegion | quote }}
{{- end }}
{{- end }}
{{- if $broker }}
{{- if $v.tls.enabled }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
# Peers dial the pod's address and verify the peers' Service name, which
# the certificate covers: a Deployment's pods have no DNS name of their own.
- name: BROKER_URL
  value: {{ printf "https://$(POD_IP):%d" (int $v.ports.http) | quote }}
- name: BROKER_TLS_SERVER_NAME
  value: {{ printf "%s-peers.$(POD_NAMESPACE).svc" (include "converge.fullname" $) | quote }}
{{- else }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: BROKER_URL
  value: {{ printf "http://$(POD_IP):%d" (int $v.ports.http) | quote }}
{{- end }}
- name: SHUTDOWN_DRAIN
  value: {{ $v.shutdownDrain | quote }}
{{- end }}
- name: LOG_FORMAT
  value: {{ $v.log.format | quote }}
- name: LOG_LEVEL
  value: {{ $v.log.level | quote }}
{{- if $v.tls.enabled }}
- name: TLS_CERT_FILE
  value: /etc/converge/tls/tls.crt
- name: TLS_KEY_FILE
  value: /etc/converge/tls/tls.key
- name: TLS_RELOAD_INTERVAL
  value: {{ $v.tls.reloadInterval | quote }}
{{- if and $v.tls.mtls.enabled (or $broker (include "converge.apiIdentities" $)) }}
- name: TLS_CLIENT_CA_FILE
  value: /etc/converge/tls/ca.crt
{{- end }}
{{- end }}
{{- if ne $role "broker" }}
{{- if include "converge.apiAuth" $ }}
- name: API_TOKENS_FILE
  value: /etc/converge/api-tokens/tokens
{{- else if not (include "converge.apiIdentities" $) }}
- name: API_AUTH
  value: none
{{- end }}
{{- with $v.tls.mtls.identities.api }}
- name: API_CLIENT_IDENTITIES
  value: {{ join "," . | quote }}
{{- end }}
{{- end }}
{{- if and $broker $v.tls.mtls.enabled }}
{{- with $v.tls.mtls.identities.workers }}
- name: WORKER_CLIENT_IDENTITIES
  value: {{ join "," . | quote }}
{{- end }}
{{- with $v.tls.mtls.identities.mesh }}
- name: MESH_CLIENT_IDENTITIES
  value: {{ join "," . | quote }}
{{- end }}
{{- end }}
{{- if $broker }}
{{- if $v.workerAuth.enabled }}
- name: WORKER_TOKENS_FILE
  value: /etc/converge/worker-auth/tokens
- name: MESH_TOKENS_FILE
  value: /etc/converge/worker-auth/mesh
{{- else if not (and $v.tls.enabled $v.tls.mtls.enabled) }}
- name: WORKER_AUTH
  value: none
{{- end }}
{{- end }}
{{- range $name, $value := $v.extraEnv }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* converge.volumeMounts / converge.volumes: same argument as converge.env. */}}
{{- define "converge.volumeMounts" -}}
{{- $v := .root.Values -}}
- name: tmp
  mountPath: /tmp
{{- if $v.tls.enabled }}
- name: tls
  mountPath: /etc/converge/tls
  readOnly: true
{{- end }}
{{- if and (ne .role "broker") (include "converge.apiAuth" .root) }}
- name: api-tokens
  mountPath: /etc/converge/api-tokens
  readOnly: true
{{- end }}
{{- if and (ne .role "control") $v.workerAuth.enabled }}
- name: worker-auth
  mountPath: /etc/converge/worker-auth
  readOnly: true
{{- end }}
{{- with $v.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "converge.volumes" -}}
{{- $ := .root -}}
{{- $v := $.Values -}}
- name: tmp
  emptyDir: {}
{{- if $v.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "converge.tlsSecret" $ }}
{{- end }}
{{- if and (ne .role "broker") (include "converge.apiAuth" $) }}
- name: api-tokens
  secret:
    secretName: {{ include "converge.apiTokensSecret" $ }}
    items:
      - key: {{ $v.apiTokens.key }}
        path: tokens
{{- end }}
{{- if and (ne .role "control") $v.workerAuth.enabled }}
- name: worker-auth
  secret:
    secretName: {{ include "converge.workerAuthSecret" $ }}
    items:
      - key: tokens
        path: tokens
      - key: mesh
        path: mesh
{{- end }}
{{- with $v.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* converge.probe: an HTTP probe on port for path, or TCP when the listener demands client certificates. */}}
{{- define "converge.probe" -}}
{{- if .tcp -}}
tcpSocket:
  port: {{ .port }}
{{- else -}}
httpGet:
  path: {{ .path }}
  port: {{ .port }}
  scheme: {{ ternary "HTTPS" "HTTP" .https }}
{{- end -}}
{{- end -}}

{{/*
converge.pod: the pod template of a converge Deployment. Argument: a dict
with root, role, component and section (the values section: control or broker).
*/}}
{{- define "converge.pod" -}}
{{- $ := .root -}}
{{- $v := $.Values -}}
{{- $s := .section -}}
{{- $broker := ne .role "control" -}}
{{- $probePort := ternary "health" "http" (eq .role "broker") -}}
{{- $https := and $v.tls.enabled (ne .role "broker") -}}
{{- $tcp := and $v.tls.enabled $v.tls.mtls.enabled (or (eq .role "all") (and (eq .role "control") (include "converge.apiIdentities" $))) -}}
metadata:
  labels:
    {{- include "converge.selectorLabels" $ | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
    {{- if $broker }}
    converge.run/broker: "true"
    {{- end }}
  annotations:
    checksum/config: {{ include (print $.Template.BasePath "/secrets.yaml") $ | sha256sum }}
    {{- with $s.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "converge.serviceAccountName" $ }}
  terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $v.podSecurityContext | nindent 4 }}
  containers:
    - name: converge
      image: {{ include "converge.image" $ }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      args: [serve]
      ports:
        - name: {{ ternary "broker" "http" (eq .role "broker") }}
          containerPort: {{ $v.ports.http }}
          protocol: TCP
        {{- if eq .role "broker" }}
        - name: health
          containerPort: {{ $v.ports.health }}
          protocol: TCP
        {{- end }}
      env:
        {{- include "converge.env" (dict "root" $ "role" .role) | nindent 8 }}
      # Migrations run at boot before the listeners open: the startup probe
      # gives them up to 5 minutes before liveness applies.
      startupProbe:
        {{- include "converge.probe" (dict "path" "/livez" "port" $probePort "https" $https "tcp" $tcp) | nindent 8 }}
        periodSeconds: 5
        failureThreshold: 60
      livenessProbe:
        {{- include "converge.probe" (dict "path" "/livez" "port" $probePort "https" $https "tcp" $tcp) | nindent 8 }}
        periodSeconds: 10
        timeoutSeconds: 3
        failureThreshold: 3
      readinessProbe:
        {{- include "converge.probe" (dict "path" "/readyz" "port" $probePort "https" $https "tcp" $tcp) | nindent 8 }}
        periodSeconds: 5
        timeoutSeconds: 3
        failureThreshold: 2
      lifecycle:
        preStop:
          sleep:
            seconds: {{ $v.preStopSleepSeconds }}
      resources:
        {{- toYaml $s.resources | nindent 8 }}
      securityContext:
        {{- toYaml $v.securityContext | nindent 8 }}
      volumeMounts:
        {{- include "converge.volumeMounts" (dict "root" $ "role" .role) | nindent 8 }}
  volumes:
    {{- include "converge.volumes" (dict "root" $ "role" .role) | nindent 4 }}
  {{- with $s.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $s.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $s.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $s.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* NetworkPolicy egress rules shared by the policies. */}}
{{- define "converge.npEgressCommon" -}}
{{- if .Values.networkPolicy.dns }}
# DNS.
- to:
    - namespaceSelector: {}
      podSelector:
        matchLabels:
          k8s-app: kube-dns
  ports:
    - {protocol: UDP, port: 53}
    - {protocol: TCP, port: 53}
{{- end }}
{{- end -}}
{{- define "converge.npServerEgress" -}}
{{- include "converge.npEgressCommon" . }}
# Postgres (primary and replica).
{{- if .Values.networkPolicy.database.cidrs }}
- to:
    {{- range .Values.networkPolicy.database.cidrs }}
    - ipBlock: {cidr: {{ . | quote }}}
    {{- end }}
  ports:
    - {protocol: TCP, port: {{ .Values.networkPolicy.database.port }}}
{{- end }}
# Peer brokers (the mesh relays stages).
- to:
    - podSelector:
        matchLabels:
          {{- include "converge.selectorLabels" . | nindent 10 }}
          converge.run/broker: "true"
  ports:
    - {protocol: TCP, port: {{ .Values.ports.http }}}
{{- if .Values.networkPolicy.httpsEgressCidrs }}
# HTTPS (AWS STS and the RDS token signer's credentials for DB_IAM_AUTH).
- to:
    {{- range .Values.networkPolicy.httpsEgressCidrs }}
    - ipBlock: {cidr: {{ . | quote }}}
    {{- end }}
  ports:
    - {protocol: TCP, port: 443}
{{- end }}
{{- end -}}
