#!/usr/bin/env bash
# Fetch the upstream CRD files the schema tests validate against (`make crds`), for the versions the
# program deploys by default (platform.envoyGatewayVersion / agentRouterVersion, read from core/settings/platform.py
# by scripts/deployed_versions.py). Override with EG_VERSION=v1.9.0 AR_VERSION=v1.1.0 make crds.
#
#   envoy-gateway-<tag>/  envoyproxy/gateway  @ <tag> charts/gateway-helm/charts/crds/crds/
#   ai-gateway-<tag>/     Agent Router @ <tag> manifests/charts/ai-gateway-crds-helm/templates/
#                         (envoyproxy/ai-gateway up to v1.1.x; theagentrouter/agent-router from v1.2.0, where
#                         the renamed project publishes; same chart path)
#   prometheus-operator-<tag>/  prometheus-operator/prometheus-operator @ v0.93.0 (PROMETHEUS_OPERATOR_VERSION)
#                         example/prometheus-operator-crd/, the PrometheusRule and PodMonitor CRDs (monitoring.prometheusRules)
# Output: ${AGENT_BUDGETS_CRDS:-.crds} (a relative path is taken from the repository root); other versions'
# folders there are removed, so the tests load one version of each. tests/support/crds.py names the
# versions in the test summary.
# Files whose sha256 is recorded in scripts/crds.sha256 must match it (AGENT_BUDGETS_CRDS_NO_VERIFY=1
# accepts different bytes after review). Versions with no recorded sums are fetched over HTTPS from the
# tag and their sums printed and written to <out>/SHA256SUMS: review them and append them to
# scripts/crds.sha256 to pin them (AGENT_BUDGETS_CRDS_REQUIRE_PINNED=1 refuses unrecorded files).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"

out="${AGENT_BUDGETS_CRDS:-.crds}"
case "${out}" in
  /*) ;;
  *) out="${repo_root}/${out}" ;;
esac

deployed="$(python3 "${repo_root}/scripts/deployed_versions.py")"
eg_default="$(sed -n 's/.*ENVOY_GATEWAY_VERSION=\([^ ]*\).*/\1/p' <<<"${deployed}")"
ar_default="$(sed -n 's/.*AGENT_ROUTER_VERSION=\([^ ]*\).*/\1/p' <<<"${deployed}")"

eg_repo="envoyproxy/gateway"
eg_tag="${EG_VERSION:-${eg_default}}"
eg_dir="envoy-gateway-${eg_tag}"
eg_path="charts/gateway-helm/charts/crds/crds"

aigw_tag="${AR_VERSION:-${ar_default}}"
aigw_repo="envoyproxy/ai-gateway"
# Agent Router v1.2.0 was the first release under the new name, from theagentrouter/agent-router.
if [[ "$(printf '%s\n%s\n' "v1.2.0" "${aigw_tag}" | sort -V | head -n1)" == "v1.2.0" ]]; then
  aigw_repo="theagentrouter/agent-router"
fi
aigw_dir="ai-gateway-${aigw_tag}"
aigw_path="manifests/charts/ai-gateway-crds-helm/templates"

# The PrometheusRule and PodMonitor CRDs, for the optional budget alerts and the monitors that feed them
# (monitoring.prometheusRules). The program does not install the Prometheus Operator; this pins the version
# the monitoring schema tests are written against.
prom_repo="prometheus-operator/prometheus-operator"
prom_tag="${PROMETHEUS_OPERATOR_VERSION:-v0.93.0}"
prom_dir="prometheus-operator-${prom_tag}"
prom_path="example/prometheus-operator-crd"

# <local file under $out>|<upstream path>|<repo>|<tag>
files=(
  "${eg_dir}/gateway.envoyproxy.io_backendtrafficpolicies.yaml|${eg_path}/generated/gateway.envoyproxy.io_backendtrafficpolicies.yaml|${eg_repo}|${eg_tag}"
  "${eg_dir}/gateway.envoyproxy.io_securitypolicies.yaml|${eg_path}/generated/gateway.envoyproxy.io_securitypolicies.yaml|${eg_repo}|${eg_tag}"
  "${eg_dir}/gateway.envoyproxy.io_backends.yaml|${eg_path}/generated/gateway.envoyproxy.io_backends.yaml|${eg_repo}|${eg_tag}"
  "${eg_dir}/gateway.envoyproxy.io_envoyproxies.yaml|${eg_path}/generated/gateway.envoyproxy.io_envoyproxies.yaml|${eg_repo}|${eg_tag}"
  "${eg_dir}/gateway.envoyproxy.io_clienttrafficpolicies.yaml|${eg_path}/generated/gateway.envoyproxy.io_clienttrafficpolicies.yaml|${eg_repo}|${eg_tag}"
  "${eg_dir}/gateway.envoyproxy.io_envoyextensionpolicies.yaml|${eg_path}/generated/gateway.envoyproxy.io_envoyextensionpolicies.yaml|${eg_repo}|${eg_tag}"
  "${eg_dir}/gatewayapi-crds.yaml|${eg_path}/gatewayapi-crds.yaml|${eg_repo}|${eg_tag}"
  "${aigw_dir}/aigateway.envoyproxy.io_aigatewayroutes.yaml|${aigw_path}/aigateway.envoyproxy.io_aigatewayroutes.yaml|${aigw_repo}|${aigw_tag}"
  "${aigw_dir}/aigateway.envoyproxy.io_aiservicebackends.yaml|${aigw_path}/aigateway.envoyproxy.io_aiservicebackends.yaml|${aigw_repo}|${aigw_tag}"
  "${aigw_dir}/aigateway.envoyproxy.io_backendsecuritypolicies.yaml|${aigw_path}/aigateway.envoyproxy.io_backendsecuritypolicies.yaml|${aigw_repo}|${aigw_tag}"
  "${aigw_dir}/aigateway.envoyproxy.io_gatewayconfigs.yaml|${aigw_path}/aigateway.envoyproxy.io_gatewayconfigs.yaml|${aigw_repo}|${aigw_tag}"
  "${prom_dir}/monitoring.coreos.com_prometheusrules.yaml|${prom_path}/monitoring.coreos.com_prometheusrules.yaml|${prom_repo}|${prom_tag}"
  "${prom_dir}/monitoring.coreos.com_podmonitors.yaml|${prom_path}/monitoring.coreos.com_podmonitors.yaml|${prom_repo}|${prom_tag}"
)

