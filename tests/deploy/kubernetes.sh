#!/usr/bin/env bash
# Checks deploy/kubernetes/ and deploy/systemd/ (README: Operations,
# "Kubernetes"); tests/run.sh runs it after the cargo tests and counts it as
# one test.
#
# 1. tests/deploy/manifests_check.py on every manifest: strict validation
#    against the schemas kubernetes-validate bundles (PyPI, pinned, in
#    target/venv-deploy; no network) for Kubernetes 1.33 and 1.37 (below); the PodMonitor
#    (a CRD, no bundled schema) against the script's own schema of its fields
#    and against the Deployment it selects; the NetworkPolicy against the
#    Deployment's pods and ports; the tokenclock container's securityContext
#    and requests;
# 2. the checks can fail: each mutation below breaks one manifest in a copy;
# 3. systemd-analyze verify deploy/systemd/tokenclock.service, where
#    systemd-analyze exists (skipped with a message otherwise), with ExecStart
#    pointed at target/release/tokenclock (verify needs the binary to exist)
#    and any warning counted as a failure (verify exits 0 on most).
# The embedded tokenclock config, and the shutdown order's numbers, are
# checked by tests/it/deploy.rs (cargo test) with the real binary.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Pinned: the oldest and the newest Kubernetes the examples are checked
# against (kubernetes-validate 1.37.0 bundles 1.25 to 1.37). 1.33 stands for
# the older clusters managed offerings still run; the manifests use no field
# newer than it.
k8s=1.33.0
k8s_newest=1.37.0

# shellcheck source=tests/deploy/venv.sh
. tests/deploy/venv.sh
py="$deploy_venv/bin/python"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tokenclock-kubernetes.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

for version in "$k8s" "$k8s_newest"; do
  log "manifests_check.py $version deploy/kubernetes/*.yaml"
  "$py" tests/deploy/manifests_check.py "$version" deploy/kubernetes/*.yaml
done

# Each mutation: a name, the file, a sed expression applied to a copy, and
# what manifests_check.py must say of it (so that it is caught for its own
# reason, not another).
mutations=(
  "misspelled field (strict schema)|vllm-sidecar.yaml|s/readOnlyRootFilesystem: true/readOnlyRootFilesytem: true/|readOnlyRootFilesytem"
  "runAsUser a string|vllm-sidecar.yaml|s/runAsUser: 65532/runAsUser: \"65532\"/|'65532' is not of type"
  "root filesystem writable|vllm-sidecar.yaml|s/readOnlyRootFilesystem: true/readOnlyRootFilesystem: false/|readOnlyRootFilesystem is False"
  "privilege escalation allowed|vllm-sidecar.yaml|/allowPrivilegeEscalation: false/d|allowPrivilegeEscalation is None"
  "capabilities kept|vllm-sidecar.yaml|/capabilities: { drop: \[\"ALL\"\] }/d|capabilities is None"
  "no seccomp profile|vllm-sidecar.yaml|/seccompProfile: { type: RuntimeDefault }/d|seccompProfile is None"
  "no CPU request|vllm-sidecar.yaml|s/requests: { cpu: 200m, memory: 64Mi }/requests: { memory: 64Mi }/|no cpu request"
  "preStop not a handler|vllm-sidecar.yaml|s/exec: { command: \[\"sleep\", \"55\"\] }/sleep: \"55\"/|'55' is not of type"
  "PodMonitor without port|podmonitor.yaml|/- port: metrics/{s/- port: metrics/- path: \/metrics/;n;d}|'port' is a required property"
  "PodMonitor port unknown|podmonitor.yaml|s/- port: metrics/- port: prometheus/|port 'prometheus' is not a named port"
  "PodMonitor selects nothing|podmonitor.yaml|s/matchLabels: { app: vllm }/matchLabels: { app: sglang }/|selects no Deployment's pods"
  "PodMonitor bad interval|podmonitor.yaml|s/interval: 15s/interval: 15/|15 is not of type 'string'"
  "PodMonitor misspelled field|podmonitor.yaml|s/podMetricsEndpoints:/podMetricEndpoints:/|'podMetricsEndpoints' is a required property"
  "NetworkPolicy selects nothing|networkpolicy.yaml|s/matchLabels: { app: vllm }/matchLabels: { app: sglang }/|selects no Deployment's pods"
  "NetworkPolicy port unknown|networkpolicy.yaml|s/{ port: metrics, protocol: TCP }/{ port: prometheus, protocol: TCP }/|port 'prometheus' is not a named port of the pods"
  "NetworkPolicy metrics open to all|networkpolicy.yaml|/- { port: http, protocol: TCP }/a\\        - { port: metrics, protocol: TCP }|the metrics port is open to every peer"
  "NetworkPolicy clients shut out|networkpolicy.yaml|/# Clients, from anywhere./,/- { port: http, protocol: TCP }/d|clients cannot reach the http port"
  "NetworkPolicy misspelled field|networkpolicy.yaml|s/policyTypes:/policyType:/|'policyType' was unexpected"
  "NetworkPolicy metrics to any address|networkpolicy.yaml|/- from:/a\\        - ipBlock: { cidr: 0.0.0.0/0 }|the metrics port is open to every peer"
)
for m in "${mutations[@]}"; do
  IFS='|' read -r name file expr expected <<<"$m"
  rm -rf "$tmp/k" && mkdir "$tmp/k" && cp deploy/kubernetes/*.yaml "$tmp/k/"
  sed -i "$expr" "$tmp/k/$file"
  cmp -s "deploy/kubernetes/$file" "$tmp/k/$file" && fail "mutation '$name' changed nothing"
  if "$py" tests/deploy/manifests_check.py "$k8s" "$tmp"/k/*.yaml >"$tmp/out" 2>&1; then
    fail "mutation '$name': manifests_check.py passed"
  fi
  grep -qF -- "$expected" "$tmp/out" || fail "mutation '$name' failed, but not with \"$expected\": $(grep -v ' valid against ' "$tmp/out" | head -3)"
  log "mutation '$name' caught: $(grep -v ' valid against ' "$tmp/out" | head -1 | sed "s|^$tmp/k/||")"
done

unit=deploy/systemd/tokenclock.service
if type -P systemd-analyze >/dev/null; then
  target_dir=${CARGO_TARGET_DIR:-target}
  [[ $target_dir == /* ]] || target_dir=$(pwd)/$target_dir
  bin=$target_dir/release/tokenclock
  [ -x "$bin" ] || fail "$bin is missing: systemd-analyze verify needs ExecStart's binary (cargo build --release)"
  for variant in as-written "misspelled key"; do
    mkdir -p "$tmp/systemd" && sed "s|/usr/local/bin/tokenclock|$bin|g" "$unit" > "$tmp/systemd/tokenclock.service"
    [ "$variant" = as-written ] || sed -i 's/^ProtectHome=/ProtecHome=/' "$tmp/systemd/tokenclock.service"
    set +e
    out=$(systemd-analyze verify "$tmp/systemd/tokenclock.service" 2>&1)
    rc=$?
    set -e
    if [ "$variant" = as-written ]; then
      log "systemd-analyze verify $unit (ExecStart at $bin)"
      [ "$rc" -eq 0 ] && [ -z "$out" ] || fail "systemd-analyze verify $unit: exit $rc: $out"
    else
      [ "$rc" -ne 0 ] || [ -n "$out" ] || fail "systemd-analyze verify accepted a misspelled key"
      log "mutation '$variant' caught: ${out##*/}"
    fi
  done
else
  log "SKIPPED systemd-analyze verify $unit: systemd-analyze is not installed (Debian: systemd)"
fi
log "ok"
