"""Read what `make up` needs from upstream outputs: kubectl-ate JSON, kubectl JSON, the Substrate checkout.

Standard library only (scripts/up.sh runs it with the system python3), and pure functions, so that
tests/test_substrate_facts.py checks each one against recorded outputs in the shapes upstream prints.
Shell use: `python3 scripts/substrate_facts.py QUERY [ARG...]`, JSON on stdin where a query reads one.

Upstream shapes followed (agent-substrate/substrate, newest snapshot and newer indexed files):

* kubectl-ate `-o json` of one object: `cmd/kubectl-ate/internal/printer/printer.go` prints a single
  actor through the list printer, `{"actors": [...]}` (and a template as `{"actorTemplates": [...]}`);
  newer builds print the bare object; a bare list is accepted too. Actor state is either the actor's
  `status` enum (`STATUS_RUNNING`) or `status.state` (`ACTOR_STATE_RUNNING`).
* ActorTemplate snapshot block: `demos/counter/counter-template.yaml.tmpl` writes
  `snapshotConfig{onPause,onCommit,storageLocation}`; other versions write
  `snapshotConfig{preferredFidelity,storageLocation}`; the oldest (ActorTemplate as a CRD) wrote
  `spec.snapshotsConfig{location}`.
* The IdP: `cmd/ate-idp-server` serves the JWKS behind Service `idp` in `ate-system`
  (`installdefaults.IDPServiceName`); install manifests reference ko images as
  `ko://<module>/cmd/<binary>` (`manifests/ate-install/ate-api-server.yaml`).
* WorkerPool: `manifests/ate-install/generated/ate.dev_workerpools.yaml` has `status.replicas` (the
  Deployment's pod count, `cmd/atecontroller/internal/controllers/workerpool_controller.go`
  `syncStatus`) and no ready count; worker pods carry `ate.dev/worker-pool=<pool>`
  (`WorkerPoolLabelKey`). The Deployment's name changed between versions (`<pool>-deployment`, later
  `<pool>`), so nothing here depends on it.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

WRAPPERS = ("actors", "actorTemplates", "atespaces", "workers")

# --- kubectl-ate JSON ---------------------------------------------------------------------------------------


def parse_json(text: str) -> Any:
    """kubectl-ate's stdout as JSON; empty output (e.g. "has no egress policy" on stderr) is {}."""
    text = text.strip()
    return json.loads(text) if text else {}


def single_object(doc: Any) -> dict[str, Any]:
    """The one object of a `get <kind> <name> -o json`, whichever of the three shapes was printed."""
    if isinstance(doc, list):
        doc = doc[0] if doc else {}
    if isinstance(doc, dict) and len(doc) == 1:
        (key, value), *_ = doc.items()
        if key in WRAPPERS and isinstance(value, list):
            doc = value[0] if value else {}
    return doc if isinstance(doc, dict) else {}


def actor_state(doc: Any) -> str:
    """RUNNING, SUSPENDED, ... from either status shape; UNKNOWN when there is none."""
    status = single_object(doc).get("status")
    if isinstance(status, dict):
        status = status.get("state") or status.get("status")
    state = str(status or "UNKNOWN").upper()
    for prefix in ("ACTOR_STATE_", "STATUS_"):
        state = state.removeprefix(prefix)
    return state


def golden_snapshot(doc: Any) -> str:
    """ready | pending | error: <message> for an actor template's golden snapshot."""
    status = single_object(doc).get("status")
    golden = (status.get("goldenSnapshotStatus") or {}) if isinstance(status, dict) else {}
    if golden.get("errorMessage"):
        return "error: " + str(golden["errorMessage"])
    if (golden.get("goldenSnapshot") or {}).get("name") or (golden.get("goldenTag") or {}).get("name"):
        return "ready"
    return "pending"


def template_images(doc: Any) -> list[str]:
    """Every container image of an actor template (top level, or under spec in older shapes)."""
    template = single_object(doc)
    spec = template.get("spec") if isinstance(template.get("spec"), dict) else template
    return [str(container.get("image", "")) for container in spec.get("containers") or []]


def has_rules(doc: Any) -> bool:
    """An egress policy document (always the bare policy) with at least one rule."""
    return bool(isinstance(doc, dict) and doc.get("rules"))


def has_flag(help_text: str, flag: str) -> bool:
    """Whether a cobra `--help` text lists the flag (e.g. `delete actor --any-state` in newer builds)."""
    return re.search(rf"(^|[\s,]){re.escape(flag)}([\s=]|$)", help_text, re.M) is not None


# --- the Substrate checkout: ActorTemplate snapshot block ------------------------------------------------

