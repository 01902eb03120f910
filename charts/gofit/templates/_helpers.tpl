{{/* Labels on every object: what deploy/ sets, plus Helm's own. */}}
{{- define "gofit.labels" -}}
app.kubernetes.io/part-of: gofit
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gofit.webhookLabels" -}}
app.kubernetes.io/name: gofit-webhook
{{ include "gofit.labels" . }}
{{- end -}}

{{/* The image: repository@digest, else repository:tag (appVersion by default). */}}
{{- define "gofit.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "gofit.env" -}}
{{- range $k, $v := . }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/*
The QoS ConfigMap the agent reads: node.qosConfig.name; with create: true
and no name, koordinator's slo-controller-config; "" reads none (the
built-in defaults, --no-configmap). An upgrade from a chart whose default
read gofit's slo-controller-config, where that ConfigMap exists, fails
rather than drop the protection it gives (a lookup: helm template and
--dry-run cannot see it).
*/}}
{{- define "gofit.qosConfigName" -}}
{{- $name := .Values.node.qosConfig.name | default (ternary "slo-controller-config" "" (.Values.node.qosConfig.create | default false)) -}}
{{- if and (not $name) .Release.IsUpgrade (lookup "v1" "ConfigMap" (include "gofit.qosNamespace" .) "slo-controller-config") -}}
{{- fail (printf "node.qosConfig.name: the chart now reads no QoS ConfigMap by default, and %s/slo-controller-config exists, which the previous chart's default read: set node.qosConfig.name=slo-controller-config to keep its protection, or delete it to run on the built-in defaults" (include "gofit.qosNamespace" .)) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{- define "gofit.qosNamespace" -}}
{{ .Values.node.qosConfig.namespace | default (include "gofit.nodeNamespace" .) }}
{{- end -}}

{{/* Where the monitoring objects go: monitoring.namespace, else the webhook's, else the agent's. */}}
{{- define "gofit.monitoringNamespace" -}}
{{- if .Values.monitoring.namespace -}}
{{ .Values.monitoring.namespace }}
{{- else if .Values.webhook.enabled -}}
{{ include "gofit.webhookNamespace" . }}
{{- else -}}
{{ include "gofit.nodeNamespace" . }}
{{- end -}}
{{- end -}}

{{/*
gofit.checkQoSConfig fails the render when the QoS ConfigMap the chart
creates would not parse or check in the agent (kube/memqos ParseConfig and
ParseNamespaces): an agent that restarts on such a ConfigMap writes
nothing, so the chart refuses it first. Errors name the value and the field.
*/}}
{{- define "gofit.checkQoSConfig" -}}
{{- $where := "node.qosConfig.resourceQOSConfig" }}
{{- $raw := .resourceQOSConfig | default "" | trim }}
{{- if $raw }}
{{- $c := fromJson $raw }}
{{- if or (not (hasPrefix "{" $raw)) (hasKey $c "Error") }}
{{- fail (printf "%s: resource-qos-config is not a JSON object: %v" $where (get $c "Error")) }}
{{- end }}
{{- $strategies := list }}
{{- with $c.clusterStrategy }}
{{- $strategies = append $strategies (list "clusterStrategy" .) }}
{{- end }}
{{- if and (hasKey $c "nodeStrategies") (not (kindIs "slice" $c.nodeStrategies)) }}
{{- fail (printf "%s: nodeStrategies: not a list" $where) }}
{{- end }}
{{- range $i, $ns := $c.nodeStrategies | default list }}
{{- if not (kindIs "map" $ns) }}
{{- fail (printf "%s: nodeStrategies[%d]: not an object" $where $i) }}
{{- end }}
{{- if not (kindIs "map" $ns.nodeSelector) }}
{{- fail (printf "%s: nodeStrategies[%d].nodeSelector: missing" $where $i) }}
{{- end }}
{{- $strategies = append $strategies (list (printf "nodeStrategies[%d]" $i) $ns) }}
{{- end }}
{{- range $strategies }}
{{- $at := index . 0 }}
{{- $s := index . 1 }}
{{- if not (kindIs "map" $s) }}
{{- fail (printf "%s: %s: not an object" $where $at) }}
{{- end }}
{{- range $class := list "lsrClass" "lsClass" "beClass" }}
{{- with get $s $class }}
{{- $m := get . "memoryQOS" }}
{{- if $m }}
{{- $f := printf "%s: %s.%s.memoryQOS" $where $at $class }}
{{- if not (kindIs "map" $m) }}
{{- fail (printf "%s: not an object" $f) }}
{{- end }}
{{- if and (hasKey $m "enable") (not (kindIs "bool" $m.enable)) }}
{{- fail (printf "%s.enable: %v is not true or false" $f $m.enable) }}
{{- end }}
{{- range $k, $r := dict "minLimitPercent" (list 0 100) "lowLimitPercent" (list 0 100) "throttlingPercent" (list 0 100) "wmarkRatio" (list 0 100) "wmarkScalePermill" (list 1 1000) "wmarkMinAdj" (list -25 50) "priority" (list 0 12) "priorityEnable" (list 0 1) "oomKillGroup" (list 0 1) }}
{{- if hasKey $m $k }}
{{- $v := get $m $k }}
{{- if not (kindIs "float64" $v) }}
{{- fail (printf "%s.%s: %v is not a number" $f $k $v) }}
{{- end }}
{{- if ne (floor $v) $v }}
{{- fail (printf "%s.%s: %v is not a whole number" $f $k $v) }}
{{- end }}
{{- if or (lt $v (float64 (index $r 0))) (gt $v (float64 (index $r 1))) }}
{{- fail (printf "%s.%s: %v is outside %v..%v" $f $k $v (index $r 0) (index $r 1)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $where = "node.qosConfig.memoryQOS" }}
{{- $raw = .memoryQOS | default "" | trim }}
{{- if $raw }}
{{- $n := fromJson $raw }}
{{- if or (not (hasPrefix "{" $raw)) (hasKey $n "Error") }}
{{- fail (printf "%s: memory-qos is not a JSON object: %v" $where (get $n "Error")) }}
{{- end }}
{{- range $list := list "enabledNamespaces" "disabledNamespaces" }}
{{- if hasKey $n $list }}
{{- $l := get $n $list }}
{{- if not (kindIs "slice" $l) }}
{{- fail (printf "%s: %s: not a list of namespace names" $where $list) }}
{{- end }}
{{- range $i, $ns := $l }}
{{- if or (not (kindIs "string" $ns)) (gt (len (toString $ns)) 63) (not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString $ns))) }}
{{- fail (printf "%s: %s[%d]: %q is not a namespace name" $where $list $i (toString $ns)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The namespaces: the component's value; else, on an upgrade, where
this release already runs the component (until commit 787a781 the chart
put the webhook in gofit-system and the agent in gofit-node by default:
moving the agent's DaemonSet deletes it, which its agents take for an
uninstall, resetting every pod's memory.min); else the release's. */}}
{{- define "gofit.webhookNamespace" -}}
{{- if .Values.webhook.namespace -}}
{{ .Values.webhook.namespace }}
{{- else -}}
{{ include "gofit.placed" (list . "apps/v1" "Deployment" (printf "%s-webhook" (include "gofit.fullname" .)) "gofit-system") | default .Release.Namespace }}
{{- end -}}
{{- end -}}

{{- define "gofit.nodeNamespace" -}}
{{- if .Values.node.namespace -}}
{{ .Values.node.namespace }}
{{- else -}}
{{ include "gofit.placed" (list . "apps/v1" "DaemonSet" (printf "%s-node" (include "gofit.fullname" .)) "gofit-node") | default .Release.Namespace }}
{{- end -}}
{{- end -}}

{{/* gofit.placed (list $ apiVersion kind name namespace): namespace, when
this release owns the object of that kind and name there (Helm's release
annotations), else "" (also under helm template, which looks nothing up).
One get by name: no list of the cluster's objects, as every template that
names a namespace asks again. */}}
{{- define "gofit.placed" -}}
{{- $root := index . 0 -}}
{{- $ns := index . 4 -}}
{{- $obj := lookup (index . 1) (index . 2) $ns (index . 3) -}}
{{- if $obj -}}
{{- $a := $obj.metadata.annotations | default dict -}}
{{- if and (eq (get $a "meta.helm.sh/release-name") $root.Release.Name) (eq (get $a "meta.helm.sh/release-namespace") $root.Release.Namespace) -}}
{{ $ns }}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* gofit.ownedNamespace (list $ name): "true" when namespace name is a
chart object of this release (an earlier chart made its namespaces), so
an upgrade keeps rendering it rather than have Helm delete it, and all in
it. */}}
{{- define "gofit.ownedNamespace" -}}
{{- $root := index . 0 -}}
{{- $ns := lookup "v1" "Namespace" "" (index . 1) -}}
{{- if $ns -}}
{{- $a := $ns.metadata.annotations | default dict -}}
{{- if and (eq (get $a "meta.helm.sh/release-name") $root.Release.Name) (eq (get $a "meta.helm.sh/release-namespace") $root.Release.Namespace) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
gofit.fullname is what every object's name starts with: fullnameOverride,
else nameOverride, else "gofit" (gofit-webhook, gofit-node, ...). Unlike
most charts the release's name is not in it: one gofit runs per cluster,
and its cluster-wide objects keep the names deploy/ gives them. The
components' app.kubernetes.io/name labels (gofit-webhook, gofit-node,
gofit-experiment-guard) do not change with it: selectors cannot change on
an upgrade, and the monitoring selects by them.
*/}}
{{- define "gofit.fullname" -}}
{{- $v := .Values.fullnameOverride | default .Values.nameOverride | default "gofit" -}}
{{- $field := ternary "fullnameOverride" "nameOverride" (not (empty .Values.fullnameOverride)) -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $v) -}}
{{- fail (printf "%s: %q is not a DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit)" $field $v) -}}
{{- end -}}
{{- if gt (len $v) 38 -}}
{{- fail (printf "%s: %q is %d characters; at most 38, so that the longest name made from it (%s-experiment-guard-leader) stays a 63-character label" $field $v (len $v) $v) -}}
{{- end -}}
{{- $v -}}
{{- end -}}

