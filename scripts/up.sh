#!/usr/bin/env bash
# make up: bring the agent-budgets dev environment up, or converge an existing one.
#
#   scripts/up.sh               every step below, in order
#   scripts/up.sh STEP [STEP]   only the named steps (the Makefile's `up` recipe lists them one per
#                               line, so `make -n up` shows the whole sequence)
#   IDENTITY=kubernetes scripts/up.sh [STEP...]   the Substrate-free environment (scripts/lib.sh)
#
# Steps: check-prereqs kind-cluster substrate-source substrate-install substrate-idp probe-image demo-actors
#        pulumi-stack pulumi-up jwks-sync resume-actors smoke
# IDENTITY=kubernetes: check-prereqs kind-cluster probe-image pulumi-stack pulumi-up service-account-keys
#        agent-pods smoke
# Every step is safe to re-run: what exists is checked and kept, what is missing is created.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SUBSTRATE_STEPS=(check-prereqs kind-cluster substrate-source substrate-install substrate-idp probe-image demo-actors
  pulumi-stack pulumi-up jwks-sync resume-actors smoke)
KUBERNETES_STEPS=(check-prereqs kind-cluster probe-image pulumi-stack pulumi-up service-account-keys agent-pods smoke)
if [[ "${IDENTITY}" == kubernetes ]]; then
  STEPS=("${KUBERNETES_STEPS[@]}")
else
  STEPS=("${SUBSTRATE_STEPS[@]}")
fi

# --- check-prereqs -------------------------------------------------------------------------------

step_check_prereqs() {
  step "Checking prerequisites"
  # The Substrate-free environment builds nothing from source (no go, git or buildx) and needs an older kind.
  local ok=0 substrate=0 again="make up"
  if [[ "${IDENTITY}" == substrate ]]; then
    substrate=1
  else
    again="make up IDENTITY=${IDENTITY}"
  fi
  missing_tool docker "Docker Engine or Docker Desktop: https://docs.docker.com/get-docker/" || ok=1
  missing_tool kind "kind >= v${KIND_MIN_VERSION}: https://kind.sigs.k8s.io/docs/user/quick-start/#installation" || ok=1
  missing_tool kubectl "https://kubernetes.io/docs/tasks/tools/" || ok=1
  if ((substrate)); then
    missing_tool go "Go, to build Substrate from source: https://go.dev/dl/" || ok=1
    missing_tool git "https://git-scm.com/downloads" || ok=1
  fi
  missing_tool pulumi "the Pulumi CLI: https://www.pulumi.com/docs/iac/download-install/ (no account needed)" || ok=1
  missing_tool python3 "Python 3.11+: https://www.python.org/downloads/" || ok=1
  if ((substrate)) && have docker && ! docker buildx version >/dev/null 2>&1; then
    printf 'missing: docker buildx (Substrate builds its envoy-dataplane image with it: https://docs.docker.com/build/buildx/)\n' >&2
    ok=1
  fi
  ((ok == 0)) || die "install the tools listed above, then run ${again} again"

  docker info >/dev/null 2>&1 || die "docker is installed but its daemon is not reachable (docker info failed): start Docker"
  local kind_version
  kind_version="$(kind version 2>/dev/null | awk '{print $2}')"
  version_ge "${kind_version:-0}" "${KIND_MIN_VERSION}" ||
    die "kind ${kind_version:-unknown} is too old: the IDENTITY=${IDENTITY} environment needs kind >= v${KIND_MIN_VERSION} (scripts/versions.env)"
  [[ -f "${AB_ROOT}/Pulumi.yaml" ]] || die "Pulumi.yaml not found in ${AB_ROOT}"
  [[ -x "${AB_ROOT}/venv/bin/python" ]] || die "the Pulumi program's venv is missing: run make venv (make up does it first)"
  if ((substrate)); then
    info "docker, kind ${kind_version}, kubectl, go, git, pulumi, python3: ok"
  else
    info "docker, kind ${kind_version}, kubectl, pulumi, python3: ok (IDENTITY=${IDENTITY}: no Substrate, nothing built from source)"
  fi
}

# --- kind-cluster --------------------------------------------------------------------------------

ensure_registry() {
  if [[ "$(docker inspect -f '{{.State.Running}}' "${REGISTRY_NAME}" 2>/dev/null || true)" != "true" ]]; then
    if docker inspect "${REGISTRY_NAME}" >/dev/null 2>&1; then
      info "starting the existing registry container ${REGISTRY_NAME}"
      docker start "${REGISTRY_NAME}" >/dev/null
    else
      # Published on both loopback families, as Substrate's hack/create-kind-cluster.sh does: ko and
      # docker push reach localhost:${REGISTRY_PORT} over whichever family the resolver picks.
      info "creating the local registry ${REGISTRY_NAME} on 127.0.0.1:${REGISTRY_PORT} and [::1]:${REGISTRY_PORT}"
      docker run -d --restart=always -p "127.0.0.1:${REGISTRY_PORT}:5000" -p "[::1]:${REGISTRY_PORT}:5000" \
        --network bridge --name "${REGISTRY_NAME}" "${REGISTRY_IMAGE}" >/dev/null
    fi
  fi
  local published
  published="$(docker port "${REGISTRY_NAME}" 5000/tcp 2>/dev/null || true)"
  if ! grep -qxF "127.0.0.1:${REGISTRY_PORT}" <<<"${published}" || ! grep -qxF "[::1]:${REGISTRY_PORT}" <<<"${published}"; then
    die "container ${REGISTRY_NAME} exists but does not publish port ${REGISTRY_PORT} on both 127.0.0.1 and [::1] (it publishes: ${published//$'\n'/, }): remove it (docker rm -f ${REGISTRY_NAME}) and run make up again"
  fi
}

step_kind_cluster() {
  step "kind cluster ${KIND_CLUSTER} with the local registry"
  ensure_registry
  if kind_cluster_exists; then
    info "kind cluster ${KIND_CLUSTER} exists: reusing it"
  else
    local args=(create cluster --name "${KIND_CLUSTER}" --config "${KIND_CONFIG}" --wait 180s)
    if [[ -n "${KIND_NODE_IMAGE}" ]]; then
      args+=(--image "${KIND_NODE_IMAGE}")
    fi
    kind "${args[@]}"
  fi
  # Restore the context if the kubeconfig lost it (kind create sets it; this leaves the current one alone).
  if ! kubectl config get-contexts -o name 2>/dev/null | grep -qx "${KUBE_CONTEXT}"; then
    kind export kubeconfig --name "${KIND_CLUSTER}" >/dev/null 2>&1
  fi
  kctl get --raw /readyz >/dev/null || die "the API server of ${KUBE_CONTEXT} does not answer"
  if [[ "${IDENTITY}" == substrate ]]; then
    require_substrate_cluster_features
  fi
  wire_registry
  if [[ "${IDENTITY}" == kubernetes ]]; then
    info "context ${KUBE_CONTEXT}: registry localhost:${REGISTRY_PORT} wired (no Substrate: no feature gates, no proxy_arp)"
  else
    info "context ${KUBE_CONTEXT}: feature gates on, certificates.k8s.io/v1beta1 served, proxy_arp set, registry localhost:${REGISTRY_PORT} wired"
  fi
}

# What Substrate needs from the cluster itself; a cluster made some other way may lack it.
require_substrate_cluster_features() {
  kctl get --raw /apis/certificates.k8s.io/v1beta1 >/dev/null 2>&1 ||
    die "${KIND_CLUSTER} does not serve certificates.k8s.io/v1beta1: it was not created from scripts/kind-config.yaml; run make down, then make up"
  local resources
  resources="$(kctl api-resources --api-group=certificates.k8s.io -o name 2>/dev/null || true)"
  local resource
  for resource in clustertrustbundles podcertificaterequests; do
    grep -q "^${resource}\." <<<"${resources}" ||
      die "${KIND_CLUSTER} has no ${resource} API (feature gates ClusterTrustBundle/PodCertificateRequest off, or the Kubernetes version predates them); run make down, then make up"
  done
}

