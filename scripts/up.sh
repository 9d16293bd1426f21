#!/usr/bin/env bash
# make up: bring the agent-budgets dev environment up, or converge an existing one.
#
#   scripts/up.sh               every step below, in order
#   scripts/up.sh STEP [STEP]   only the named steps (the Makefile's `up` recipe lists them one per
#                               line, so `make -n up` shows the whole sequence)
#
# Steps: check-prereqs kind-cluster substrate-source substrate-install probe-image demo-actors
#        pulumi-stack pulumi-up resume-actors smoke
# Every step is safe to re-run: what exists is checked and kept, what is missing is created.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STEPS=(check-prereqs kind-cluster substrate-source substrate-install probe-image demo-actors
  pulumi-stack pulumi-up resume-actors smoke)

# --- check-prereqs -------------------------------------------------------------------------------

step_check_prereqs() {
  step "Checking prerequisites"
  local ok=0
  missing_tool docker "Docker Engine or Docker Desktop: https://docs.docker.com/get-docker/" || ok=1
  missing_tool kind "kind >= v${KIND_MIN_VERSION}: https://kind.sigs.k8s.io/docs/user/quick-start/#installation" || ok=1
  missing_tool kubectl "https://kubernetes.io/docs/tasks/tools/" || ok=1
  missing_tool go "Go, to build Substrate from source: https://go.dev/dl/" || ok=1
  missing_tool git "https://git-scm.com/downloads" || ok=1
  missing_tool pulumi "the Pulumi CLI: https://www.pulumi.com/docs/iac/download-install/ (no account needed)" || ok=1
  missing_tool python3 "Python 3.11+: https://www.python.org/downloads/" || ok=1
  if have docker && ! docker buildx version >/dev/null 2>&1; then
    printf 'missing: docker buildx (Substrate builds its envoy-dataplane image with it: https://docs.docker.com/build/buildx/)\n' >&2
    ok=1
  fi
  ((ok == 0)) || die "install the tools listed above, then run make up again"

  docker info >/dev/null 2>&1 || die "docker is installed but its daemon is not reachable (docker info failed): start Docker"
  local kind_version
  kind_version="$(kind version 2>/dev/null | awk '{print $2}')"
  version_ge "${kind_version:-0}" "${KIND_MIN_VERSION}" ||
    die "kind ${kind_version:-unknown} is too old: Substrate needs kind >= v${KIND_MIN_VERSION} (scripts/versions.env)"
  [[ -f "${AB_ROOT}/Pulumi.yaml" ]] || die "Pulumi.yaml not found in ${AB_ROOT}"
  [[ -x "${AB_ROOT}/venv/bin/python" ]] || die "the Pulumi program's venv is missing: run make venv (make up does it first)"
  info "docker, kind ${kind_version}, kubectl, go, git, pulumi, python3: ok"
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
    local args=(create cluster --name "${KIND_CLUSTER}" --config "${AB_ROOT}/scripts/kind-config.yaml" --wait 180s)
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

  # What Substrate needs from the cluster itself; a cluster made some other way may lack it.
  kctl get --raw /apis/certificates.k8s.io/v1beta1 >/dev/null 2>&1 ||
    die "${KIND_CLUSTER} does not serve certificates.k8s.io/v1beta1: it was not created from scripts/kind-config.yaml; run make down, then make up"
  local resources
  resources="$(kctl api-resources --api-group=certificates.k8s.io -o name 2>/dev/null || true)"
  local resource
  for resource in clustertrustbundles podcertificaterequests; do
    grep -q "^${resource}\." <<<"${resources}" ||
      die "${KIND_CLUSTER} has no ${resource} API (feature gates ClusterTrustBundle/PodCertificateRequest off, or the Kubernetes version predates them); run make down, then make up"
  done

  local node registry_dir="/etc/containerd/certs.d/localhost:${REGISTRY_PORT}"
  for node in $(kind get nodes --name "${KIND_CLUSTER}"); do
    # gVisor sandboxes reach pods on the same node through proxy ARP; a node restart resets it.
    docker exec "${node}" sysctl -w net.ipv4.conf.all.proxy_arp=1 >/dev/null
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
  info "context ${KUBE_CONTEXT}: feature gates on, certificates.k8s.io/v1beta1 served, proxy_arp set, registry localhost:${REGISTRY_PORT} wired"
}