# pinned_sha <repo>@<tag>/<upstream path>: the recorded sha256 in scripts/crds.sha256, or nothing.
pinned_sha() {
  awk -v want="$1" '$2 == want {print $1; exit}' "${repo_root}/scripts/crds.sha256"
}

for tool in curl sha256sum; do
  if ! command -v "${tool}" >/dev/null 2>&1; then
    echo "fetch-crds: ${tool} is required" >&2
    exit 1
  fi
done

if [[ "${out}" == "/" || "${out}" == "${HOME:-}" || "${out}" == "${repo_root}" ]]; then
  echo "fetch-crds: refusing to write into ${out}; point AGENT_BUDGETS_CRDS at a dedicated folder" >&2
  exit 1
fi

# Download into a scratch folder inside the target, then swap the two version folders in: a failed
# run never leaves a half-filled folder that the tests would happily load.
mkdir -p "${out}"
staging="$(mktemp -d "${out}/.fetch.XXXXXX")"
cleanup() { rm -rf "${staging}"; }
trap cleanup EXIT

mismatches=0
unpinned=()
: >"${staging}/SHA256SUMS"
for entry in "${files[@]}"; do
  IFS='|' read -r local_name upstream_path repo tag <<<"${entry}"
  url="https://raw.githubusercontent.com/${repo}/${tag}/${upstream_path}"
  dest="${staging}/${local_name}"
  mkdir -p "$(dirname "${dest}")"
  echo "fetch-crds: ${url}"
  curl --fail --silent --show-error --location --proto '=https' --tlsv1.2 \
    --retry 3 --retry-delay 2 --connect-timeout 20 --max-time 300 \
    --output "${dest}" "${url}"
  if ! grep -q '^kind: CustomResourceDefinition' "${dest}"; then
    echo "fetch-crds: ${url} does not look like a CRD file" >&2
    exit 1
  fi
  got_sha="$(sha256sum "${dest}" | cut -d' ' -f1)"
  line="${got_sha}  ${repo}@${tag}/${upstream_path}"
  printf '%s\n' "${line}" >>"${staging}/SHA256SUMS"
  want_sha="$(pinned_sha "${repo}@${tag}/${upstream_path}")"
  if [[ -z "${want_sha}" ]]; then
    unpinned+=("${line}")
  elif [[ "${got_sha}" != "${want_sha}" ]]; then
    echo "fetch-crds: sha256 mismatch for ${local_name}: got ${got_sha}, want ${want_sha}" >&2
    mismatches=$((mismatches + 1))
  fi
done

if ((${#unpinned[@]} > 0)); then
  echo "fetch-crds: ${#unpinned[@]} file(s) of these versions have no recorded sha256 in scripts/crds.sha256:" >&2
  printf '  %s\n' "${unpinned[@]}" >&2
  if [[ "${AGENT_BUDGETS_CRDS_REQUIRE_PINNED:-}" == "1" ]]; then
    echo "fetch-crds: AGENT_BUDGETS_CRDS_REQUIRE_PINNED=1: nothing written; review them and record them first." >&2
    exit 1
  fi
  echo "fetch-crds: accepted as fetched over HTTPS from the tags; review them, then append the lines above to scripts/crds.sha256 to pin them." >&2
fi

if ((mismatches > 0)) && [[ "${AGENT_BUDGETS_CRDS_NO_VERIFY:-}" != "1" ]]; then
  echo "fetch-crds: ${mismatches} file(s) differ from the pinned copies; nothing written." >&2
  echo "fetch-crds: review them, then rerun with AGENT_BUDGETS_CRDS_NO_VERIFY=1 to accept them." >&2
  exit 1
fi

# One version of each project in the output: the tests load every YAML file under it.
for stale in "${out}"/envoy-gateway-* "${out}"/ai-gateway-* "${out}"/prometheus-operator-*; do
  [[ -e "${stale}" ]] || continue
  rm -rf "${stale:?}"
done
for dir in "${eg_dir}" "${aigw_dir}" "${prom_dir}"; do
  mv "${staging}/${dir}" "${out}/${dir}"
done
mv "${staging}/SHA256SUMS" "${out}/SHA256SUMS"
{
  echo "# Upstream CRD schemas (fetched by scripts/fetch-crds.sh)"
  echo
  echo "- ${eg_dir}/: https://github.com/${eg_repo} tag ${eg_tag}, ${eg_path}/"
  echo "- ${aigw_dir}/: https://github.com/${aigw_repo} tag ${aigw_tag}, ${aigw_path}/"
  echo "- ${prom_dir}/: https://github.com/${prom_repo} tag ${prom_tag}, ${prom_path}/ (PrometheusRule, PodMonitor)"
  echo "- SHA256SUMS: what was fetched"
} >"${out}/README.md"

echo
echo "fetch-crds: wrote ${#files[@]} CRD files to ${out}"
echo "fetch-crds: the schema tests read them when you run:"
echo "  export AGENT_BUDGETS_CRDS=${out}"
