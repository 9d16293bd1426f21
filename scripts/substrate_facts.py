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
  `ko://<module>/cmd/<binary>` (`manifests/ate-install/ate-api-server.yaml`). Its `main.go` has come in two
  designs: the *pool* design reads the signing pool (`--actor-id-jwt-pool`, @d172cb1d and @228aab1b) and the
  *JWKS-file* design a key set published in ConfigMap `actor-id-jwks` (`--jwks-file`, @7187a6c1); both take
  `--issuer`, `--server-cred-bundle` and `--listen-address` (pflag).
* Actor signing keys: Secret `ate-system/actor-id-jwt-pool`, key `pool`, JSON
  `{"Authorities": [{"ID", "Algorithm", "SigningKeyPKCS8"}], "ActiveForSigning"}` with the PKCS#8 DER as
  base64 (`internal/localjwtauthority/localjwtauthority.go` @fa68a116); the public JWK of each authority has
  kid = ID, use `sig`, alg, and `EC` P-256 `x`/`y` or `RSA` `n`/`e`, sorted by kid (`jwks.go` @c9c9571e).
  ConfigMap `ate-system/actor-id-jwks`, key `jwks.json`, holds that set when the controller publishes it
  (`cmd/atecontroller/internal/controllers/actorjwks_controller.go` @496948ed).
* WorkerPool: `manifests/ate-install/generated/ate.dev_workerpools.yaml` has `status.replicas` (the
  Deployment's pod count, `cmd/atecontroller/internal/controllers/workerpool_controller.go`
  `syncStatus`) and no ready count; worker pods carry `ate.dev/worker-pool=<pool>`
  (`WorkerPoolLabelKey`). The Deployment's name changed between versions (`<pool>-deployment`, later
  `<pool>`), so nothing here depends on it.