# The nodes pull from the local registry as localhost:${REGISTRY_PORT} (kind's local-registry recipe).
wire_registry() {
  local node registry_dir="/etc/containerd/certs.d/localhost:${REGISTRY_PORT}"
  for node in $(kind get nodes --name "${KIND_CLUSTER}"); do
    if [[ "${IDENTITY}" == substrate ]]; then
      # gVisor sandboxes reach pods on the same node through proxy ARP; a node restart resets it.
      docker exec "${node}" sysctl -w net.ipv4.conf.all.proxy_arp=1 >/dev/null
    fi
    docker exec "${node}" mkdir -p "${registry_dir}"
    printf '[host."http://%s:5000"]\n' "${REGISTRY_NAME}" |
      docker exec -i "${node}" cp /dev/stdin "${registry_dir}/hosts.toml"
  done
  if [[ "$(docker inspect -f '{{json .NetworkSettings.Networks.kind}}' "${REGISTRY_NAME}")" == "null" ]]; then
    docker network connect kind "${REGISTRY_NAME}"
  fi
  kctl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: local-registry-hosting
  namespace: kube-public
data:
  localRegistryHosting.v1: |
    host: "localhost:${REGISTRY_PORT}"
    help: "https://kind.sigs.k8s.io/docs/user/local-registry/"
EOF
}

# --- substrate-source ----------------------------------------------------------------------------