{{/* The ServiceAccounts: serviceAccount.name, else <fullname>-webhook / <fullname>-node. */}}
{{- define "gofit.webhookServiceAccount" -}}
{{ .Values.webhook.serviceAccount.name | default (printf "%s-webhook" (include "gofit.fullname" .)) }}
{{- end -}}

{{- define "gofit.nodeServiceAccount" -}}
{{ .Values.node.serviceAccount.name | default (printf "%s-node" (include "gofit.fullname" .)) }}
{{- end -}}

{{/* The webhook's priorityClassName: the chart's own PriorityClass follows
the names (<fullname>-webhook) while the value is its default. */}}
{{- define "gofit.webhookPriorityClassName" -}}
{{- $n := .Values.webhook.priorityClassName -}}
{{- if and .Values.webhook.priorityClass.create (eq $n "gofit-webhook") -}}
{{- $n = printf "%s-webhook" (include "gofit.fullname" .) -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{/*
gofit.pdbSpec (list PDB-VALUES REPLICAS "webhook.pdb" "webhook.replicas"): a
PodDisruptionBudget's minAvailable or maxUnavailable (maxUnavailable, when
set, replaces minAvailable, as a budget takes one), refusing a budget that
allows no eviction: every node drain would wait on it forever.
*/}}
{{- define "gofit.pdbSpec" -}}
{{- $p := index . 0 -}}
{{- $replicas := int (index . 1) -}}
{{- $at := index . 2 -}}
{{- $replicasAt := index . 3 -}}
{{- if not (kindIs "invalid" $p.maxUnavailable) -}}
{{- if and (not (kindIs "string" $p.maxUnavailable)) (le (int $p.maxUnavailable) 0) -}}
{{- fail (printf "%s.maxUnavailable (%v) must be above 0: such a PodDisruptionBudget allows no eviction, and every node drain waits on it forever" $at $p.maxUnavailable) -}}
{{- end -}}
maxUnavailable: {{ $p.maxUnavailable }}
{{- else -}}
{{- $min := $p.minAvailable -}}
{{- if kindIs "invalid" $min }}{{ $min = 1 }}{{ end -}}
{{- if and (not (kindIs "string" $min)) (ge (int $min) $replicas) -}}
{{- fail (printf "%s.minAvailable (%d) must be below %s (%d): such a PodDisruptionBudget allows no eviction, and every node drain waits on it forever. Raise %s, lower %s.minAvailable, set %s.maxUnavailable, or set %s.enabled=false" $at (int $min) $replicasAt $replicas $replicasAt $at $at $at) -}}
{{- end -}}
minAvailable: {{ $min }}
{{- end -}}
{{- end -}}

{{/*
A Prometheus reader's settings (experimentGuard.prometheus,
rightsize.prometheus): the checks at render, the flags, and the Secrets'
mounts. Each takes (list PROMETHEUS-VALUES "field.prefix").
*/}}
{{- define "gofit.prometheusCheck" -}}
{{- $p := index . 0 }}{{ $f := index . 1 }}
{{- $ca := merge (deepCopy ($p.caSecret | default dict)) (dict "key" "ca.crt") }}
{{- $token := merge (deepCopy ($p.bearerTokenSecret | default dict)) (dict "key" "token") }}
{{- if and $ca.name $p.caFile }}
{{- fail (printf "set one of %s.caFile and %s.caSecret: both name the CA for --ca-file" $f $f) }}
{{- end }}
{{- if and $token.name $p.bearerTokenFile }}
{{- fail (printf "set one of %s.bearerTokenFile and %s.bearerTokenSecret: both name the token for --bearer-token-file" $f $f) }}
{{- end }}
{{- $credential := or $token.name $p.bearerTokenFile }}
{{- range $k, $v := $p.headers }}{{ if eq (lower $k) "authorization" }}{{ $credential = true }}{{ end }}{{ end }}
{{- if and $credential (hasPrefix "http://" (lower $p.url)) (not $p.insecureHTTP) }}
{{- fail (printf "%s.url is http:// and a bearer token (or an Authorization header) is set: it would go in the clear; use https://, or set %s.insecureHTTP" $f $f) }}
{{- end }}
{{- end }}

{{- define "gofit.prometheusArgs" -}}
{{- $p := index . 0 }}
{{- $ca := merge (deepCopy ($p.caSecret | default dict)) (dict "key" "ca.crt") }}
{{- $token := merge (deepCopy ($p.bearerTokenSecret | default dict)) (dict "key" "token") }}
- {{ printf "--prometheus=%s" $p.url | quote }}
{{- if $p.insecureHTTP }}
- --prometheus-insecure-http
{{- end }}
{{- with $p.bearerTokenFile }}
- {{ printf "--bearer-token-file=%s" . | quote }}
{{- end }}
{{- if $token.name }}
- --bearer-token-file=/etc/gofit/prometheus-token/{{ $token.key }}
{{- end }}
{{- with $p.caFile }}
- {{ printf "--ca-file=%s" . | quote }}
{{- end }}
{{- if $ca.name }}
- --ca-file=/etc/gofit/prometheus-ca/{{ $ca.key }}
{{- end }}
{{- range $k, $v := $p.headers }}
- {{ printf "--header=%s=%s" $k $v | quote }}
{{- end }}
{{- range $p.match }}
- {{ printf "--match=%s" . | quote }}
{{- end }}
{{- end }}

{{- define "gofit.prometheusMounts" -}}
{{- $p := index . 0 }}
{{- if or ($p.caSecret | default dict).name ($p.bearerTokenSecret | default dict).name }}
volumeMounts:
  {{- if ($p.caSecret | default dict).name }}
  - name: prometheus-ca
    mountPath: /etc/gofit/prometheus-ca
    readOnly: true
  {{- end }}
  {{- if ($p.bearerTokenSecret | default dict).name }}
  - name: prometheus-token
    mountPath: /etc/gofit/prometheus-token
    readOnly: true
  {{- end }}
{{- end }}
{{- end }}

{{- define "gofit.prometheusVolumes" -}}
{{- $p := index . 0 }}
{{- $ca := merge (deepCopy ($p.caSecret | default dict)) (dict "key" "ca.crt") }}
{{- $token := merge (deepCopy ($p.bearerTokenSecret | default dict)) (dict "key" "token") }}
{{- if or $ca.name $token.name }}
{{- /* Each Secret's key alone: the pod waits for a missing one. */}}
volumes:
  {{- if $ca.name }}
  - name: prometheus-ca
    secret:
      secretName: {{ $ca.name }}
      items:
        - {key: {{ $ca.key | quote }}, path: {{ $ca.key | quote }}}
  {{- end }}
  {{- if $token.name }}
  - name: prometheus-token
    secret:
      secretName: {{ $token.name }}
      items:
        - {key: {{ $token.key | quote }}, path: {{ $token.key | quote }}}
  {{- end }}
{{- end }}
{{- end }}
