#!/usr/bin/env bash
# Fetch the pinned upstream CRD files the schema tests validate against (`make crds`).
#
# Same files and folder layout as the shared copy the tests default to:
#   envoy-gateway-v1.9.0/  envoyproxy/gateway    @ v1.9.0 charts/gateway-helm/charts/crds/crds/
#   ai-gateway-v1.1.0/     envoyproxy/ai-gateway @ v1.1.0 manifests/charts/ai-gateway-crds-helm/templates/
# Output: ${AGENT_BUDGETS_CRDS:-.crds} (a relative path is taken from the repository root).
# Every file is checked against the sha256 of the copy the tests were written against; set
# AGENT_BUDGETS_CRDS_NO_VERIFY=1 to accept different bytes (e.g. a moved tag) after reviewing them.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"

out="${AGENT_BUDGETS_CRDS:-.crds}"
case "${out}" in
  /*) ;;
  *) out="${repo_root}/${out}" ;;
esac

eg_repo="envoyproxy/gateway"
eg_tag="v1.9.0"
eg_dir="envoy-gateway-${eg_tag}"
eg_path="charts/gateway-helm/charts/crds/crds"

aigw_repo="envoyproxy/ai-gateway"
aigw_tag="v1.1.0"
aigw_dir="ai-gateway-${aigw_tag}"
aigw_path="manifests/charts/ai-gateway-crds-helm/templates"

# <local file under $out> <upstream path> <repo> <tag> <sha256>
files=(
  "${eg_dir}/gateway.envoyproxy.io_backendtrafficpolicies.yaml|${eg_path}/generated/gateway.envoyproxy.io_backendtrafficpolicies.yaml|${eg_repo}|${eg_tag}|cd75a4c222df5487aa9ca8957b48bcc3255eb25de02ed9153faf620bc160f786"
  "${eg_dir}/gateway.envoyproxy.io_securitypolicies.yaml|${eg_path}/generated/gateway.envoyproxy.io_securitypolicies.yaml|${eg_repo}|${eg_tag}|6412914ec5b7c48f58b85f60a80767ba15a50c8d374480cf5f2d872e4a764466"
  "${eg_dir}/gateway.envoyproxy.io_backends.yaml|${eg_path}/generated/gateway.envoyproxy.io_backends.yaml|${eg_repo}|${eg_tag}|bb1901aea758d05458b853b07db04a96a1ea4346b177e392e5ce7398573805be"
  "${eg_dir}/gateway.envoyproxy.io_envoyproxies.yaml|${eg_path}/generated/gateway.envoyproxy.io_envoyproxies.yaml|${eg_repo}|${eg_tag}|3e9ea2f348445e3798b02daf02bf024b0d944227cf5ef8a18da7f675a1afd223"
  "${eg_dir}/gateway.envoyproxy.io_clienttrafficpolicies.yaml|${eg_path}/generated/gateway.envoyproxy.io_clienttrafficpolicies.yaml|${eg_repo}|${eg_tag}|2c7eaa1ce30de626e9c362b8d9002281c2f435f970020fa81902ad7f30b38d5b"
  "${eg_dir}/gatewayapi-crds-v1.6.1-experimental.yaml|${eg_path}/gatewayapi-crds.yaml|${eg_repo}|${eg_tag}|f0342ed49e7cd1b62624659984ea2934addd334efc8630827d0e1a81194b157a"
  "${aigw_dir}/aigateway.envoyproxy.io_aigatewayroutes.yaml|${aigw_path}/aigateway.envoyproxy.io_aigatewayroutes.yaml|${aigw_repo}|${aigw_tag}|c6ca0a06b214d93f1c7eefe8f9735fa551f23948088e0bf3c317b792ad68f162"
  "${aigw_dir}/aigateway.envoyproxy.io_aiservicebackends.yaml|${aigw_path}/aigateway.envoyproxy.io_aiservicebackends.yaml|${aigw_repo}|${aigw_tag}|35f6323a486a6f447be41fe1de4327f6e6e7254a0ca61d33186cb03fe11888f6"
  "${aigw_dir}/aigateway.envoyproxy.io_backendsecuritypolicies.yaml|${aigw_path}/aigateway.envoyproxy.io_backendsecuritypolicies.yaml|${aigw_repo}|${aigw_tag}|b2a2cfef49fd3253c70339231eef1745562515488022dcedc0c732df1c96c8f3"
  "${aigw_dir}/aigateway.envoyproxy.io_gatewayconfigs.yaml|${aigw_path}/aigateway.envoyproxy.io_gatewayconfigs.yaml|${aigw_repo}|${aigw_tag}|3e409ab57d85ee6c42b993ed869c7db28fde4b0e952c35c84a1240df09f21c1e"
)

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
for entry in "${files[@]}"; do
  IFS='|' read -r local_name upstream_path repo tag want_sha <<<"${entry}"
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
  if [[ "${got_sha}" != "${want_sha}" ]]; then
    echo "fetch-crds: sha256 mismatch for ${local_name}: got ${got_sha}, want ${want_sha}" >&2
    mismatches=$((mismatches + 1))
  fi
done

if ((mismatches > 0)) && [[ "${AGENT_BUDGETS_CRDS_NO_VERIFY:-}" != "1" ]]; then
  echo "fetch-crds: ${mismatches} file(s) differ from the pinned copies; nothing written." >&2
  echo "fetch-crds: review them, then rerun with AGENT_BUDGETS_CRDS_NO_VERIFY=1 to accept them." >&2
  exit 1
fi

for dir in "${eg_dir}" "${aigw_dir}"; do
  rm -rf "${out:?}/${dir}"
  mv "${staging}/${dir}" "${out}/${dir}"
done
if [[ ! -e "${out}/README.md" ]]; then
  cat >"${out}/README.md" <<EOF
# Upstream CRD schemas, pinned (fetched by scripts/fetch-crds.sh)

- ${eg_dir}/: https://github.com/${eg_repo} tag ${eg_tag}, ${eg_path}/
  (gatewayapi-crds.yaml saved as gatewayapi-crds-v1.6.1-experimental.yaml)
- ${aigw_dir}/: https://github.com/${aigw_repo} tag ${aigw_tag}, ${aigw_path}/
EOF
fi

echo
echo "fetch-crds: wrote ${#files[@]} CRD files to ${out}"
echo "fetch-crds: the schema tests read them when you run:"
echo "  export AGENT_BUDGETS_CRDS=${out}"