* The API server's service-account issuer (kubernetes/kubernetes pkg/serviceaccount/openidmetadata.go): an OIDC
  discovery document at `/.well-known/openid-configuration` whose `issuer` is `--service-account-issuer`, and the
  public signing keys at `/openid/v1/jwks` (the Substrate-free dev environment reads both with `kubectl get --raw`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
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


# --- the Substrate checkout: which IdP design it has ------------------------------------------------------

DESIGN_INSTALLER = "installer"  # the checkout's own install manifests deploy it: use them
DESIGN_POOL = "pool"  # --actor-id-jwt-pool: serves the public half of the signing pool
DESIGN_JWKS_FILE = "jwks-file"  # --jwks-file: serves ConfigMap actor-id-jwks
DESIGN_ABSENT = "absent"  # no cmd/ate-idp-server
DESIGN_UNKNOWN = "unknown"  # a main.go whose flags match neither design
IDP_COMMON_FLAGS = ("issuer", "server-cred-bundle", "listen-address")
IDP_KEY_FLAGS = {DESIGN_POOL: "actor-id-jwt-pool", DESIGN_JWKS_FILE: "jwks-file"}
# pflag.String("name", ...), fs.StringVar(&v, "name", ...), flag.Duration("name", ...): the declared names. Not
# slog's attributes (slog.String("issuer", *issuer) in main.go @d172cb1d), which have the same shape.
_FLAG_DECLARATION = re.compile(r"\b(?!slog\.)\w+\.\w+\(\s*(?:&[\w.]+\s*,\s*)?\"([a-z][a-z0-9-]*)\"\s*,")


def go_module(root: Path) -> str:
    """The module path in the checkout's go.mod (it has been github.com/agent-substrate/substrate and
    go.ate.dev/substrate)."""
    go_mod = root / "go.mod"
    if go_mod.is_file():
        for line in go_mod.read_text(encoding="utf-8", errors="replace").splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "module":
                return words[1].strip('"')
    raise CheckoutError(f"no module line in {go_mod}: is {root} a Substrate checkout?")


def issuer_jwks_path(issuer: str) -> str:
    """The path ate-idp-server serves the JWK set on for `issuer`: the issuer's path, cleaned and without a
    trailing slash, then /openid/v1/jwks (server.go `New` @228aab1b and @d22f2d94: path.Clean("/"+u.Path),
    oidcdiscovery.JWKSPath)."""
    from urllib.parse import urlsplit

    base = posixpath.normpath(re.sub("/+", "/", "/" + urlsplit(issuer).path)).rstrip("/")
    return f"{base}/openid/v1/jwks"


def declared_flags(main_go: str) -> set[str]:
    """The command-line flags a Go main declares (pflag and flag styles)."""
    return set(_FLAG_DECLARATION.findall(main_go))


def idp_design(root: Path) -> tuple[str, str]:
    """(design, why) of the checkout's IdP: installer, pool, jwks-file, absent or unknown."""
    if idp_install_problem(root) is None:
        return DESIGN_INSTALLER, "manifests/ate-install runs cmd/ate-idp-server behind Service idp"
    main = root / IDP_BINARY / "main.go"
    if not main.is_file():
        return DESIGN_ABSENT, f"no {IDP_BINARY}/main.go"
    flags = declared_flags(main.read_text(encoding="utf-8", errors="replace"))
    found = [design for design, flag in IDP_KEY_FLAGS.items() if flag in flags]
    missing = [f"--{flag}" for flag in IDP_COMMON_FLAGS if flag not in flags]
    if len(found) == 1 and not missing:
        return found[0], f"{IDP_BINARY}/main.go declares --{IDP_KEY_FLAGS[found[0]]}"
    listing = ", ".join(f"--{flag}" for flag in sorted(flags)) or "none"
    return DESIGN_UNKNOWN, (
        f"{IDP_BINARY}/main.go declares {listing}: not the pool design (--actor-id-jwt-pool) nor the JWKS-file "
        "design (--jwks-file), each with --issuer, --server-cred-bundle and --listen-address"
    )


# --- actor signing keys: the pool Secret, the published key set ------------------------------------------


def _der(data: bytes, at: int = 0) -> tuple[int, bytes, int]:
    """One DER element at `at`: (tag, contents, offset after it)."""
    tag, length = data[at], data[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[at : at + count], "big")
        at += count
    return tag, data[at : at + length], at + length


def _der_children(contents: bytes) -> list[tuple[int, bytes]]:
    children, at = [], 0
    while at < len(contents):
        tag, value, at = _der(contents, at)
        children.append((tag, value))
    return children


def _b64url(value: bytes) -> str:
    return base64.urlsafe_b64encode(value).rstrip(b"=").decode()


# AlgorithmIdentifier OIDs of PKCS#8 (RFC 5208): id-ecPublicKey and rsaEncryption, DER-encoded.
_OID_EC = bytes.fromhex("2a8648ce3d0201")
_OID_RSA = bytes.fromhex("2a864886f70d010101")


def public_jwk(key_id: str, algorithm: str, pkcs8: bytes) -> dict[str, str]:
    """The public JWK of one pool authority, in the shape Substrate publishes (jwks.go @c9c9571e).

    PKCS#8 PrivateKeyInfo (RFC 5208): SEQUENCE {version, AlgorithmIdentifier, OCTET STRING key}. An EC key is
    an RFC 5915 ECPrivateKey whose [1] publicKey Go's x509.MarshalPKCS8PrivateKey always writes; an RSA key is
    an RFC 8017 RSAPrivateKey {version, n, e, ...}.
    """
    _, info, _ = _der(pkcs8)
    (_, _version), (_, algorithm_id), (_, private_key), *_ = _der_children(info)
    oid = _der_children(algorithm_id)[0][1]
    if oid == _OID_EC:
        if algorithm != "ES256":
            raise ValueError(f"key {key_id!r}: an EC key with algorithm {algorithm!r} (Substrate signs ES256)")
        _, ec_key, _ = _der(private_key)
        public = [value for tag, value in _der_children(ec_key) if tag == 0xA1]
        if not public:
            raise ValueError(f"key {key_id!r}: the EC private key carries no public key")
        _, bits, _ = _der(public[0])
        point = bits[1:]  # BIT STRING: one byte of unused bits, then 0x04 || x || y
        if len(point) != 65 or point[0] != 4:
            raise ValueError(f"key {key_id!r}: not an uncompressed P-256 point")
        return {
            "kty": "EC",
            "kid": key_id,
            "use": "sig",
            "alg": algorithm,
            "crv": "P-256",
            "x": _b64url(point[1:33]),
            "y": _b64url(point[33:65]),
        }
    if oid == _OID_RSA:
        if algorithm not in ("RS256", "RS384", "RS512"):
            raise ValueError(f"key {key_id!r}: an RSA key with algorithm {algorithm!r}")
        _, rsa_key, _ = _der(private_key)
        (_, _v), (_, modulus), (_, exponent), *_ = _der_children(rsa_key)
        return {
            "kty": "RSA",
            "kid": key_id,
            "use": "sig",
            "alg": algorithm,
            "n": _b64url(modulus.lstrip(b"\0")),
            "e": _b64url(exponent.lstrip(b"\0")),
        }
    raise ValueError(f"key {key_id!r}: neither an EC nor an RSA key")


def secret_value(secret: Any, key: str) -> str:
    """One data value of `kubectl get secret -o json`, decoded."""
    data = (secret.get("data") or {}) if isinstance(secret, Mapping) else {}
    if key not in data:
        raise ValueError(f"the Secret has no key {key!r} (keys: {', '.join(sorted(data)) or 'none'})")
    return base64.b64decode(data[key]).decode()


def config_map_value(config_map: Any, key: str) -> str:
    """One data value of `kubectl get configmap -o json`."""
    data = (config_map.get("data") or {}) if isinstance(config_map, Mapping) else {}
    if key not in data:
        raise ValueError(f"the ConfigMap has no key {key!r} (keys: {', '.join(sorted(data)) or 'none'})")
    return str(data[key])


def pool_authorities(pool_json: str) -> list[dict[str, Any]]:
    pool = json.loads(pool_json)
    authorities = pool.get("Authorities") if isinstance(pool, Mapping) else None
    if not isinstance(authorities, list) or not authorities:
        raise ValueError("the signing pool has no Authorities")
    return authorities


def pool_jwks(pool_json: str) -> dict[str, Any]:
    """The JWKS the pool's public keys make, sorted by kid as Substrate publishes it. Never prints a private key."""
    keys = [
        public_jwk(
            str(a.get("ID") or ""), str(a.get("Algorithm") or ""), base64.b64decode(a.get("SigningKeyPKCS8") or "")
        )
        for a in pool_authorities(pool_json)
    ]
    if any(not key["kid"] for key in keys):
        raise ValueError("an authority of the signing pool has no ID")
    return {"keys": sorted(keys, key=lambda key: key["kid"])}


def pool_kids(pool_json: str) -> list[str]:
    """The key ids the pool signs with (the authority IDs), sorted."""
    return sorted(str(a.get("ID") or "") for a in pool_authorities(pool_json))


def jwks_kids(jwks: Any) -> list[str]:
    """The key ids of a JWK set, sorted; a set without keys is an error (Envoy would accept no token)."""
    if isinstance(jwks, str):
        jwks = json.loads(jwks)
    keys = jwks.get("keys") if isinstance(jwks, Mapping) else None
    if not isinstance(keys, list) or not keys:
        raise ValueError("the JWK set has no keys")
    return sorted(str(key.get("kid") or "") for key in keys if isinstance(key, Mapping))


def oidc_issuer(document: Any) -> str:
    """The `issuer` of an OIDC discovery document; an error when it has none."""
    issuer = document.get("issuer") if isinstance(document, Mapping) else None
    if not isinstance(issuer, str) or not issuer:
        raise ValueError("the discovery document names no issuer")
    return issuer


def annotation(obj: Any, key: str) -> str:
    """metadata.annotations[key] of a `kubectl get -o json` object, or empty."""
    meta = (obj.get("metadata") or {}) if isinstance(obj, Mapping) else {}
    return str((meta.get("annotations") or {}).get(key) or "")


def policy_accepted(policy: Any) -> tuple[bool, str]:
    """(accepted, detail) of a Gateway API policy (or a `kubectl get -o json` List of them): every
    status.ancestors[] entry has condition Accepted=True (Gateway API PolicyAncestorStatus)."""
    items = policy.get("items") if isinstance(policy, Mapping) and "items" in policy else [policy]
    if not items:
        return False, "no such policy"
    details = []
    for item in items:
        name = str(((item or {}).get("metadata") or {}).get("name") or "the policy")
        ancestors = ((item.get("status") or {}).get("ancestors") or []) if isinstance(item, Mapping) else []
        if not ancestors:
            return False, f"{name}: no status yet"
        for ancestor in ancestors:
            conditions = {c.get("type"): c for c in ancestor.get("conditions") or []}
            accepted = conditions.get("Accepted") or {}
            if accepted.get("status") != "True":
                status, message = accepted.get("status", "unknown"), accepted.get("message", "")
                return False, f"{name}: Accepted={status} {message}".strip()
        details.append(f"{name}: Accepted")
    return True, ", ".join(details)


def smoke_result(line: str) -> tuple[bool, str]:
    """(ok, kids or "stage: error") from the one JSON line scripts/idp/fetch_jwks.py prints."""
    try:
        outcome = json.loads(line)
    except ValueError:
        return False, f"output: the smoke pod printed no result ({line.strip()[:300] or 'nothing'})"
    if not isinstance(outcome, Mapping):
        return False, f"output: unexpected result {line.strip()[:300]}"
    if outcome.get("ok") is True:
        return True, " ".join(str(kid) for kid in outcome.get("kids") or [])
    return False, f"{outcome.get('stage', 'unknown')}: {outcome.get('error', '')}"


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
        elif query == "go-module":
            print(go_module(Path(args[0])))
        elif query == "issuer-jwks-path":
            print(issuer_jwks_path(args[0]))
        elif query == "idp-design":
            design, why = idp_design(Path(args[0]))
            print(f"{design}\t{why}")
        elif query == "pool-kids":
            print(" ".join(pool_kids(secret_value(parse_json(sys.stdin.read()), args[0] if args else "pool"))))
        elif query == "pool-jwks":
            pool = secret_value(parse_json(sys.stdin.read()), args[0] if args else "pool")
            print(json.dumps(pool_jwks(pool), separators=(",", ":")))
        elif query == "config-map-value":
            print(config_map_value(parse_json(sys.stdin.read()), args[0]))
        elif query == "jwks-kids":
            print(" ".join(jwks_kids(sys.stdin.read())))
        elif query == "oidc-issuer":
            print(oidc_issuer(parse_json(sys.stdin.read())))
        elif query == "annotation":
            print(annotation(parse_json(sys.stdin.read()), args[0]))
        elif query == "stamp":
            print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])
        elif query == "smoke-result":
            lines = sys.stdin.read().strip().splitlines()
            ok, detail = smoke_result(lines[-1] if lines else "")
            print(detail)
            return 0 if ok else 1
        elif query == "policy-accepted":
            accepted, detail = policy_accepted(parse_json(sys.stdin.read()))
            print(detail)
            return 0 if accepted else 1
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
