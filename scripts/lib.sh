#!/usr/bin/env bash
# Shared helpers for scripts/up.sh and scripts/down.sh. Sourced, never run on its own.
# Every pinned version and fixed name comes from scripts/versions.env.
# shellcheck shell=bash
# shellcheck disable=SC2034 # the paths and names below are used by up.sh and down.sh

AB_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# versions.env is plain KEY=VALUE data, not a script to lint.
# shellcheck disable=SC1091
source "${AB_ROOT}/scripts/versions.env"

BUILD_DIR="${AB_ROOT}/build"
SUBSTRATE_SRC="${BUILD_DIR}/substrate"
BIN_DIR="${BUILD_DIR}/bin"
PROBE_REF_FILE="${BUILD_DIR}/probe-image.ref"
# Written by step substrate-idp when Envoy Gateway cannot use Substrate's IdP (the reason, one line); step
# pulumi-stack then switches the stack to substrate.trust.mode localJwks and records the mode it replaced.
IDP_FALLBACK_FILE="${BUILD_DIR}/idp-trust-fallback"
IDP_SWITCH_FILE="${BUILD_DIR}/idp-trust-switched"
STATE_DIR="${AB_ROOT}/.state"
PULUMI_BACKEND="file://${STATE_DIR}"
INSTALL_MARKER=agent-budgets-substrate

# The project's own Python (make up builds ./venv first): it reads the stack file as the program does.
AB_PYTHON="${AB_PYTHON:-${AB_ROOT}/venv/bin/python}"

# kubectl finds the `ate` plugin as an executable named kubectl-ate on PATH; the Pulumi program's
# egress-policy provider runs `kubectl ate`, so the binary built from the pinned checkout goes first.
export PATH="${BIN_DIR}:${PATH}"
# The dev stack's passphrase (dev only; a real stack uses its own secret or a cloud KMS).
if [[ -z "${PULUMI_CONFIG_PASSPHRASE:-}" && -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]]; then
  export PULUMI_CONFIG_PASSPHRASE="${PULUMI_DEV_PASSPHRASE}"
fi
# Every pulumi command of these scripts uses the project's own file backend, whatever the
# current `pulumi login` says.
export PULUMI_BACKEND_URL="${PULUMI_BACKEND}"
export PULUMI_SKIP_UPDATE_CHECK=true

if [[ -t 1 ]]; then
  C_STEP=$'\033[1;36m' C_WARN=$'\033[1;33m' C_ERR=$'\033[1;31m' C_OFF=$'\033[0m'
else
  C_STEP='' C_WARN='' C_ERR='' C_OFF=''
fi

step() { printf '%s==> %s%s\n' "${C_STEP}" "$*" "${C_OFF}"; }
info() { printf '    %s\n' "$*"; }
warn() { printf '%swarning:%s %s\n' "${C_WARN}" "${C_OFF}" "$*" >&2; }
die() {
  printf '%serror:%s %s\n' "${C_ERR}" "${C_OFF}" "$*" >&2
  exit 1
}

# IDENTITY picks the dev environment, as `make up IDENTITY=kubernetes` does: substrate (the default: Substrate,
# its actors and the stack dev) or kubernetes (no Substrate: agents are plain pods with a service-account token or
# an API key, in a kind cluster and a stack of their own, so both environments can exist side by side).
IDENTITY="${IDENTITY:-substrate}"
case "${IDENTITY}" in
  substrate)
    KIND_CONFIG="${AB_ROOT}/scripts/kind-config.yaml"
    ;;
  kubernetes)
    KIND_CLUSTER="${KUBERNETES_KIND_CLUSTER}"
    KUBE_CONTEXT="${KUBERNETES_KUBE_CONTEXT}"
    PULUMI_STACK="${KUBERNETES_PULUMI_STACK}"
    KIND_MIN_VERSION="${KUBERNETES_KIND_MIN_VERSION}"
    KIND_CONFIG="${AB_ROOT}/scripts/kind-config-kubernetes.yaml"
    ;;
  *) die "IDENTITY=${IDENTITY}: use substrate (the default) or kubernetes" ;;
esac
# How to run one step again in this environment (printed in hints).
if [[ "${IDENTITY}" == kubernetes ]]; then
  UP="IDENTITY=kubernetes bash scripts/up.sh"
else
  UP="bash scripts/up.sh"
fi

have() { command -v "$1" >/dev/null 2>&1; }

# missing_tool NAME HINT: prints one line for a missing tool and returns 1, or returns 0.
missing_tool() {
  if have "$1"; then
    return 0
  fi
  printf '%smissing:%s %s (%s)\n' "${C_ERR}" "${C_OFF}" "$1" "$2" >&2
  return 1
}

# version_ge A B: true when version A >= version B (dotted numbers, an optional leading v).
version_ge() {
  local a="${1#v}" b="${2#v}"
  [[ "$(printf '%s\n%s\n' "${b}" "${a}" | sort -V | head -n1)" == "${b}" ]]
}

kctl() { kubectl --context "${KUBE_CONTEXT}" "$@"; }

# kubectl-ate built from the pinned checkout, always against the dev cluster.
kate() { "${BIN_DIR}/kubectl-ate" --context "${KUBE_CONTEXT}" "$@"; }

kind_cluster_exists() { kind get clusters 2>/dev/null | grep -qx "${KIND_CLUSTER}"; }

# The demo actors, and the one without an egress policy (e2e check 4). DEMO_ACTORS is a
# space-separated list of DNS labels.
# shellcheck disable=SC2206
DEMO_ACTOR_LIST=(${DEMO_ACTORS})
ALL_DEMO_ACTORS=("${DEMO_ACTOR_LIST[@]}" "${NOEGRESS_ACTOR}")
# The Substrate-free environment's agents: the listed service accounts, then the unlisted one (e2e check 17).
# shellcheck disable=SC2206
SERVICE_ACCOUNT_AGENT_LIST=(${SERVICE_ACCOUNT_AGENTS})