verify_substrate_features() {
  local src="${SUBSTRATE_SRC}" missing=()
  [[ -d "${src}/cmd/ate-setup" ]] || missing+=("cmd/ate-setup (Substrate's installer)")
  [[ -d "${src}/cmd/kubectl-ate" ]] || missing+=("cmd/kubectl-ate")
  grep -rqF '"actor/%s/%s"' "${src}/cmd/ateapi" 2>/dev/null ||
    missing+=("the actor JWT subject actor/<atespace>/<name> (cmd/ateapi)")
  if grep -rqF 'cannot inject actor JWTs yet' "${src}/cmd/atenet" 2>/dev/null ||
    ! grep -rqF 'GetActorJwt()' "${src}/cmd/atenet" 2>/dev/null; then
    missing+=("actorJwt header injection on http egress rules (cmd/atenet)")
  fi
  # The egress provider writes with `update egress-policy` and deletes with `delete egress-policy --uid
  # --version` (cmd/kubectl-ate/internal/cmd/egress_policy.go): the first egress-policy commands were get
  # and create only (upstream d07c205); update and the guarded delete are there at 18d1c266.
  local delete_files=()
  mapfile -t delete_files < <(grep -rlF 'DeleteActorEgressPolicy(' "${src}/cmd/kubectl-ate" 2>/dev/null || true)
  grep -rqF 'UpdateActorEgressPolicy(' "${src}/cmd/kubectl-ate" 2>/dev/null ||
    missing+=("kubectl ate update egress-policy (cmd/kubectl-ate; upstream has it at 18d1c266)")
  if ((${#delete_files[@]} == 0)); then
    missing+=("kubectl ate delete egress-policy (cmd/kubectl-ate; upstream has it at 18d1c266)")
  elif ! grep -qF '"uid"' "${delete_files[@]}"; then
    missing+=("the --uid/--version guards of kubectl ate delete egress-policy (cmd/kubectl-ate)")
  fi
  if ((${#missing[@]} > 0)); then
    local item
    for item in "${missing[@]}"; do
      printf 'missing in Substrate %s: %s\n' "${SUBSTRATE_REF}" "${item}" >&2
    done
    die "the pinned Substrate ref lacks what agent-budgets needs; pin a newer ref in scripts/versions.env"
  fi
  # probe/actor-template.yaml.tmpl carries the snapshot block in the shape this ref's own templates use.
  facts snapshot-block "${src}" "gs://${SNAPSHOT_BUCKET}/agent-budgets/" "${SUBSTRATE_REF}" >/dev/null ||
    die "cannot write an ActorTemplate for Substrate ${SUBSTRATE_REF} (above)"
}

step_substrate_source() {
  step "Substrate source at ${SUBSTRATE_REF}"
  mkdir -p "${BUILD_DIR}" "${BIN_DIR}"
  if [[ ! -d "${SUBSTRATE_SRC}/.git" ]]; then
    git clone --filter=blob:none --branch "${SUBSTRATE_REF}" "${SUBSTRATE_REPO}" "${SUBSTRATE_SRC}" ||
      die "cannot clone ${SUBSTRATE_REPO} at ${SUBSTRATE_REF}"
  fi
  local origin
  origin="$(git -C "${SUBSTRATE_SRC}" remote get-url origin)"
  [[ "${origin}" == "${SUBSTRATE_REPO}" ]] ||
    die "${SUBSTRATE_SRC} is a clone of ${origin}, not ${SUBSTRATE_REPO}: remove it and run make up again"
  if ! git -C "${SUBSTRATE_SRC}" rev-parse -q --verify "${SUBSTRATE_REF}^{commit}" >/dev/null; then
    git -C "${SUBSTRATE_SRC}" fetch --tags --force origin
  fi
  local commit
  commit="$(git -C "${SUBSTRATE_SRC}" rev-parse "${SUBSTRATE_REF}^{commit}")" ||
    die "ref ${SUBSTRATE_REF} not found in ${SUBSTRATE_REPO}"
  git -C "${SUBSTRATE_SRC}" -c advice.detachedHead=false checkout --quiet --detach "${commit}" ||
    die "cannot check out ${SUBSTRATE_REF} in ${SUBSTRATE_SRC} (local changes?)"
  if [[ -z "${SUBSTRATE_EXPECTED_COMMIT_PREFIX}" ]]; then
    info "${SUBSTRATE_REF} resolved to ${commit} (no expected commit recorded in scripts/versions.env)"
  elif [[ "${commit}" == "${SUBSTRATE_EXPECTED_COMMIT_PREFIX}"* ]]; then
    info "${SUBSTRATE_REF} resolved to ${commit} (expected ${SUBSTRATE_EXPECTED_COMMIT_PREFIX}…: same)"
  else
    info "${SUBSTRATE_REF} resolved to ${commit} (expected ${SUBSTRATE_EXPECTED_COMMIT_PREFIX}…: DIFFERENT)"
    warn "${SUBSTRATE_REF} is ${commit}, not ${SUBSTRATE_EXPECTED_COMMIT_PREFIX}… as recorded in scripts/versions.env (has the tag moved?)"
  fi
  local module
  module="$(substrate_module)" || die "cannot read the Go module path of ${SUBSTRATE_SRC}/go.mod (above)"
  info "Go module ${module}"
  verify_substrate_features
  info "installer, actor JWT subject, http-rule JWT injection, a known ActorTemplate snapshot shape and guarded egress-policy writes present"
  report_idp_design
}

# idp_design: sets IDP_DESIGN (installer, pool, jwks-file, absent or unknown) and IDP_DESIGN_WHY from the
# checkout's cmd/ate-idp-server/main.go and install manifests (scripts/substrate_facts.py idp-design).
idp_design() {
  local line
  line="$(facts idp-design "${SUBSTRATE_SRC}")" || die "cannot classify the IdP of ${SUBSTRATE_SRC} (above)"
  IDP_DESIGN="${line%%$'\t'*}"
  IDP_DESIGN_WHY="${line#*$'\t'}"
}

report_idp_design() {
  if [[ "${SUBSTRATE_IDP_DEPLOYED_SEPARATELY:-0}" == "1" ]]; then
    info "IdP: deployed separately (SUBSTRATE_IDP_DEPLOYED_SEPARATELY=1); step substrate-idp checks that Service idp serves"
    return 0
  fi
  idp_design
  case "${IDP_DESIGN}" in
    installer) info "IdP: deployed by Substrate's own installer (${IDP_DESIGN_WHY}); step substrate-idp only checks it" ;;
    pool | jwks-file) info "IdP: ${IDP_DESIGN} design (${IDP_DESIGN_WHY}); no Substrate installer deploys it, so step substrate-idp does" ;;
    *) warn "IdP: none make up can deploy (${IDP_DESIGN_WHY}): step substrate-idp will switch the dev stack to substrate.trust.mode localJwks" ;;
  esac
}

# --- substrate-install ---------------------------------------------------------------------------

substrate_commit() { git -C "${SUBSTRATE_SRC}" rev-parse HEAD; }

require_substrate_checkout() {
  [[ -d "${SUBSTRATE_SRC}/.git" ]] || die "no Substrate checkout: run scripts/up.sh substrate-source first"
}

# Substrate's own Deployments in ate-system: everything but what make up adds (the IdP, step substrate-idp).
SUBSTRATE_DEPLOYMENTS='app.kubernetes.io/managed-by!=agent-budgets-make-up'

substrate_installed() {
  local commit="$1" recorded
  recorded="$(kctl -n ate-system get configmap "${INSTALL_MARKER}" -o jsonpath='{.data.commit}' 2>/dev/null || true)"
  [[ "${recorded}" == "${commit}" ]] &&
    kctl -n ate-system wait --for=condition=Available deployment -l "${SUBSTRATE_DEPLOYMENTS}" --timeout=60s >/dev/null 2>&1
}

step_substrate_install() {
  step "Substrate ${SUBSTRATE_REF}: kubectl-ate, ate-setup, deploy ate-system"
  require_substrate_checkout
  local commit goarch
  commit="$(substrate_commit)"
  goarch="$(go env GOARCH)"
  (
    cd "${SUBSTRATE_SRC}"
    go build -o "${BIN_DIR}/kubectl-ate" ./cmd/kubectl-ate
    go build -o "${BIN_DIR}/ate-setup" ./cmd/ate-setup
  )
  info "built ${BIN_DIR#"${AB_ROOT}/"}/kubectl-ate and ate-setup from ${commit:0:12} (kubectl ate finds the plugin on PATH)"

  if [[ -z "${FORCE_SUBSTRATE_INSTALL:-}" ]] && substrate_installed "${commit}"; then
    info "Substrate ${SUBSTRATE_REF} is already installed and available: skipping (FORCE_SUBSTRATE_INSTALL=1 reinstalls)"
    return 0
  fi
  info "installing with ate-setup (builds every image with ko; cold caches take several minutes)"
  (
    cd "${SUBSTRATE_SRC}"
    KO_DOCKER_REPO="localhost:${REGISTRY_PORT}" KO_DEFAULTPLATFORMS="linux/${goarch}" \
      BUCKET_NAME="${SNAPSHOT_BUCKET}" ATE_INSTALL_KIND=true NO_DEV_ENV=1 \
      "${BIN_DIR}/ate-setup" --kind --context "${KUBE_CONTEXT}" \
      --rollout-timeout "${SUBSTRATE_ROLLOUT_TIMEOUT}" \
      deploy ate-system --credential-provider="${SUBSTRATE_CREDENTIAL_PROVIDER}"
  )
  kctl -n ate-system wait --for=condition=Available deployment -l "${SUBSTRATE_DEPLOYMENTS}" --timeout="${SUBSTRATE_ROLLOUT_TIMEOUT}" >/dev/null ||
    die "Substrate's deployments in ate-system are not Available: kubectl --context ${KUBE_CONTEXT} -n ate-system get pods"
  kctl -n ate-system create configmap "${INSTALL_MARKER}" --from-literal=ref="${SUBSTRATE_REF}" \
    --from-literal=commit="${commit}" --dry-run=client -o yaml | kctl apply -f - >/dev/null
  info "Substrate ${SUBSTRATE_REF} installed"
}

# --- substrate-idp -------------------------------------------------------------------------------
#
# No Substrate version deploys cmd/ate-idp-server (its installer, kustomize overlays and charts were searched),
# yet Envoy Gateway verifies every actor JWT with the keys the IdP serves at https://idp.ate-system.svc. So
# make up builds it from the pinned checkout and deploys it from scripts/idp/ in the design the checkout's
# main.go declares, then checks it the way Envoy Gateway will use it. When it cannot (no IdP in this
# Substrate, or the check fails), the dev stack falls back to substrate.trust.mode localJwks.

IDP_TEMPLATES=("${AB_ROOT}/scripts/idp/service.yaml.tmpl" "${AB_ROOT}/scripts/idp/deployment.yaml.tmpl")
IDP_STAMP_ANNOTATION=agent-budgets.dev/idp-stamp
SMOKE_POD=agent-budgets-idp-smoke
SMOKE_IMAGE=python:3.12-alpine
# The smoke pod's activeDeadlineSeconds (from its scheduling, image pull included), and how long make up waits.
SMOKE_DEADLINE_SECONDS=120
SMOKE_WAIT_SECONDS="${SMOKE_WAIT_SECONDS:-150}"
# How long a rolled-out IdP may take to report ready (its keys loaded) before make up falls back.
IDP_READY_SECONDS="${IDP_READY_SECONDS:-60}"

# read_idp_settings: the stack settings the IdP steps use, read once (tools/stack_value.py).
read_idp_settings() {
  local values
  mapfile -t values < <(stack_value substrate.issuer substrate.jwksUri substrate.trust.mode \
    substrate.trust.clusterTrustBundle substrate.trust.configMap gateway.namespace)
  ((${#values[@]} == 6)) || die "cannot read the substrate settings of stack ${PULUMI_STACK} (above)"
  ISSUER="${values[0]}" JWKS_URI="${values[1]}" TRUST_MODE="${values[2]}" TRUST_BUNDLE="${values[3]}"
  TRUST_CONFIG_MAP="${values[4]}" GATEWAY_NAMESPACE="${values[5]}"
}

# idp_keys DESIGN: exports the IDP_KEYS_* values deployment.yaml.tmpl takes for the key material.
#   pool:      --actor-id-jwt-pool, Secret actor-id-jwt-pool key pool (ate-setup creates it; required)
#   jwks-file: --jwks-file, ConfigMap actor-id-jwks key jwks.json (ate-controller publishes it; optional, so
#              the IdP starts and reports not ready until it exists)
idp_keys() {
  case "$1" in
    pool) export IDP_KEYS_FLAG=actor-id-jwt-pool IDP_KEYS_SOURCE=secret IDP_KEYS_OBJECT=actor-id-jwt-pool \
      IDP_KEYS_KEY=pool IDP_KEYS_FILE=pool.json IDP_KEYS_OPTIONAL=false ;;
    jwks-file) export IDP_KEYS_FLAG=jwks-file IDP_KEYS_SOURCE=configMap IDP_KEYS_OBJECT=actor-id-jwks \
      IDP_KEYS_KEY=jwks.json IDP_KEYS_FILE=jwks.json IDP_KEYS_OPTIONAL=true ;;
    *) die "no IdP key material for design '$1'" ;;
  esac
}

# idp_stamp DESIGN ISSUER: what the deployed IdP must have been made from: the templates, the design, the
# issuer and the checkout commit. A different stamp means rebuild and re-apply.
idp_stamp() {
  { printf 'design=%s\nissuer=%s\ncommit=%s\n' "$1" "$2" "$(substrate_commit)"; cat "${IDP_TEMPLATES[@]}"; } | facts stamp
}

# idp_ready_endpoints: prints how many ready endpoints Service idp in ate-system has; succeeds when any.
idp_ready_endpoints() {
  local ready
  ready="$(kctl -n ate-system get endpointslices -l kubernetes.io/service-name=idp -o json 2>/dev/null | facts ready-endpoints || echo 0)"
  echo "${ready}"
  ((ready > 0))
}

# require_idp_ready: Service idp in ate-system with at least one ready endpoint, or an error (an IdP
# declared with SUBSTRATE_IDP_DEPLOYED_SEPARATELY=1, or deployed by Substrate's own installer).
require_idp_ready() {
  local hint="kubectl --context ${KUBE_CONTEXT} -n ate-system get deploy,svc,endpointslices"
  kctl -n ate-system get service idp >/dev/null 2>&1 ||
    die "no Service idp in ate-system: an IdP deployed separately must serve there, or every actor call gets 401 (${hint})"
  wait_until 120 "a ready endpoint of Service idp in ate-system (${hint}; its logs: kubectl --context ${KUBE_CONTEXT} -n ate-system logs deploy/ate-idp-server)" \
    idp_ready_endpoints
  info "Service idp in ate-system: ${WAITED} ready endpoint(s)"
}

# deploy_idp DESIGN: builds and applies ate-idp-server when its stamp changed (Service first, then the
# Deployment), then waits for it to serve. IDP_PROBLEM says why, when it does not serve (set -e stays in force: never
# called as a condition).
deploy_idp() {
  local design="$1" stamp current image jwks_path
  stamp="$(idp_stamp "${design}" "${ISSUER}")"
  jwks_path="$(facts issuer-jwks-path "${ISSUER}")"
  current="$(kctl -n ate-system get deployment ate-idp-server -o json 2>/dev/null | facts annotation "${IDP_STAMP_ANNOTATION}" || true)"
  if [[ -z "${FORCE_IDP_DEPLOY:-}" && "${current}" == "${stamp}" ]]; then
    info "ate-idp-server is current (${design} design, checkout ${SUBSTRATE_REF}, templates unchanged): not rebuilt (FORCE_IDP_DEPLOY=1 rebuilds and restarts it)"
  else
    image="$(ko_build_image ate-idp-server)"
    idp_keys "${design}"
    export IDP_IMAGE="${image}" IDP_ISSUER="${ISSUER}" IDP_STAMP="${stamp}" IDP_DESIGN="${design}" \
      IDP_JWKS_PATH="${jwks_path}"
    # The Service first: the pod's certificate names idp.ate-system.svc only if Service idp selects the pod
    # when the service-DNS signer signs it (cmd/podcertcontroller/internal/servicednssigner).
    render_template "${IDP_TEMPLATES[0]}" | kctl apply -f - >/dev/null
    kctl -n ate-system get service idp >/dev/null || die "Service idp was not created in ate-system"
    render_template "${IDP_TEMPLATES[1]}" | kctl apply -f - >/dev/null
    if [[ -n "${FORCE_IDP_DEPLOY:-}" ]]; then
      # New pods, so new certificates signed while Service idp exists.
      kctl -n ate-system rollout restart deployment/ate-idp-server >/dev/null
    fi
    info "applied Service idp, then Deployment ate-idp-server (${design} design, ${image})"
  fi
  local hint="kubectl --context ${KUBE_CONTEXT} -n ate-system describe deploy/ate-idp-server; kubectl --context ${KUBE_CONTEXT} -n ate-system logs deploy/ate-idp-server"
  if ! kctl -n ate-system rollout status deployment/ate-idp-server --timeout=180s >/dev/null 2>&1; then
    IDP_PROBLEM="Deployment ate-idp-server did not roll out within 180s (${hint})"
    return 0
  fi
  if ! poll_until "${IDP_READY_SECONDS}" idp_ready_endpoints; then
    IDP_PROBLEM="Service idp has no ready endpoint: the IdP does not serve its key set (${jwks_path}) yet (${hint})"
    if [[ "${design}" == jwks-file ]] && ! kctl -n ate-system get configmap actor-id-jwks >/dev/null 2>&1; then
      IDP_PROBLEM="ConfigMap ate-system/actor-id-jwks does not exist, so ate-idp-server has no keys to serve: this Substrate's ate-controller does not publish it (${hint})"
    fi
    return 0
  fi
  info "Service idp in ate-system: ${WAITED} ready endpoint(s)"
}

# signing_kids DESIGN: the key ids actor JWTs are signed with: the pool's authorities, or (JWKS-file design)
# the key set ate-controller published from them.
signing_kids() {
  if [[ "$1" == jwks-file ]]; then
    kctl -n ate-system get configmap actor-id-jwks -o json | facts config-map-value jwks.json | facts jwks-kids
  else
    kctl -n ate-system get secret actor-id-jwt-pool -o json | facts pool-kids pool
  fi
}

smoke_pod_finished() {
  local phase
  phase="$(kctl -n "$1" get pod "${SMOKE_POD}" -o jsonpath='{.status.phase}' 2>/dev/null || true)"
  echo "${phase:-Pending}"
  [[ "${phase}" == Succeeded || "${phase}" == Failed ]]
}

# idp_smoke_check DESIGN: one pod fetches the IdP's JWKS trusting what the stack's substrate.trust names,
# with hostname verification, and its key ids must be the signing keys'. IDP_PROBLEM says why, when not.
idp_smoke_check() {
  local design="$1" bundle="${TRUST_BUNDLE}" ca_map="${TRUST_CONFIG_MAP}" uri="${JWKS_URI}" namespace trust what
  if [[ "${TRUST_MODE}" == configMap ]]; then
    namespace="${GATEWAY_NAMESPACE}"
    if ! kctl -n "${namespace}" get configmap "${ca_map}" >/dev/null 2>&1; then
      warn "smoke check skipped: substrate.trust.mode is configMap and ConfigMap ${namespace}/${ca_map} (the IdP's CA, yours to fill) does not exist yet"
      return 0
    fi
    trust="configMap: {name: \"${ca_map}\", items: [{key: ca.crt, path: ca.crt}]}"
    what="the CA in ConfigMap ${namespace}/${ca_map}"
  else
    # The ClusterTrustBundle the BackendTLSPolicy names; in modes localJwks and insecureSkipVerify too, so a
    # stack make up switched to localJwks switches back once the IdP verifies.
    namespace=ate-system
    trust="clusterTrustBundle: {name: \"${bundle}\", path: ca.crt}"
    what="ClusterTrustBundle ${bundle}"
  fi
  kctl -n "${namespace}" create configmap "${SMOKE_POD}" --from-file=fetch_jwks.py="${AB_ROOT}/scripts/idp/fetch_jwks.py" \
    --dry-run=client -o yaml | kctl apply -f - >/dev/null
  kctl -n "${namespace}" delete pod "${SMOKE_POD}" --ignore-not-found --wait=true >/dev/null
  SMOKE_NAMESPACE="${namespace}" SMOKE_IMAGE="${SMOKE_IMAGE}" SMOKE_DEADLINE_SECONDS="${SMOKE_DEADLINE_SECONDS}" \
    JWKS_URI="${uri}" SMOKE_TRUST_SOURCE="${trust}" render_template "${AB_ROOT}/scripts/idp/smoke-pod.yaml.tmpl" | kctl apply -f - >/dev/null
  local finished=0 output result expected
  poll_until "${SMOKE_WAIT_SECONDS}" smoke_pod_finished "${namespace}" && finished=1
  output="$(kctl -n "${namespace}" logs "${SMOKE_POD}" 2>&1 || true)"
  kctl -n "${namespace}" delete pod "${SMOKE_POD}" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kctl -n "${namespace}" delete configmap "${SMOKE_POD}" --ignore-not-found >/dev/null 2>&1 || true
  if ((finished == 0)); then
    IDP_PROBLEM="the smoke pod ${namespace}/${SMOKE_POD} did not finish within ${SMOKE_WAIT_SECONDS}s (last phase ${WAITED}): it pulls ${SMOKE_IMAGE}, and it cannot start while ${what} cannot be mounted"
    return 0
  fi
  if ! result="$(facts smoke-result <<<"${output}")"; then
    printf '    smoke check: GET %s trusting %s failed:\n      %s\n' "${uri}" "${what}" "${result}" >&2
    # The stages are scripts/idp/fetch_jwks.py's; "output" is substrate_facts.py's for a pod that printed none.
    case "${result}" in
      trust:*) IDP_PROBLEM="the smoke pod found no usable CA in ${what} (above): kubectl --context ${KUBE_CONTEXT} get clustertrustbundles, or the ConfigMap's key ca.crt in mode configMap" ;;
      tls:*) IDP_PROBLEM="the IdP's certificate does not verify as ${uri%%/openid*} against ${what} (the handshake error is above). Check the certificate's names: if Service idp was created after the IdP's pod, FORCE_IDP_DEPLOY=1 bash scripts/up.sh substrate-idp restarts it with a certificate naming idp.ate-system.svc; if the chain itself is refused (Substrate's service-DNS CA is Ed25519), keep localJwks" ;;
      connect:*) IDP_PROBLEM="nothing answered at ${uri} from inside the cluster (above): kubectl --context ${KUBE_CONTEXT} -n ate-system get svc,endpointslices -l app.kubernetes.io/name=ate-idp-server" ;;
      http:* | jwks:*) IDP_PROBLEM="the IdP answered, but not with a usable key set (above): kubectl --context ${KUBE_CONTEXT} -n ate-system logs deploy/ate-idp-server" ;;
      *) IDP_PROBLEM="the smoke pod ${namespace}/${SMOKE_POD} ended (${WAITED}) without a result, before it reached the IdP (above): it has ${SMOKE_DEADLINE_SECONDS}s to pull ${SMOKE_IMAGE} and run" ;;
    esac
    return 0
  fi
  expected="$(signing_kids "${design}")" || die "cannot read the actor signing keys in ate-system (above)"
  if [[ "${result}" != "${expected}" ]]; then
    IDP_PROBLEM="the IdP serves key ids [${result}] but actor JWTs are signed with [${expected}]: tokens signed with a key it lacks would get 401 (it rereads its keys within a minute; run make up again, or see kubectl --context ${KUBE_CONTEXT} -n ate-system logs deploy/ate-idp-server)"
    return 0
  fi
  info "smoke check: ${uri} verified against ${what} (hostname checked) and serves the signing keys [${result}]"
}

