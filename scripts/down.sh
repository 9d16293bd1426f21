#!/usr/bin/env bash
# make down: pulumi destroy on the dev stack, then delete the kind cluster (IDENTITY=kubernetes: the stack and the
# cluster of the Substrate-free environment; scripts/lib.sh).
#
#   scripts/down.sh               both steps
#   scripts/down.sh STEP [STEP]   only the named steps: pulumi-destroy, kind-delete
#
# Safe to re-run: a missing cluster, state or stack is reported and skipped.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STEPS=(pulumi-destroy kind-delete)

step_pulumi_destroy() {
  step "pulumi destroy (stack ${PULUMI_STACK})"
  local ok=0
  missing_tool kind "needed to find the dev cluster: https://kind.sigs.k8s.io/" || ok=1
  missing_tool pulumi "https://www.pulumi.com/docs/iac/download-install/" || ok=1
  ((ok == 0)) || die "install the tools listed above, then run make down again"
  if [[ ! -d "${STATE_DIR}" ]]; then
    info "no Pulumi state in ${STATE_DIR#"${AB_ROOT}/"}: nothing to destroy"
    return 0
  fi
  if ! kind_cluster_exists; then
    warn "kind cluster ${KIND_CLUSTER} not found: nothing to destroy in it; the next make up refreshes the stale stack state"
    return 0
  fi
  if ! (cd "${AB_ROOT}" && pulumi stack select "${PULUMI_STACK}" --non-interactive >/dev/null 2>&1); then
    info "stack ${PULUMI_STACK} does not exist in ${PULUMI_BACKEND}: nothing to destroy"
    return 0
  fi
  # Pulumi runs the program's dynamic provider (egress policies) from the project venv.
  [[ -x "${AB_ROOT}/venv/bin/python" ]] || make -C "${AB_ROOT}" --no-print-directory venv
  (
    cd "${AB_ROOT}"
    pulumi destroy --yes --stack "${PULUMI_STACK}" --non-interactive
  )
}

step_kind_delete() {
  step "Deleting kind cluster ${KIND_CLUSTER}"
  missing_tool kind "https://kind.sigs.k8s.io/" || die "install kind, then run make down again"
  if kind_cluster_exists; then
    kind delete cluster --name "${KIND_CLUSTER}"
  else
    info "kind cluster ${KIND_CLUSTER} does not exist"
  fi
  info "kept: the registry container ${REGISTRY_NAME} (docker rm -f ${REGISTRY_NAME}), build/ (Substrate checkout and binaries) and .state/ (Pulumi state)"
}

main() {
  local steps=("$@")
  if ((${#steps[@]} == 0)); then
    steps=("${STEPS[@]}")
  fi
  local name
  for name in "${steps[@]}"; do
    case "${name}" in
      pulumi-destroy) step_pulumi_destroy ;;
      kind-delete) step_kind_delete ;;
      *) die "unknown step '${name}' (steps: ${STEPS[*]})" ;;
    esac
  done
}

main "$@"