# poll_until SECONDS COMMAND...: polls COMMAND every 2 s until it succeeds (status 0) or SECONDS have passed
# (status 1). WAITED holds the last line COMMAND printed (stderr is dropped), for the caller to report.
poll_until() {
  local timeout="$1"
  shift
  local deadline=$((SECONDS + timeout))
  WAITED=""
  until WAITED="$("$@" 2>/dev/null | tail -n1; exit "${PIPESTATUS[0]}")"; do
    ((SECONDS < deadline)) || return 1
    sleep 2
  done
}

# wait_until SECONDS DESCRIPTION COMMAND...: poll_until, or an error naming what it waited for and the last
# line it saw.
wait_until() {
  local timeout="$1" what="$2"
  shift 2
  poll_until "${timeout}" "$@" ||
    die "timed out after ${timeout}s waiting for ${what}${WAITED:+ (last seen: ${WAITED})}"
}

# render_template FILE: prints FILE with ${NAME} placeholders replaced from the environment;
# a placeholder without a value is an error (python3's string.Template.substitute).
render_template() {
  python3 -c '
import os, string, sys
with open(sys.argv[1], encoding="utf-8") as handle:
    text = handle.read()
try:
    sys.stdout.write(string.Template(text).substitute(os.environ))
except KeyError as exc:
    sys.exit(f"{sys.argv[1]}: no value for placeholder {exc}")
' "$1"
}

# facts QUERY [ARG...]: scripts/substrate_facts.py, which reads upstream outputs (kubectl-ate and kubectl
# JSON, the Substrate checkout) in every shape the supported versions print; tests/test_substrate_facts.py
# checks it against recorded samples.
facts() { python3 "${AB_ROOT}/scripts/substrate_facts.py" "$@"; }

# stack_value KEY...: the stack's settings as the program sees them (defaults applied), one line each, e.g.
# `stack_value substrate.trust.mode` (tools/stack_value.py).
stack_value() {
  (cd "${AB_ROOT}" && "${AB_PYTHON}" -m tools.stack_value --stack "${PULUMI_STACK}" --project-dir "${AB_ROOT}" "$@")
}

# substrate_module: the Go module path of the checkout (github.com/agent-substrate/substrate in older
# versions, go.ate.dev/substrate in newer ones).
substrate_module() { facts go-module "${SUBSTRATE_SRC}"; }

# ko_build_image BINARY: builds cmd/BINARY of the checkout with the checkout's own pinned ko (hack/tools/ko, as
# ate-setup does in cmd/ate-setup/internal/ko/ko.go), pushes it to the kind registry and prints its digest ref.
ko_build_image() {
  local binary="$1" module ko goarch log ref
  [[ -d "${SUBSTRATE_SRC}/cmd/${binary}" ]] || die "no cmd/${binary} in Substrate ${SUBSTRATE_REF}"
  module="$(substrate_module)" || die "cannot read the Go module path of ${SUBSTRATE_SRC}/go.mod"
  ko="$(cd "${SUBSTRATE_SRC}/hack/tools/ko" && go tool -n ko)" ||
    die "cannot locate the ko tool pinned in ${SUBSTRATE_SRC}/hack/tools/ko"
  goarch="$(go env GOARCH)"
  log="$(mktemp)"
  if ! ref="$(cd "${SUBSTRATE_SRC}" && KO_DOCKER_REPO="localhost:${REGISTRY_PORT}" \
    KO_DEFAULTPLATFORMS="linux/${goarch}" "${ko}" build --base-import-paths "${module}/cmd/${binary}" 2>"${log}")"; then
    cat "${log}" >&2
    rm -f "${log}"
    die "ko build of ${module}/cmd/${binary} failed"
  fi
  rm -f "${log}"
  ref="$(printf '%s\n' "${ref}" | tail -n1)"
  [[ "${ref}" == *@sha256:* ]] || die "ko did not print a digest for ${binary} (got '${ref}')"
  printf '%s\n' "${ref}"
}

actor_state() {
  kate get actors "$1" -a "${ATESPACE}" -o json 2>/dev/null | facts actor-state
}

actor_is() { [[ "$(actor_state "$1")" == "$2" ]]; }

# port_forward_start NAMESPACE SERVICE REMOTE_PORT: starts `kubectl port-forward` on a free local
# port; sets PF_PID and PF_PORT. Stop it with port_forward_stop (kills only that process id).
port_forward_start() {
  local log
  log="$(mktemp)"
  # kubectl itself in the background (not the kctl function, whose subshell would be the pid).
  kubectl --context "${KUBE_CONTEXT}" -n "$1" port-forward --address 127.0.0.1 "service/$2" ":$3" >"${log}" 2>&1 &
  PF_PID=$!
  PF_PORT=""
  local tries=0
  while [[ -z "${PF_PORT}" ]] && ((tries < 60)); do
    PF_PORT="$(sed -n 's/^Forwarding from 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "${log}" | head -n1)"
    kill -0 "${PF_PID}" 2>/dev/null || break
    sleep 0.5
    tries=$((tries + 1))
  done
  if [[ -z "${PF_PORT}" ]]; then
    cat "${log}" >&2
    rm -f "${log}"
    port_forward_stop
    die "kubectl port-forward to service/$2 in $1 did not start"
  fi
  rm -f "${log}"
}

port_forward_stop() {
  if [[ -n "${PF_PID:-}" ]]; then
    kill "${PF_PID}" 2>/dev/null || true
    wait "${PF_PID}" 2>/dev/null || true
    PF_PID=""
  fi
}