SHAPE_SCOPES = "snapshotConfig{onPause,onCommit,storageLocation}"
SHAPE_FIDELITY = "snapshotConfig{preferredFidelity,storageLocation}"
SHAPE_LEGACY = "snapshotsConfig{location}"
_LOCATION_KEYS = ("storageLocation", "location")


class CheckoutError(ValueError):
    """The Substrate checkout lacks something agent-budgets needs; the message says what to do."""


def _block(lines: list[str], start: int) -> dict[str, str]:
    """The `key: value` children of the mapping opened at lines[start] (deeper indentation, comments skipped)."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    children: dict[str, str] = {}
    for line in lines[start + 1 :]:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(line) - len(line.lstrip()) <= indent:
            break
        match = re.match(r"^\s*([A-Za-z][A-Za-z0-9]*):\s*(.*?)\s*$", line)
        if match:
            children[match.group(1)] = match.group(2).split(" #", 1)[0].strip().strip("\"'")
    return children


def template_snapshot_blocks(text: str) -> list[tuple[str, dict[str, str]]]:
    """(shape, children) of every snapshot block in one template file."""
    lines = text.splitlines()
    found: list[tuple[str, dict[str, str]]] = []
    for index, line in enumerate(lines):
        key = line.strip()
        if key == "snapshotsConfig:":
            found.append((SHAPE_LEGACY, _block(lines, index)))
        elif key == "snapshotConfig:" and not line.startswith(" "):
            children = _block(lines, index)
            shape = SHAPE_FIDELITY if "preferredFidelity" in children else SHAPE_SCOPES
            found.append((shape, children))
    return found


def checkout_templates(root: Path) -> Iterable[Path]:
    """The checkout's own ActorTemplate files: everything under demos/ that looks like one."""
    demos = root / "demos"
    if not demos.is_dir():
        return []
    return sorted(p for p in demos.rglob("*") if p.is_file() and p.name.endswith((".yaml", ".yaml.tmpl", ".yml")))


def snapshot_block(root: Path, storage_location: str, ref: str = "the pinned ref") -> str:
    """The snapshot block our probe template must carry for this checkout, as YAML lines.

    Takes the shape (and the non-location values) from the checkout's own templates; refuses the legacy
    CRD shape and a checkout whose templates disagree.
    """
    shapes: dict[str, list[tuple[Path, dict[str, str]]]] = {}
    for path in checkout_templates(root):
        for shape, children in template_snapshot_blocks(path.read_text(encoding="utf-8", errors="replace")):
            shapes.setdefault(shape, []).append((path, children))
    current = {shape: found for shape, found in shapes.items() if shape != SHAPE_LEGACY}
    if not current:
        if SHAPE_LEGACY in shapes:
            raise CheckoutError(
                f"Substrate {ref} writes ActorTemplates in the old shape ({SHAPE_LEGACY}, a Kubernetes CRD), "
                "which probe/actor-template.yaml.tmpl does not speak: pin a newer ref in scripts/versions.env"
            )
        raise CheckoutError(
            f"no ActorTemplate with a snapshotConfig block under demos/ in Substrate {ref}: cannot tell which "
            "snapshot fields it accepts; compare probe/actor-template.yaml.tmpl with its templates by hand"
        )
    if len(current) > 1:
        listing = "; ".join(f"{shape} in {found[0][0].relative_to(root)}" for shape, found in sorted(current.items()))
        raise CheckoutError(
            f"Substrate {ref}'s own templates use two snapshot shapes ({listing}): cannot tell which one its "
            "API accepts; pin another ref in scripts/versions.env"
        )
    [(shape, found)] = current.items()
    children = dict(found[0][1])
    kept = [f"  {key}: {value}" for key, value in children.items() if key not in _LOCATION_KEYS]
    return "\n".join(["snapshotConfig:", *kept, f"  storageLocation: {storage_location}"])


# --- the Substrate checkout: does its installer deploy the IdP? ------------------------------------------

IDP_BINARY = "cmd/ate-idp-server"
IDP_SERVICE = "idp"
_DOC_SPLIT = re.compile(r"^---\s*$", re.M)


def _documents(root: Path) -> Iterable[tuple[Path, str]]:
    install = root / "manifests" / "ate-install"
    if not install.is_dir():
        return
    for path in sorted(install.rglob("*")):
        if path.is_file() and path.name.endswith((".yaml", ".yml", ".yaml.tmpl")):
            for doc in _DOC_SPLIT.split(path.read_text(encoding="utf-8", errors="replace")):
                yield path, doc


def _top_level(doc: str, key: str) -> str | None:
    match = re.search(rf"^{key}:\s*(\S+)\s*$", doc, re.M)
    return match.group(1).strip("\"'") if match else None