# --- substrate-source ----------------------------------------------------------------------------

verify_substrate_features() {
  local src="${SUBSTRATE_SRC}" missing=()
  [[ -d "${src}/cmd/ate-setup" ]] || missing+=("cmd/ate-setup (Substrate's installer)")
  [[ -d "${src}/cmd/kubectl-ate" ]] || missing+=("cmd/kubectl-ate")
  [[ -d "${src}/cmd/ate-idp-server" ]] || missing+=("cmd/ate-idp-server (the IdP that publishes the actor JWKS)")
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
  # The IdP binary alone is not enough: ate-setup must deploy it (Service idp), or every actor call gets 401.
  # An IdP deployed by other means is declared with SUBSTRATE_IDP_DEPLOYED_SEPARATELY=1; substrate-install
  # then still requires Service idp in ate-system with a ready endpoint (require_idp_ready).
  if [[ "${SUBSTRATE_IDP_DEPLOYED_SEPARATELY:-0}" == "1" ]]; then
    info "IdP: deployed separately (SUBSTRATE_IDP_DEPLOYED_SEPARATELY=1); substrate-install checks that Service idp serves"
  else
    facts idp-install "${src}" "${SUBSTRATE_REF}" >/dev/null ||
      die "Substrate ${SUBSTRATE_REF} cannot serve actor JWKS (above): pin a ref whose installer deploys ate-idp-server, or deploy it behind Service idp in ate-system yourself and run again with SUBSTRATE_IDP_DEPLOYED_SEPARATELY=1"
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
  if [[ -n "${SUBSTRATE_EXPECTED_COMMIT_PREFIX}" && "${commit}" != "${SUBSTRATE_EXPECTED_COMMIT_PREFIX}"* ]]; then
    warn "${SUBSTRATE_REF} is ${commit}, not ${SUBSTRATE_EXPECTED_COMMIT_PREFIX}… as recorded in scripts/versions.env (has the tag moved?)"
  fi
  verify_substrate_features
  info "${SUBSTRATE_REF} = ${commit}: installer, IdP (deployed by its manifests), actor JWT subject, http-rule JWT injection, a known ActorTemplate snapshot shape and guarded egress-policy writes present"
}

# --- substrate-install ---------------------------------------------------------------------------

substrate_commit() { git -C "${SUBSTRATE_SRC}" rev-parse HEAD; }

require_substrate_checkout() {
  [[ -d "${SUBSTRATE_SRC}/.git" ]] || die "no Substrate checkout: run scripts/up.sh substrate-source first"
}

substrate_installed() {
  local commit="$1" recorded
  recorded="$(kctl -n ate-system get configmap "${INSTALL_MARKER}" -o jsonpath='{.data.commit}' 2>/dev/null || true)"
  [[ "${recorded}" == "${commit}" ]] &&
    kctl -n ate-system wait --for=condition=Available deployment --all --timeout=60s >/dev/null 2>&1
}

# require_idp_ready: Service idp in ate-system with at least one ready endpoint, or an error. Without it
# Envoy Gateway cannot fetch the actor JWKS from https://idp.ate-system.svc and every actor call gets 401.
require_idp_ready() {
  local hint="kubectl --context ${KUBE_CONTEXT} -n ate-system get deploy,svc,endpointslices"
  kctl -n ate-system get service idp >/dev/null 2>&1 ||
    die "no Service idp in ate-system after the install: Substrate ${SUBSTRATE_REF}'s ate-setup did not deploy ate-idp-server, so every actor call would get 401. Pin a ref whose installer deploys it (SUBSTRATE_REF in scripts/versions.env), then FORCE_SUBSTRATE_INSTALL=1 make up (${hint})"
  wait_until 120 "a ready endpoint of Service idp in ate-system: until ate-idp-server serves, every actor call would get 401 (${hint}; its logs: kubectl --context ${KUBE_CONTEXT} -n ate-system logs deploy/ate-idp-server)" \
    idp_ready_endpoints
  info "Service idp in ate-system: ${WAITED} ready endpoint(s)"
}

