# agent-budgets: every entry point a user or CI needs. `make test` is the one command CI runs.
PYTHON ?= python3
VENV ?= venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt | cksum | cut -d' ' -f1)

.PHONY: help venv test lint tools unit up down e2e crds bench bench-e2e bench-egress docs spend bench-spend simulate \
	egress-orphans rig rig-checks rig-down

help:
	@echo "make test       lint, build the real upstream tools (when Go is present), run the whole unit suite"
	@echo "make tools      build the pinned upstream tools the suite runs (egctl, helm, promtool, pulumi, Envoy Gateway's chart)"
	@echo "make up         bring the dev environment up: kind, Substrate, pulumi up on a local backend"
	@echo "                IDENTITY=kubernetes: without Substrate (agents are pods with a service-account token or an API key)"
	@echo "make e2e        run the end-to-end checks against the live dev stack (IDENTITY=kubernetes: the Substrate-free one)"
	@echo "make bench-e2e  latency added by the full path, against the live dev stack"
	@echo "make bench      the program under mocks at 100 to 100,000 actors: seconds per step, 10k -> 100k ratio, targets"
	@echo "make spend      who spent what, who is near the limit, when it resets (STACK=dev, ARGS='--json ...')"
	@echo "make bench-spend  the spend report for 10,000 actors end to end and per step, against a local redis-server"
	@echo "make egress-orphans  egress policies in the stack's atespaces it does not own (STACK=dev, ARGS=--delete)"
	@echo "make bench-egress  egress-policy provider at 10,000 actors against a fake kubectl taking 0.3 s and 1 s a call"
	@echo "make simulate   each budget limit's worst case next to the fullest counter of 2,000 randomized runs"
	@echo "make crds       fetch the pinned upstream CRD files for the schema tests"
	@echo "make docs       regenerate the generated blocks of docs/ (configuration reference, outputs, message sizes, simulation)"
	@echo "make down       pulumi destroy, then delete the kind cluster"
	@echo "make rig        a real single-node cluster on this machine (root): builds what is missing, runs the node's checks"
	@echo "make rig-checks every live check that applies to the stack make rig deployed (root), into its report"
	@echo "make rig-down   remove every process, mount, cgroup, rule and namespace of the rig, and say what was removed"

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@if ls scripts/*.sh >/dev/null 2>&1; then $(BIN)/shellcheck scripts/*.sh; fi

# One pytest worker per CPU (pytest-xdist), each test file on one worker, so a module's shared fixtures run once.
unit: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadfile

# The real upstream tools the suite runs (rig/versions.toml), built from the Go module proxy into a cache outside the
# repository once, then reused (docs/development.md). Without `go` on the PATH, or when a build fails, the tests that
# need them skip; under CI=true either fails the run.
tools: $(STAMP)
	$(BIN)/python -m rig.build --for-tests

test: lint tools unit

bench: $(STAMP)
	$(BIN)/python scripts/bench_program.py

# The spend report of a stack (docs/spend.md): `make spend STACK=prod ARGS='--over 80'`. Quiet, so that
# `make -s spend ARGS=--json` prints nothing but the report. Plain `=`, not `?=`: a STACK or ARGS variable
# left in the shell's environment must not pick the stack; only the make command line does.
STACK = dev
ARGS =
spend: $(STAMP)
	@$(BIN)/python -m tools.spend --stack $(STACK) $(ARGS)

bench-spend: $(STAMP)
	$(BIN)/python scripts/bench_spend.py

# The egress policies in the stack's atespaces that it does not own (docs/egress-policies.md): a dry run, unless
# `make egress-orphans STACK=prod ARGS=--delete`. Same STACK and ARGS as spend above.
egress-orphans: $(STAMP)
	@$(BIN)/python -m tools.egress_orphans --stack $(STACK) $(ARGS)

# The table of docs/budgets.md ("The worst case, and how to bound it"): bounds vs a simulation of enforcement.
simulate: $(STAMP)
	$(BIN)/python scripts/simulate_enforcement.py

# Half an hour on two cores: every figure of docs/egress-policies.md ("Scale"), at both latencies.
bench-egress: $(STAMP)
	$(BIN)/python scripts/bench_egress.py --actors 10000 --latency 0.3 1.0

# Which dev environment `make up`, `make down`, `make e2e` and `make bench-e2e` work on (docs/dev-environment.md):
# substrate (the default) or kubernetes (no Substrate: agents are plain pods calling with a projected
# service-account token or an API key; its own kind cluster and stack dev-kubernetes). Plain `=` and exported, as
# STACK below: only the make command line picks it (`make up IDENTITY=kubernetes`), and every script sees it.
IDENTITY = substrate
export IDENTITY
ifeq ($(filter $(IDENTITY),substrate kubernetes),)
$(error IDENTITY=$(IDENTITY): use substrate (the default) or kubernetes)
endif

# One line per step (scripts/up.sh STEP), so `make -n up` shows the whole sequence; each is safe to re-run.
ifeq ($(IDENTITY),kubernetes)
up: $(STAMP)
	IDENTITY=kubernetes bash scripts/up.sh check-prereqs        # one line per missing tool: docker, kind, kubectl, pulumi, python3 (nothing is built)
	IDENTITY=kubernetes bash scripts/up.sh kind-cluster         # kind cluster agent-budgets-kubernetes (no feature gates) + registry localhost:5001
	IDENTITY=kubernetes bash scripts/up.sh probe-image          # build the probe agent image, push it to the kind registry
	IDENTITY=kubernetes bash scripts/up.sh pulumi-stack         # pulumi login file://<project>/.state; select or create stack dev-kubernetes
	IDENTITY=kubernetes bash scripts/up.sh pulumi-up            # pulumi up --yes --refresh
	IDENTITY=kubernetes bash scripts/up.sh service-account-keys # check the cluster's issuer; /openid/v1/jwks into the SecurityPolicy's ConfigMap; wait until accepted
	IDENTITY=kubernetes bash scripts/up.sh agent-pods           # namespace agents: a probe pod per service account (projected token) and one with an API key
	IDENTITY=kubernetes bash scripts/up.sh smoke                # each probe pod answers /readyz
else
up: $(STAMP)
	bash scripts/up.sh check-prereqs      # one line per missing tool: docker, kind, kubectl, go, git, pulumi, python3
	bash scripts/up.sh kind-cluster       # kind + feature gates + certificates.k8s.io/v1beta1 + registry localhost:5001 + proxy_arp
	bash scripts/up.sh substrate-source   # clone Substrate at the pinned ref; check its features; classify its IdP (pool, jwks-file, absent)
	bash scripts/up.sh substrate-install  # build kubectl-ate and ate-setup; ate-setup --kind deploy ate-system
	bash scripts/up.sh substrate-idp      # build ate-idp-server with ko, apply Service idp then its Deployment, smoke-check the JWKS over TLS
	bash scripts/up.sh probe-image        # build the probe agent image, push it to the kind registry
	bash scripts/up.sh demo-actors        # worker pool, atespace agents, probe-agent template, actors (suspended)
	bash scripts/up.sh pulumi-stack       # pulumi login file://<project>/.state; select or create stack dev; localJwks if the IdP is unusable
	bash scripts/up.sh pulumi-up          # pulumi up --yes --refresh (creates the egress policies)
	bash scripts/up.sh jwks-sync          # mode localJwks only: Substrate's public keys into the SecurityPolicy's ConfigMap; wait until it is accepted
	bash scripts/up.sh resume-actors      # resume the actors now that their egress policies exist
	bash scripts/up.sh smoke              # each probe agent answers through atenet-router
endif

down:
	bash scripts/down.sh pulumi-destroy   # pulumi destroy --yes (stack dev; IDENTITY=kubernetes: dev-kubernetes)
	bash scripts/down.sh kind-delete      # kind delete cluster (agent-budgets; IDENTITY=kubernetes: agent-budgets-kubernetes)

# tests/e2e is excluded from the unit run (pyproject norecursedirs); the override collects it here.
# AGENT_BUDGETS_E2E_REQUIRE_STACK=1: no live stack is a failure naming the reason, never a skip. The stack of
# IDENTITY decides which checks apply (their identity_source marks); the summary names each one skipped and why.
e2e: $(STAMP)
	AGENT_BUDGETS_E2E_REQUIRE_STACK=1 $(BIN)/python -m pytest tests/e2e -o 'norecursedirs=venv .git' -p no:cacheprovider -s -v -rs

bench-e2e: $(STAMP)
	AGENT_BUDGETS_E2E_REQUIRE_STACK=1 $(BIN)/python -m tests.e2e.bench_latency

docs: $(STAMP)
	$(BIN)/python scripts/gen_docs.py

crds:
	bash scripts/fetch-crds.sh

# The rig (docs/rig.md): a real node in a network namespace of its own, every image built here. Not part of `make
# test` (it needs root and the machine for minutes); its unit tests are (tests/test_rig_node.py).
# The stack `make rig` deploys (docs/rig.md): dev-kubernetes (the default, the stack tests/e2e knows) or rig (every
# identity source; the rig signs the Substrate actors' JWTs). Plain `=`: only the command line picks it.
RIG_STACK = dev-kubernetes
rig: $(STAMP)
	$(BIN)/python -m rig up --stack $(RIG_STACK)

# Every live check that applies to the stack `make rig` deployed (docs/rig.md): python -m rig checks.
rig-checks: $(STAMP)
	$(BIN)/python -m rig checks

rig-down: $(STAMP)
	$(BIN)/python -m rig down