def _metadata_name(doc: str) -> str | None:
    match = re.search(r"^metadata:\s*\n((?:[ \t]+.*\n?)*)", doc, re.M)
    if not match:
        return None
    name = re.search(r"^  name:\s*(\S+)\s*$", match.group(1), re.M)
    return name.group(1).strip("\"'") if name else None


def idp_install_problem(root: Path, ref: str = "the pinned ref") -> str | None:
    """None when the checkout's install manifests run ate-idp-server behind Service idp; else what is wrong."""
    runs_idp: list[Path] = []
    serves_idp: list[Path] = []
    for path, doc in _documents(root):
        if re.search(rf"^\s*-?\s*image:\s*[\"']?ko://\S+/{re.escape(IDP_BINARY)}[\"']?\s*$", doc, re.M):
            runs_idp.append(path)
        if _top_level(doc, "kind") == "Service" and _metadata_name(doc) == IDP_SERVICE:
            serves_idp.append(path)
    missing = []
    if not runs_idp:
        missing.append(f"no workload running {IDP_BINARY}")
    if not serves_idp:
        missing.append(f"no Service {IDP_SERVICE}")
    if not missing:
        return None
    return (
        f"Substrate {ref}'s install manifests (manifests/ate-install) have {' and '.join(missing)}: ate-setup "
        "would install no identity provider, so Envoy Gateway could not fetch the actor JWKS from "
        "https://idp.ate-system.svc and every actor call would get 401. Pin a ref whose installer deploys "
        f"{IDP_BINARY} (SUBSTRATE_REF in scripts/versions.env)"
    )


# --- kubectl JSON: IdP endpoints, WorkerPool readiness ----------------------------------------------------


def ready_endpoints(slices: Any) -> int:
    """Ready endpoints in `kubectl get endpointslices -l kubernetes.io/service-name=<svc> -o json`.

    discovery.k8s.io/v1 EndpointConditions: a missing `ready` is an unknown state that consumers treat
    as ready; `ready: false` is not ready.
    """
    items = slices.get("items", []) if isinstance(slices, Mapping) else []
    count = 0
    for endpoint_slice in items:
        for endpoint in endpoint_slice.get("endpoints") or []:
            ready = (endpoint.get("conditions") or {}).get("ready")
            if ready is None or ready is True:
                count += max(len(endpoint.get("addresses") or []), 1)
    return count


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def workerpool_progress(pool: Any, pods: Any) -> tuple[bool, str]:
    """(ready, detail) from the WorkerPool object and its worker pods (label ate.dev/worker-pool=<pool>)."""
    pool = pool if isinstance(pool, Mapping) else {}
    wanted = int((pool.get("spec") or {}).get("replicas") or 0)
    status = pool.get("status") or {}
    generation = (pool.get("metadata") or {}).get("generation")
    observed = status.get("observedGeneration")
    if generation is not None and observed is not None and observed < generation:
        return False, f"the controller has not seen generation {generation} yet (observed {observed})"
    reported = int(status.get("replicas") or 0)
    ready = sum(1 for pod in (pods.get("items", []) if isinstance(pods, Mapping) else []) if _pod_ready(pod))
    detail = f"{ready}/{wanted} worker pods ready, WorkerPool status.replicas={reported}"
    return (wanted > 0 and reported >= wanted and ready >= wanted), detail


# --- command line -----------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    query, args = argv[0], argv[1:]
    try:
        if query == "actor-state":
            print(actor_state(parse_json(sys.stdin.read())))
        elif query == "golden":
            print(golden_snapshot(parse_json(sys.stdin.read())))
        elif query == "images":
            for image in template_images(parse_json(sys.stdin.read())):
                print(image)
        elif query == "has-rules":
            print("yes" if has_rules(parse_json(sys.stdin.read())) else "no")
        elif query == "has-flag":
            return 0 if has_flag(sys.stdin.read(), args[0]) else 1
        elif query == "snapshot-block":
            print(snapshot_block(Path(args[0]), args[1], args[2] if len(args) > 2 else "the pinned ref"))
        elif query == "idp-install":
            problem = idp_install_problem(Path(args[0]), args[1] if len(args) > 1 else "the pinned ref")
            if problem:
                print(problem, file=sys.stderr)
                return 1
        elif query == "ready-endpoints":
            print(ready_endpoints(parse_json(sys.stdin.read())))
        elif query == "workerpool":
            documents = json.loads(sys.stdin.read())
            ready, detail = workerpool_progress(documents.get("pool"), documents.get("pods"))
            print(detail)
            return 0 if ready else 1
        else:
            print(f"substrate_facts: unknown query {query!r}", file=sys.stderr)
            return 2
    except CheckoutError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except (ValueError, IndexError) as exc:
        print(f"substrate_facts {query}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