# request_idp_fallback REASON: records that Envoy Gateway cannot use the IdP; step pulumi-stack switches the
# dev stack to substrate.trust.mode localJwks and step jwks-sync fills its ConfigMap.
request_idp_fallback() {
  mkdir -p "${BUILD_DIR}"
  printf '%s\n' "$1" >"${IDP_FALLBACK_FILE}"
  warn "FALLBACK: Envoy Gateway cannot use Substrate's IdP: $1"
  warn "FALLBACK: step pulumi-stack switches stack ${PULUMI_STACK} to substrate.trust.mode localJwks (Pulumi.${PULUMI_STACK}.yaml), and step jwks-sync copies the actor keys into a ConfigMap beside the SecurityPolicy. Keys Substrate rotates later are not seen until: bash scripts/up.sh jwks-sync"
}

step_substrate_idp() {
  step "Substrate's IdP: ate-idp-server behind Service idp in ate-system"
  require_substrate_checkout
  rm -f "${IDP_FALLBACK_FILE}"
  IDP_PROBLEM=""
  read_idp_settings
  local design
  if [[ "${SUBSTRATE_IDP_DEPLOYED_SEPARATELY:-0}" == "1" ]]; then
    info "deployed separately (SUBSTRATE_IDP_DEPLOYED_SEPARATELY=1): not deploying it, checking it"
    require_idp_ready
    design=pool
  else
    idp_design
    design="${IDP_DESIGN}"
    case "${design}" in
      installer)
        info "deployed by Substrate's own installer (${IDP_DESIGN_WHY}): not deploying ours"
        require_idp_ready
        design=pool
        ;;
      pool | jwks-file)
        deploy_idp "${design}"
        if [[ -n "${IDP_PROBLEM}" ]]; then
          request_idp_fallback "${IDP_PROBLEM}"
          return 0
        fi
        ;;
      *)
        request_idp_fallback "Substrate ${SUBSTRATE_REF} has no IdP make up can deploy (${IDP_DESIGN_WHY})"
        return 0
        ;;
    esac
  fi
  idp_smoke_check "${design}"
  if [[ -n "${IDP_PROBLEM}" ]]; then
    request_idp_fallback "${IDP_PROBLEM}"
  fi
}

