{{/*
Names and labels of the chart's objects.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "streamingjob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects: fullnameOverride, else <release>-<chart> (or just the
release name when it already contains the chart name). */}}
{{- define "streamingjob-operator.fullname" -}}
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

{{- define "streamingjob-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "streamingjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "streamingjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "streamingjob-operator.labels" -}}
helm.sh/chart: {{ include "streamingjob-operator.chart" . }}
{{ include "streamingjob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ include "streamingjob-operator.imageTag" . | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: streamingjob
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "streamingjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "streamingjob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image tag: image.tag, else the chart's appVersion; `latest` is refused. */}}
{{- define "streamingjob-operator.imageTag" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag | toString }}
{{- if eq $tag "latest" }}
{{- fail "image.tag: use an explicit version, not latest" }}
{{- end }}
{{- $tag }}
{{- end }}

{{/* A value as an environment variable: whole numbers without an exponent (YAML numbers
arrive as float64, and 1000000 would print as 1e+06, which an int setting rejects). */}}
{{- define "streamingjob-operator.envValue" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) }}
{{- int64 . }}
{{- else }}
{{- toString . }}
{{- end }}
{{- end }}

{{/*
The timing rules of operator/streamingjob_operator/rules/timing.py, asked of the values: helm fails
with the words the operator would refuse them with at start-up (JSON schema cannot compare
two values).
*/}}
{{- define "streamingjob-operator.timing" -}}
{{- $c := .Values.config }}
{{- $grace := float64 $c.nodeLostGraceSeconds }}
{{- $renew := float64 $c.kubeletLeaseRenewSeconds }}
{{- if lt $grace (mulf 3.5 $renew) }}
{{- fail (printf "config.nodeLostGraceSeconds=%v is shorter than 3.5 * config.kubeletLeaseRenewSeconds=%v: a pod may be declared lost only after its node has been silent (semantics rule 10), two renewals beyond a silence of the control plane itself" $c.nodeLostGraceSeconds $c.kubeletLeaseRenewSeconds) }}
{{- end }}
{{- $le := .Values.leaderElection }}
{{- $lease := float64 $le.leaseDurationSeconds }}
{{- $deadline := float64 $le.renewDeadlineSeconds }}
{{- $retry := float64 $le.retryPeriodSeconds }}
{{- $timeout := minf (float64 $c.apiTimeoutSeconds) (divf $deadline 2) }}
{{- $names := printf "leaderElection.leaseDurationSeconds=%v, leaderElection.renewDeadlineSeconds=%v, leaderElection.retryPeriodSeconds=%v, config.apiTimeoutSeconds=%v" $le.leaseDurationSeconds $le.renewDeadlineSeconds $le.retryPeriodSeconds $c.apiTimeoutSeconds }}
{{- if le $deadline $retry }}
{{- fail (printf "leader election needs renewDeadlineSeconds > retryPeriodSeconds (%s)" $names) }}
{{- end }}
{{- if lt $lease (addf $deadline $timeout) }}
{{- fail (printf "leader election needs leaseDurationSeconds >= renewDeadlineSeconds + the Lease client's request timeout min(apiTimeoutSeconds, renewDeadlineSeconds / 2) (%s): a leader's last write may land up to one request timeout after its deadline" $names) }}
{{- end }}
{{- end }}

{{/* The watched namespaces, rendered (entries may be templates), as a list. Empty: all. */}}
{{- define "streamingjob-operator.watchNamespaces" -}}
{{- $out := list }}
{{- range .Values.watchNamespaces }}
{{- $out = append $out (tpl . $) }}
{{- end }}
{{- $out | uniq | toJson }}
{{- end }}

{{/*
The operator's RBAC rules, the same for the ClusterRole (all namespaces) and for each Role
(watchNamespaces). Two parts:
1. the operator's own API calls (operator/streamingjob_operator/io/k8s.py and kopf);
2. what it grants to each job's driver Role (builders.build_role): Kubernetes refuses to create
   a Role or RoleBinding granting permissions the creator does not hold (RBAC escalation
   prevention), and holding them is narrower than the `escalate`/`bind` verbs.
tests/unit/test_chart.py asserts the union is exactly the expected set.
*/}}
{{- define "streamingjob-operator.rules" -}}
# 1. The operator's own calls.
# StreamingJobs: kopf lists/watches them and patches finalizers + annotations; the reconcile
# reads one job and PUTs its status; `finalizers` update lets children carry an owner reference
# with blockOwnerDeletion where OwnerReferencesPermissionEnforcement is enabled.
- apiGroups: ["sparkkafka.dev"]
  resources: ["streamingjobs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["sparkkafka.dev"]
  resources: ["streamingjobs/status", "streamingjobs/finalizers"]
  verbs: ["update"]
# Driver pods: kopf watches them, the reconcile lists, creates and deletes them.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "watch", "create", "delete"]
# The children, by server-side apply (a PATCH; the API server asks for `create` too when it
# creates): job/report ConfigMaps (the report is read), the driver Services, ServiceAccount,
# Role and RoleBinding.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["services", "serviceaccounts"]
  verbs: ["create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["create", "patch", "delete"]
# Events on jobs; the checkpoint cleanup Job.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["create"]
# Each job's PodDisruptionBudget (its executors wait for the driver in a drain).
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["create", "patch", "delete"]
# 2. Granted to drivers for their executors (the driver Role, builders.build_role), beyond
# the above: reading a pod (by name: Spark reads its own driver pod and its executors),
# patching executor pods (by name, Spark marks them), its own report ConfigMap read and
# patched and its go ConfigMap read (by name).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["create", "get", "list", "watch", "delete", "patch"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "patch"]
{{- end }}

{{/* Reading the Secrets jobs name (Kafka and object-store credentials: checked, never
stored; the lag reader's SASL and CA). Granted only where jobs run: the watched namespaces,
or rbac.secretNamespaces when all are watched; cluster-wide only with rbac.clusterWideSecrets
(it would read every Secret of the cluster). */}}
{{- define "streamingjob-operator.secretRules" -}}
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
{{- end }}

{{/* The Lease the replicas compete for: one per release. */}}
{{- define "streamingjob-operator.leaseName" -}}
{{- include "streamingjob-operator.fullname" . }}
{{- end }}