# idp_ready_endpoints: prints how many ready endpoints Service idp in ate-system has; succeeds when any.
idp_ready_endpoints() {
  local ready
  ready="$(kctl -n ate-system get endpointslices -l kubernetes.io/service-name=idp -o json 2>/dev/null | facts ready-endpoints || echo 0)"
  echo "${ready}"
  ((ready > 0))
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
    require_idp_ready
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
  kctl -n ate-system wait --for=condition=Available deployment --all --timeout="${SUBSTRATE_ROLLOUT_TIMEOUT}" >/dev/null ||
    die "Substrate's deployments in ate-system are not Available: kubectl --context ${KUBE_CONTEXT} -n ate-system get pods"
  require_idp_ready
  kctl -n ate-system create configmap "${INSTALL_MARKER}" --from-literal=ref="${SUBSTRATE_REF}" \
    --from-literal=commit="${commit}" --dry-run=client -o yaml | kctl apply -f - >/dev/null
  info "Substrate ${SUBSTRATE_REF} installed"
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

# build_ateom_image: builds the gVisor worker image with the checkout's pinned ko; prints its ref.
build_ateom_image() {
  local module ko goarch
  module="$(awk '$1 == "module" {print $2; exit}' "${SUBSTRATE_SRC}/go.mod")"
  [[ -d "${SUBSTRATE_SRC}/cmd/ateom-gvisor" ]] || die "no cmd/ateom-gvisor in Substrate ${SUBSTRATE_REF}"
  ko="$(cd "${SUBSTRATE_SRC}/hack/tools/ko" && go tool -n ko)" ||
    die "cannot locate the ko tool pinned in ${SUBSTRATE_SRC}/hack/tools/ko"
  goarch="$(go env GOARCH)"
  local log ref
  log="$(mktemp)"
  if ! ref="$(cd "${SUBSTRATE_SRC}" && KO_DOCKER_REPO="localhost:${REGISTRY_PORT}" \
    KO_DEFAULTPLATFORMS="linux/${goarch}" "${ko}" build --base-import-paths "${module}/cmd/ateom-gvisor" 2>"${log}")"; then
    cat "${log}" >&2
    rm -f "${log}"
    die "ko build of ${module}/cmd/ateom-gvisor failed"
  fi
  rm -f "${log}"
  printf '%s\n' "${ref}" | tail -n1
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
  worker_image="$(build_ateom_image)"
  [[ "${worker_image}" == *@sha256:* ]] || die "ko did not print a digest for ateom-gvisor (got '${worker_image}')"

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
}

restart_ratelimit() {
  # The rate-limit service takes its rules over xDS; the upstream e2e restarts it after a policy change.
  if kctl -n envoy-gateway-system get deployment envoy-ratelimit >/dev/null 2>&1; then
    kctl -n envoy-gateway-system rollout restart deployment/envoy-ratelimit >/dev/null
    kctl -n envoy-gateway-system rollout status deployment/envoy-ratelimit --timeout=180s >/dev/null
    info "restarted deployment/envoy-ratelimit"
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
  restart_ratelimit
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

step_smoke() {
  step "Smoke test: each probe agent answers through atenet-router"
  port_forward_start ate-system atenet-router 80
  trap port_forward_stop EXIT
  local actor
  for actor in "${ALL_DEMO_ACTORS[@]}"; do
    python3 -c '
import sys, urllib.request
port, target = sys.argv[1], sys.argv[2]
request = urllib.request.Request(f"http://127.0.0.1:{port}/readyz", headers={"ate-target-actor": target})
with urllib.request.urlopen(request, timeout=30) as reply:
    sys.exit(0 if reply.status == 200 else 1)
' "${PF_PORT}" "${ATESPACE}/${actor}" || die "the probe agent in ${ATESPACE}/${actor} does not answer through atenet-router"
    info "${ATESPACE}/${actor}: probe agent ready"
  done
  port_forward_stop
  trap - EXIT
  info "no model call was made (it would spend budget); run make e2e for the checks"
}

# --- main ----------------------------------------------------------------------------------------

run_step() {
  local started=${SECONDS}
  case "$1" in
    check-prereqs) step_check_prereqs ;;
    kind-cluster) step_kind_cluster ;;
    substrate-source) step_substrate_source ;;
    substrate-install) step_substrate_install ;;
    probe-image) step_probe_image ;;
    demo-actors) step_demo_actors ;;
    pulumi-stack) step_pulumi_stack ;;
    pulumi-up) step_pulumi_up ;;
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
    step "Dev environment ready: context ${KUBE_CONTEXT}, stack ${PULUMI_STACK}. Next: make e2e"
  fi
}

main "$@"