# --- probe-image ---------------------------------------------------------------------------------

step_probe_image() {
  step "Probe agent image ${PROBE_IMAGE_REPO}:${PROBE_IMAGE_TAG}"
  local tag="${PROBE_IMAGE_REPO}:${PROBE_IMAGE_TAG}" ref
  docker build --quiet --tag "${tag}" "${AB_ROOT}/probe" >/dev/null
  docker push --quiet "${tag}" >/dev/null
  ref="$(docker inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "${tag}" |
    grep "^${PROBE_IMAGE_REPO}@sha256:" | head -n1 || true)"
  [[ -n "${ref}" ]] || die "pushed ${tag} but docker reports no digest for it"
  mkdir -p "${BUILD_DIR}"
  printf '%s\n' "${ref}" >"${PROBE_REF_FILE}"
  info "pushed ${ref}"
}

# --- demo-actors ---------------------------------------------------------------------------------

worker_image_field() {
  local crd
  crd="$(grep -rlF 'name: workerpools.ate.dev' "${SUBSTRATE_SRC}/manifests" 2>/dev/null | head -n1 || true)"
  [[ -n "${crd}" ]] || die "no WorkerPool CRD under ${SUBSTRATE_SRC}/manifests"
  if grep -q ' workerImage:' "${crd}"; then
    echo workerImage
  elif grep -q ' ateomImage:' "${crd}"; then
    echo ateomImage
  else
    die "the WorkerPool CRD in ${crd} has neither workerImage nor ateomImage"
  fi
}

# ate_delete_any_state: true when the pinned kubectl-ate's `delete actor` has --any-state (newer builds
# delete an actor whatever its state; older ones need it suspended first).
ate_delete_any_state() { kate delete actor --help 2>&1 | facts has-flag --any-state; }

delete_actor_if_present() {
  local actor="$1"
  kate get actors "${actor}" -a "${ATESPACE}" >/dev/null 2>&1 || return 0
  if ate_delete_any_state; then
    kate delete actor "${actor}" -a "${ATESPACE}" --any-state >/dev/null
  else
    if ! actor_is "${actor}" SUSPENDED; then
      kate suspend actor "${actor}" -a "${ATESPACE}" >/dev/null 2>&1 || true
      wait_until 300 "actor ${ATESPACE}/${actor} to suspend (this kubectl-ate has no delete actor --any-state; delete it by hand, or pin a newer Substrate)" \
        actor_is "${actor}" SUSPENDED
    fi
    kate delete actor "${actor}" -a "${ATESPACE}" >/dev/null
  fi
  # shellcheck disable=SC2016 # the inner script expands its own positional parameters
  wait_until 120 "actor ${ATESPACE}/${actor} to be deleted" bash -c '! "$0" --context "$1" get actors "$2" -a "$3"' \
    "${BIN_DIR}/kubectl-ate" "${KUBE_CONTEXT}" "${actor}" "${ATESPACE}"
}

# workerpool_progress: prints "<ready>/<wanted> worker pods ready, ..." and succeeds once the WorkerPool's own
# status and its pods (label ate.dev/worker-pool) say every worker is up. Its Deployment is not consulted:
# the controller named it <pool>-deployment in older versions and <pool> in newer ones.
workerpool_progress() {
  local pool pods
  pool="$(kctl -n "${WORKER_NAMESPACE}" get workerpool "${WORKER_POOL}" -o json 2>/dev/null || true)"
  pods="$(kctl -n "${WORKER_NAMESPACE}" get pods -l "ate.dev/worker-pool=${WORKER_POOL}" -o json 2>/dev/null || true)"
  printf '{"pool": %s, "pods": %s}' "${pool:-null}" "${pods:-null}" | facts workerpool
}

wait_worker_pool() {
  wait_until "$1" "worker pool ${WORKER_NAMESPACE}/${WORKER_POOL} (kubectl --context ${KUBE_CONTEXT} -n ${WORKER_NAMESPACE} get workerpool,pods)" \
    workerpool_progress
  info "worker pool ${WORKER_NAMESPACE}/${WORKER_POOL}: ${WAITED}"
}

wait_template_golden() {
  local deadline=$((SECONDS + 600)) state
  while :; do
    state="$(kate get actor-template "${ACTOR_TEMPLATE}" -a "${ATESPACE}" -o json 2>/dev/null | facts golden || true)"
    case "${state}" in
      ready) return 0 ;;
      error:*) die "the golden snapshot of actor template ${ATESPACE}/${ACTOR_TEMPLATE} failed: ${state#error: }" ;;
    esac
    ((SECONDS < deadline)) ||
      die "timed out after 600s waiting for the golden snapshot of ${ATESPACE}/${ACTOR_TEMPLATE} (kubectl --context ${KUBE_CONTEXT} -n ${WORKER_NAMESPACE} get pods)"
    sleep 5
  done
}

ensure_actor_template() {
  local image="$1" manifest current
  local snapshot
  snapshot="$(facts snapshot-block "${SUBSTRATE_SRC}" "gs://${SNAPSHOT_BUCKET}/agent-budgets/" "${SUBSTRATE_REF}")" ||
    die "cannot write an ActorTemplate for Substrate ${SUBSTRATE_REF} (above)"
  manifest="$(PROBE_IMAGE="${image}" SNAPSHOT_BLOCK="${snapshot}" render_template "${AB_ROOT}/probe/actor-template.yaml.tmpl")"
  if current="$(kate get actor-template "${ACTOR_TEMPLATE}" -a "${ATESPACE}" -o json 2>/dev/null)"; then
    if facts images <<<"${current}" | grep -qxF "${image}"; then
      info "actor template ${ATESPACE}/${ACTOR_TEMPLATE} exists with ${image}: keeping it"
      return 0
    fi
    warn "the probe image changed: templates are immutable, so the template and the demo actors are recreated (pulumi up --refresh restores their egress policies)"
    local actor
    for actor in "${ALL_DEMO_ACTORS[@]}"; do
      delete_actor_if_present "${actor}"
    done
    kate delete actor-template "${ACTOR_TEMPLATE}" -a "${ATESPACE}" >/dev/null
  fi
  printf '%s\n' "${manifest}" | kate create actor-template -f - >/dev/null ||
    die "kubectl ate create actor-template failed: if it names an unknown field, compare probe/actor-template.yaml.tmpl with ${SUBSTRATE_SRC}/demos/counter/counter-template.yaml.tmpl at ${SUBSTRATE_REF}"
  info "created actor template ${ATESPACE}/${ACTOR_TEMPLATE} (${image})"
}

step_demo_actors() {
  step "Demo atespace ${ATESPACE}: worker pool, probe-agent template, actors (suspended)"
  require_substrate_checkout
  [[ -x "${BIN_DIR}/kubectl-ate" ]] || die "kubectl-ate not built: run scripts/up.sh substrate-install first"
  [[ -s "${PROBE_REF_FILE}" ]] || die "no probe image pushed yet: run scripts/up.sh probe-image first"
  # Values the two manifests under probe/ take (render_template reads the environment).
  export ATESPACE ACTOR_TEMPLATE WORKER_LABEL SNAPSHOT_BUCKET WORKER_NAMESPACE WORKER_POOL WORKER_REPLICAS
  local probe_image worker_image field
  probe_image="$(<"${PROBE_REF_FILE}")"
  field="$(worker_image_field)"
  worker_image="$(ko_build_image ateom-gvisor)"

  WORKER_IMAGE_FIELD="${field}" WORKER_IMAGE="${worker_image}" \
    render_template "${AB_ROOT}/probe/worker-pool.yaml.tmpl" | kctl apply -f - >/dev/null
  wait_worker_pool 420

  if kate get atespaces "${ATESPACE}" >/dev/null 2>&1; then
    info "atespace ${ATESPACE} exists"
  else
    kate create atespace "${ATESPACE}" >/dev/null
    info "created atespace ${ATESPACE}"
  fi
  ensure_actor_template "${probe_image}"
  info "waiting for the golden snapshot of ${ATESPACE}/${ACTOR_TEMPLATE} (the first one downloads runsc)"
  wait_template_golden

  local actor
  for actor in "${ALL_DEMO_ACTORS[@]}"; do
    if kate get actors "${actor}" -a "${ATESPACE}" >/dev/null 2>&1; then
      info "actor ${ATESPACE}/${actor} exists ($(actor_state "${actor}"))"
    else
      kate create actor "${actor}" -a "${ATESPACE}" --template "${ACTOR_TEMPLATE}" >/dev/null
      info "created actor ${ATESPACE}/${actor} (suspended)"
    fi
  done
}

# --- pulumi-stack / pulumi-up --------------------------------------------------------------------

step_pulumi_stack() {
  step "Pulumi: file backend ${PULUMI_BACKEND#file://"${AB_ROOT}"/} and stack ${PULUMI_STACK}"
  mkdir -p "${STATE_DIR}"
  pulumi login "${PULUMI_BACKEND}" >/dev/null
  (
    cd "${AB_ROOT}"
    pulumi stack select "${PULUMI_STACK}" --create --secrets-provider passphrase --non-interactive >/dev/null
  )
  info "logged in to ${PULUMI_BACKEND}; stack ${PULUMI_STACK} selected (dev passphrase from scripts/versions.env unless PULUMI_CONFIG_PASSPHRASE is set)"
  if [[ "${IDENTITY}" == substrate ]]; then
    apply_idp_trust_decision
  fi
}

TRUST_MODE_KEY="agent-budgets:substrate.trust.mode"

stack_config() { (cd "${AB_ROOT}" && pulumi config "$@" --stack "${PULUMI_STACK}" --non-interactive); }

# apply_idp_trust_decision: what step substrate-idp found, written into the stack. Switched to localJwks
# when the IdP cannot be used (the mode it replaced is kept in build/); switched back once it can.
apply_idp_trust_decision() {
  local mode previous
  mode="$(stack_value substrate.trust.mode)" || die "cannot read substrate.trust.mode of stack ${PULUMI_STACK} (above)"
  if [[ -s "${IDP_FALLBACK_FILE}" ]]; then
    if [[ "${mode}" == localJwks ]]; then
      info "substrate.trust.mode is localJwks already (the IdP cannot be used: $(<"${IDP_FALLBACK_FILE}"))"
      return 0
    fi
    previous="$(stack_config get --path "${TRUST_MODE_KEY}" 2>/dev/null || true)"
    printf '%s\n' "${previous}" >"${IDP_SWITCH_FILE}"
    stack_config set --path "${TRUST_MODE_KEY}" localJwks >/dev/null
    warn "SWITCHED stack ${PULUMI_STACK} from substrate.trust.mode ${mode} to localJwks (Pulumi.${PULUMI_STACK}.yaml changed): $(<"${IDP_FALLBACK_FILE}")"
    warn "localJwks: Envoy Gateway verifies actor JWTs with a copy of Substrate's public keys (step jwks-sync), never with the IdP; once the IdP passes its smoke check, make up switches back to ${mode}"
  elif [[ -f "${IDP_SWITCH_FILE}" && "${mode}" == localJwks ]]; then
    previous="$(<"${IDP_SWITCH_FILE}")"
    if [[ -n "${previous}" ]]; then
      stack_config set --path "${TRUST_MODE_KEY}" "${previous}" >/dev/null
    else
      stack_config rm --path "${TRUST_MODE_KEY}" >/dev/null
    fi
    rm -f "${IDP_SWITCH_FILE}"
    warn "SWITCHED stack ${PULUMI_STACK} back from substrate.trust.mode localJwks to $(stack_value substrate.trust.mode) (Pulumi.${PULUMI_STACK}.yaml changed): the IdP passed its smoke check"
  else
    rm -f "${IDP_SWITCH_FILE}"
  fi
}

step_pulumi_up() {
  step "pulumi up (stack ${PULUMI_STACK})"
  (
    cd "${AB_ROOT}"
    # --refresh: converge with what the cluster really holds (e.g. egress policies removed with a
    # recreated actor, or a cluster recreated under an old state).
    pulumi up --yes --refresh --stack "${PULUMI_STACK}" --non-interactive
  )
  # No restart of envoy-ratelimit: Envoy Gateway pushes a changed policy to it over xDS
  # (docs/environments.md#how-long-a-change-takes).
}

# --- jwks-sync -----------------------------------------------------------------------------------

# actor_jwks FILE: writes Substrate's actor JWKS to FILE and prints where it came from: ConfigMap
# ate-system/actor-id-jwks (key jwks.json) when ate-controller publishes it, else the public keys of the signing
# pool Secret actor-id-jwt-pool, the set the pool-design IdP serves (the private keys never leave the pipe).
actor_jwks() {
  local file="$1"
  if kctl -n ate-system get configmap actor-id-jwks -o json 2>/dev/null | facts config-map-value jwks.json >"${file}" 2>/dev/null; then
    echo "ConfigMap ate-system/actor-id-jwks"
  elif kctl -n ate-system get secret actor-id-jwt-pool -o json 2>/dev/null | facts pool-jwks pool >"${file}"; then
    echo "the public keys of Secret ate-system/actor-id-jwt-pool"
  else
    return 1
  fi
}

# How long Envoy Gateway may take to accept the SecurityPolicy once its ConfigMap is filled.
POLICY_ACCEPT_SECONDS="${POLICY_ACCEPT_SECONDS:-90}"

jwt_policy_accepted() {
  kctl -n "$1" get securitypolicy -l app.kubernetes.io/part-of=agent-budgets -o json | facts policy-accepted
}

# publish_jwks NAMESPACE CONFIG_MAP FILE WHAT SOURCE: the public key set in FILE (removed afterwards) copied into
# the ConfigMap a SecurityPolicy's localJWKS reads (key jwks), then a wait for Envoy Gateway to accept the
# agent-budgets SecurityPolicies. WHAT names the keys and SOURCE where they came from, for the messages.
publish_jwks() {
  local namespace="$1" config_map="$2" file="$3" what="$4" source="$5" kids
  if ! kids="$(facts jwks-kids <"${file}")"; then
    rm -f "${file}"
    die "the key set from ${source} is not usable (above)"
  fi
  kctl -n "${namespace}" create configmap "${config_map}" --from-file=jwks="${file}" --dry-run=client -o yaml |
    kctl apply -f - >/dev/null
  rm -f "${file}"
  info "copied ${what} (key ids ${kids}) from ${source} into ConfigMap ${namespace}/${config_map}, key jwks"
  # Nothing calls before this passes (resume-actors or agent-pods comes next): on the first run the SecurityPolicy
  # has named a missing ConfigMap since pulumi up, and Envoy Gateway answered its routes with 500.
  wait_until "${POLICY_ACCEPT_SECONDS}" "Envoy Gateway to accept the SecurityPolicy in ${namespace} with these keys (kubectl --context ${KUBE_CONTEXT} -n ${namespace} get securitypolicy -o yaml)" \
    jwt_policy_accepted "${namespace}"
  info "Envoy Gateway accepted the SecurityPolicy with these keys (${WAITED})"
}

step_jwks_sync() {
  step "Actor keys for substrate.trust.mode localJwks"
  local settings mode namespace config_map
  mapfile -t settings < <(stack_value substrate.trust.mode gateway.namespace substrate.trust.jwksConfigMap)
  ((${#settings[@]} == 3)) || die "cannot read the settings of stack ${PULUMI_STACK} (above)"
  mode="${settings[0]}" namespace="${settings[1]}" config_map="${settings[2]}"
  if [[ "${mode}" != localJwks ]]; then
    info "stack ${PULUMI_STACK} uses substrate.trust.mode ${mode}: Envoy Gateway fetches the keys from the IdP, nothing to copy"
    return 0
  fi
  kctl get namespace "${namespace}" >/dev/null 2>&1 ||
    die "namespace ${namespace} does not exist yet: pulumi up creates it (bash scripts/up.sh pulumi-up jwks-sync)"
  local file source
  file="$(mktemp)"
  if ! source="$(actor_jwks "${file}")"; then
    rm -f "${file}"
    die "no actor keys in ate-system (neither ConfigMap actor-id-jwks nor Secret actor-id-jwt-pool): is Substrate installed? (bash scripts/up.sh substrate-install)"
  fi
  publish_jwks "${namespace}" "${config_map}" "${file}" "the actor JWKS" "${source}"
  warn "localJwks: when Substrate rotates its signing keys, calls get 401 until this copy is refreshed: bash scripts/up.sh jwks-sync"
}

# --- service-account-keys (IDENTITY=kubernetes) --------------------------------------------------

# has_source SOURCES_JSON NAME: whether the stack's identity.sources (stack_value prints them as JSON) has NAME.
has_source() { [[ "$1" == *"\"$2\""* ]]; }

step_service_account_keys() {
  step "Service-account keys for identity.kubernetes.jwks configMap"
  local settings sources jwks issuer namespace config_map
  mapfile -t settings < <(stack_value identity.sources identity.kubernetes.jwks identity.kubernetes.issuer \
    gateway.namespace identity.kubernetes.jwksConfigMap)
  ((${#settings[@]} == 5)) || die "cannot read the settings of stack ${PULUMI_STACK} (above)"
  sources="${settings[0]}" jwks="${settings[1]}" issuer="${settings[2]}" namespace="${settings[3]}" config_map="${settings[4]}"
  if ! has_source "${sources}" kubernetes; then
    info "stack ${PULUMI_STACK} does not accept service accounts (identity.sources ${sources}): nothing to copy"
    return 0
  fi
  # The provider matches a token by its iss; a cluster with another --service-account-issuer would give 401.
  local served
  served="$(kctl get --raw /.well-known/openid-configuration | facts oidc-issuer)" ||
    die "cannot read the service-account issuer of ${KUBE_CONTEXT} (GET /.well-known/openid-configuration, above)"
  [[ "${served}" == "${issuer}" ]] ||
    die "the cluster's service-account issuer is ${served}, but stack ${PULUMI_STACK} expects ${issuer}: set agent-budgets:identity.kubernetes.issuer to ${served} in Pulumi.${PULUMI_STACK}.yaml, then run make up IDENTITY=kubernetes again"
  info "the cluster's service-account issuer is ${served}, as identity.kubernetes.issuer says"
  if [[ "${jwks}" != configMap ]]; then
    info "identity.kubernetes.jwks is ${jwks}: Envoy Gateway fetches the keys itself, nothing to copy"
    return 0
  fi
  kctl get namespace "${namespace}" >/dev/null 2>&1 ||
    die "namespace ${namespace} does not exist yet: pulumi up creates it (${UP} pulumi-up service-account-keys)"
  local file
  file="$(mktemp)"
  if ! kctl get --raw /openid/v1/jwks >"${file}"; then
    rm -f "${file}"
    die "cannot read the service-account signing keys of ${KUBE_CONTEXT} (GET /openid/v1/jwks, above)"
  fi
  publish_jwks "${namespace}" "${config_map}" "${file}" "the service-account public keys" "/openid/v1/jwks"
  warn "jwks configMap: when the cluster rotates its service-account signing key, tokens signed with the new key get 401 until this copy is refreshed: ${UP} service-account-keys"
}

# --- agent-pods (IDENTITY=kubernetes) ------------------------------------------------------------

# stack_output NAME: one output of the stack (`pulumi up` must have run).
stack_output() { (cd "${AB_ROOT}" && pulumi stack output "$1" --stack "${PULUMI_STACK}" --non-interactive); }

agent_secret_name() { printf '%s-api-key\n' "${API_KEY_AGENT}"; }

step_agent_pods() {
  step "Agent pods in namespace ${AGENT_NAMESPACE}: probe agents with a service-account token or an API key"
  [[ -s "${PROBE_REF_FILE}" ]] || die "no probe image pushed yet: run ${UP} probe-image first"
  local settings sources audience namespace
  mapfile -t settings < <(stack_value identity.sources identity.kubernetes.audience gateway.namespace)
  ((${#settings[@]} == 3)) || die "cannot read the settings of stack ${PULUMI_STACK} (above)"
  sources="${settings[0]}" audience="${settings[1]}" namespace="${settings[2]}"
  local args=(manifests --namespace "${AGENT_NAMESPACE}" --image "$(<"${PROBE_REF_FILE}")"
    --token-audience "${audience}" --token-seconds "${SERVICE_ACCOUNT_TOKEN_SECONDS}")
  local pod_agents=() url
  if has_source "${sources}" kubernetes; then
    url="$(stack_output gatewayUrl)" || die "stack ${PULUMI_STACK} has no output gatewayUrl: run ${UP} pulumi-up first"
    args+=(--jwt-url "${url}" --service-accounts "${SERVICE_ACCOUNT_AGENT_LIST[@]}" "${UNLISTED_AGENT}")
    pod_agents+=("${SERVICE_ACCOUNT_AGENT_LIST[@]}" "${UNLISTED_AGENT}")
  fi
  if has_source "${sources}" apiKeys; then
    url="$(stack_output apiKeyGatewayUrl)" || die "stack ${PULUMI_STACK} has no output apiKeyGatewayUrl: run ${UP} pulumi-up first"
    args+=(--api-key-url "${url}" --api-key-agent "${API_KEY_AGENT}" --api-key-secret "$(agent_secret_name)")
    pod_agents+=("${API_KEY_AGENT}")
  fi
  ((${#pod_agents[@]} > 0)) || die "stack ${PULUMI_STACK} accepts neither service accounts nor API keys (identity.sources ${sources}): it has no agents for this environment"
  python3 "${AB_ROOT}/scripts/dev_agents.py" "${args[@]}" | kctl apply -f - >/dev/null ||
    die "cannot apply the agents (above)"
  if has_source "${sources}" apiKeys; then
    # The agent's own copy of its key, straight from the program's Secret: the key passes through the pipe only.
    local program_secret="agent-budgets-api-key-${API_KEY_AGENT}"
    kctl -n "${namespace}" get secret "${program_secret}" -o json |
      python3 "${AB_ROOT}/scripts/dev_agents.py" api-key-secret --namespace "${AGENT_NAMESPACE}" --name "$(agent_secret_name)" |
      kctl apply -f - >/dev/null ||
      die "cannot copy Secret ${namespace}/${program_secret} into ${AGENT_NAMESPACE}/$(agent_secret_name): is apikey:${API_KEY_AGENT} in agent-budgets:actors of stack ${PULUMI_STACK}?"
    info "Secret ${AGENT_NAMESPACE}/$(agent_secret_name): the key of apikey:${API_KEY_AGENT}, copied from ${namespace}/${program_secret}"
  fi
  local pod_agent
  for pod_agent in "${pod_agents[@]}"; do
    kctl -n "${AGENT_NAMESPACE}" rollout status "deployment/probe-${pod_agent}" --timeout=180s >/dev/null ||
      die "the probe agent ${AGENT_NAMESPACE}/probe-${pod_agent} did not become ready: kubectl --context ${KUBE_CONTEXT} -n ${AGENT_NAMESPACE} describe pods"
    info "probe-${pod_agent}: ready"
  done
}

# --- resume-actors -------------------------------------------------------------------------------

step_resume_actors() {
  step "Resuming the demo actors (their egress policies exist now)"
  [[ -x "${BIN_DIR}/kubectl-ate" ]] || die "kubectl-ate not built: run scripts/up.sh substrate-install first"
  local actor policy
  for actor in "${DEMO_ACTOR_LIST[@]}"; do
    policy="$(kate get egress-policy "${actor}" -a "${ATESPACE}" -o json 2>/dev/null || true)"
    [[ "$(facts has-rules <<<"${policy}")" == yes ]] ||
      die "actor ${ATESPACE}/${actor} has no egress policy: pulumi up should have created it (is it in agent-budgets:actors?)"
  done
  policy="$(kate get egress-policy "${NOEGRESS_ACTOR}" -a "${ATESPACE}" -o json 2>/dev/null || true)"
  if [[ "$(facts has-rules <<<"${policy}")" == yes ]]; then
    warn "${ATESPACE}/${NOEGRESS_ACTOR} has an egress policy; e2e check 4 expects it to have none"
  fi
  for actor in "${ALL_DEMO_ACTORS[@]}"; do
    kate resume actor "${actor}" -a "${ATESPACE}" >/dev/null
  done
  for actor in "${ALL_DEMO_ACTORS[@]}"; do
    wait_until 300 "actor ${ATESPACE}/${actor} to run" actor_is "${actor}" RUNNING
    info "actor ${ATESPACE}/${actor}: RUNNING"
  done
}

# --- smoke ---------------------------------------------------------------------------------------

# probe_ready PORT [TARGET]: the probe agent behind 127.0.0.1:PORT answers /readyz (through atenet-router when
# TARGET, an ate-target-actor value, is given).
probe_ready() {
  python3 -c '
import sys, urllib.request
port, target = sys.argv[1], sys.argv[2:]
headers = {"ate-target-actor": target[0]} if target else {}
request = urllib.request.Request(f"http://127.0.0.1:{port}/readyz", headers=headers)
with urllib.request.urlopen(request, timeout=30) as reply:
    sys.exit(0 if reply.status == 200 else 1)
' "$@"
}

step_smoke() {
  if [[ "${IDENTITY}" == kubernetes ]]; then
    smoke_agent_pods
    return 0
  fi
  step "Smoke test: each probe agent answers through atenet-router"
  port_forward_start ate-system atenet-router 80
  trap port_forward_stop EXIT
  local actor
  for actor in "${ALL_DEMO_ACTORS[@]}"; do
    probe_ready "${PF_PORT}" "${ATESPACE}/${actor}" ||
      die "the probe agent in ${ATESPACE}/${actor} does not answer through atenet-router"
    info "${ATESPACE}/${actor}: probe agent ready"
  done
  port_forward_stop
  trap - EXIT
  info "no model call was made (it would spend budget); run make e2e for the checks"
}

smoke_agent_pods() {
  step "Smoke test: each agent pod's probe answers (through a port-forward to its Service)"
  local services=() service
  mapfile -t services < <(kctl -n "${AGENT_NAMESPACE}" get services -l app.kubernetes.io/name=probe-agent -o name)
  ((${#services[@]} > 0)) || die "no agent pods in ${AGENT_NAMESPACE}: run ${UP} agent-pods first"
  trap port_forward_stop EXIT
  for service in "${services[@]}"; do
    service="${service#service/}"
    port_forward_start "${AGENT_NAMESPACE}" "${service}" 8080
    probe_ready "${PF_PORT}" || die "the probe agent behind ${AGENT_NAMESPACE}/${service} does not answer /readyz"
    port_forward_stop
    info "${AGENT_NAMESPACE}/${service}: probe agent ready"
  done
  trap - EXIT
  info "no model call was made (it would spend budget); run make e2e IDENTITY=kubernetes for the checks"
}

# --- main ----------------------------------------------------------------------------------------

run_step() {
  local started=${SECONDS}
  [[ " ${STEPS[*]} " == *" $1 "* ]] ||
    die "step '$1' is not part of the IDENTITY=${IDENTITY} environment (its steps: ${STEPS[*]})"
  case "$1" in
    check-prereqs) step_check_prereqs ;;
    kind-cluster) step_kind_cluster ;;
    substrate-source) step_substrate_source ;;
    substrate-install) step_substrate_install ;;
    substrate-idp) step_substrate_idp ;;
    probe-image) step_probe_image ;;
    demo-actors) step_demo_actors ;;
    pulumi-stack) step_pulumi_stack ;;
    pulumi-up) step_pulumi_up ;;
    jwks-sync) step_jwks_sync ;;
    service-account-keys) step_service_account_keys ;;
    agent-pods) step_agent_pods ;;
    resume-actors) step_resume_actors ;;
    smoke) step_smoke ;;
    *) die "unknown step '$1' (steps: ${STEPS[*]})" ;;
  esac
  info "($1: $((SECONDS - started))s)"
}

main() {
  local steps=("$@")
  if ((${#steps[@]} == 0)); then
    steps=("${STEPS[@]}")
  fi
  local name
  for name in "${steps[@]}"; do
    run_step "${name}"
  done
  if ((${#steps[@]} == ${#STEPS[@]})) || [[ "${steps[${#steps[@]} - 1]}" == smoke ]]; then
    if [[ "${IDENTITY}" == kubernetes ]]; then
      step "Dev environment ready (no Substrate): context ${KUBE_CONTEXT}, stack ${PULUMI_STACK}. Next: make e2e IDENTITY=kubernetes"
    else
      step "Dev environment ready: context ${KUBE_CONTEXT}, stack ${PULUMI_STACK}. Next: make e2e"
    fi
    if [[ "${IDENTITY}" == substrate && -s "${IDP_FALLBACK_FILE}" ]]; then
      warn "running WITHOUT Substrate's IdP (substrate.trust.mode localJwks): $(<"${IDP_FALLBACK_FILE}")"
    fi
  fi
}

# Sourced instead of run (the tests call single functions), it only defines them.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
