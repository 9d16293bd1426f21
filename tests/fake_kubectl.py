#!/usr/bin/env python3
"""A fake ``kubectl`` with a fake ``ate`` plugin, for the egress-policy provider tests.

It emulates what the provider relies on, as documented for kubectl and kubectl-ate:

* kubectl's plugin dispatch: a flag before the plugin name is refused ("flags cannot be placed
  before plugin name"), and a missing plugin gives ``unknown command "ate" for "kubectl"``;
* ``ate {create,get,update,delete} egress-policy <actor> -a <atespace> [--context c] [-f -]``, with
  ``-o json|yaml`` on ``get`` only: as in the reference, ``-o`` is documented for ``get`` alone, so
  ``create``, ``update`` and ``delete`` refuse it the way cobra refuses an unknown flag
  ("unknown shorthand flag: 'o' in -o") and print only a confirmation line, never the policy;
* ``ate delete actor <actor> -a <atespace>``, which deletes the actor's policy with it;
* strict protojson manifests (lowerCamel or proto names; unknown fields rejected);
* a uid per policy and a version that grows on every write; update needs both, and a stale pair
  is Aborted; AlreadyExists on a second create; FailedPrecondition for a missing actor; ``get`` of
  a missing policy prints "has no egress policy" to stderr and exits 0;
* protojson output: int64 (``expirationSeconds``, ``version``) printed as strings, empty fields
  omitted.

State lives in the JSON file named by ``FAKE_ATE_STATE``. Knobs in that file:

    actors                  ["<atespace>/<name>", ...] that exist
    policies                {"<atespace>/<name>": policy} (written by the fake; tests may seed it)
    contexts                if set, the only kube contexts that exist
    unknown_flags           flags this kubectl-ate build does not have, e.g. ["--context"]
                            (cobra: "unknown flag: --context")
    plugin_missing          true: kubectl has no "ate" plugin
    sleep_seconds           sleep this long before answering (to force a timeout)
    abort_updates           answer Aborted to this many updates, then behave
    expiration_as_string    print expirationSeconds as "900" (default true, like protojson)
    reject_unknown_fields   strict manifest parsing (default true, like the real CLI)
    server_unknown_fields   field names an older server rejects as unknown (InvalidArgument)
    cli_unknown_fields      field names an older kubectl-ate's own strict parser does not know
    phantom_exists          answer AlreadyExists to this many creates although there is no policy
                            (a policy created and deleted again by someone else in between)
    vanish_on_update_once   the next update finds the policy deleted (a concurrent delete)
    fail_next               {"<verb>": "<stderr line>"}: the next such call fails with that text
    silent_get_once         the next get exits 0 and prints nothing at all
    print_next              {"<verb>": "<text>"}: the next such call prints that text and exits 0
    calls                   appended by the fake: {"argv": [...], "stdin": "..."} per call
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

STATE_ENV = "FAKE_ATE_STATE"

# protojson field names of the EgressPolicy messages: lowerCamel name -> (proto name, type).
# A type is a message name, "str", "int", "int64" (printed as a string) or a one-item list.
SCHEMA: dict[str, dict[str, Any]] = {
    "EgressPolicy": {"metadata": "ResourceMetadata", "rules": ["EgressRule"]},
    "ResourceMetadata": {
        "atespace": "str",
        "name": "str",
        "uid": "str",
        "version": "int64",
        "createTime": "str",
        "updateTime": "str",
    },
    "EgressRule": {"http": "HTTPRule", "https": "HTTPRule", "tlsPassthrough": "TLSPassthroughRule"},
    "HTTPRule": {"hostnames": ["str"], "ports": "Ports", "effects": "HttpRuleEffects"},
    "TLSPassthroughRule": {"hostnames": ["str"], "ports": "Ports"},
    "Ports": {"numbers": ["int"], "all": "AllPorts"},
    "AllPorts": {},
    "HttpRuleEffects": {"replaceHeaders": ["CredentialHeader"]},
    "CredentialHeader": {
        "header": "str",
        "prefix": "str",
        "credentialUri": "str",
        "actorJwt": "ActorJWTSource",
    },
    "ActorJWTSource": {"audiences": ["str"], "expirationSeconds": "int64"},
}


class CliError(Exception):
    """Printed as cobra prints errors ("Error: ...") with exit status 1."""


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def parse_message(value: Any, message: str, strict: bool) -> Any:
    if not isinstance(value, dict):
        raise CliError(f"invalid EgressPolicy: proto: {message} must be an object, got {json.dumps(value)}")
    fields = SCHEMA[message]
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = camel(key)
        if name not in fields:
            if strict:
                raise CliError(
                    f'failed to parse egress policy manifest "-": invalid EgressPolicy: '
                    f'proto: (line 1:2): unknown field "{key}"'
                )
            continue
        out[name] = parse_value(item, fields[name], strict)
    return out


def parse_value(value: Any, kind: Any, strict: bool) -> Any:
    if isinstance(kind, list):
        if not isinstance(value, list):
            raise CliError(f"invalid EgressPolicy: proto: expected a list, got {json.dumps(value)}")
        return [parse_value(v, kind[0], strict) for v in value]
    if kind == "str":
        return str(value)
    if kind in ("int", "int64"):
        return int(value)  # protojson accepts numbers and strings for int64
    return parse_message(value, kind, strict)


def field_names(value: Any) -> set[str]:
    names: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            names.add(key)
            names |= field_names(item)
    elif isinstance(value, list):
        for item in value:
            names |= field_names(item)
    return names


def to_protojson(value: Any, kind: Any, state: dict[str, Any]) -> Any:
    """Print like protojson: int64 as strings (expirationSeconds optionally a number), empties omitted."""
    if isinstance(kind, list):
        return [to_protojson(v, kind[0], state) for v in value]
    if kind == "int64":
        return str(value)
    if kind in ("str", "int"):
        return value
    out: dict[str, Any] = {}
    for name, item in value.items():
        sub = SCHEMA[kind][name]
        if item in ("", [], None, 0) and sub != "AllPorts":
            continue
        if name == "expirationSeconds" and not state.get("expiration_as_string", True):
            out[name] = int(item)
        else:
            out[name] = to_protojson(item, sub, state)
    return out


# --- state --------------------------------------------------------------------------------------


def state_path() -> str:
    path = os.environ.get(STATE_ENV)
    if not path:
        raise CliError(f"{STATE_ENV} is not set")
    return path


def load_state() -> dict[str, Any]:
    with open(state_path(), encoding="utf-8") as handle:
        return json.load(handle)


def save_state(state: dict[str, Any]) -> None:
    tmp = state_path() + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
    os.replace(tmp, state_path())


@contextlib.contextmanager
def locked() -> Any:
    with open(state_path() + ".lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --- command line -------------------------------------------------------------------------------

VALUE_FLAGS = {
    "-a": "atespace",
    "--atespace": "atespace",
    "-f": "filename",
    "--filename": "filename",
    "-o": "output",
    "--output": "output",
    "--context": "context",
    "--uid": "uid",
    "--version": "version",
    "--kubeconfig": "kubeconfig",
    "--endpoint": "endpoint",
    "--token-file": "token_file",
}


GET_ONLY_FLAGS = ("-o", "--output")


def unknown_flag(arg: str) -> CliError:
    """cobra's wording for a flag the command does not define."""
    if arg.startswith("--"):
        return CliError(f"unknown flag: {arg.partition('=')[0]}")
    return CliError(f"unknown shorthand flag: {arg[1:2]!r} in {arg}")


def parse_ate_args(args: list[str], missing: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
    """Positional arguments and flags; ``missing`` are flags this build does not define."""
    positional: list[str] = []
    flags: dict[str, str] = {"output": "table"}
    get_only: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and arg != "-":
            name, eq, inline = arg.partition("=")
            if name not in VALUE_FLAGS or name in missing:
                raise unknown_flag(arg)
            if name in GET_ONLY_FLAGS:
                get_only.append(arg)
            if eq:
                flags[VALUE_FLAGS[name]] = inline
            else:
                if i + 1 >= len(args):
                    raise CliError(f"flag needs an argument: {name}")
                flags[VALUE_FLAGS[name]] = args[i + 1]
                i += 1
        else:
            positional.append(arg)
        i += 1
    if get_only and positional[:1] != ["get"]:
        raise unknown_flag(get_only[0])  # -o is defined on get only
    return positional, flags


def main(argv: list[str]) -> int:
    stdin_text = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    try:
        with locked():
            state = load_state()
            state.setdefault("calls", []).append({"argv": argv, "stdin": stdin_text})
            save_state(state)
        # kubectl's plugin dispatch
        if not argv:
            raise CliError("no command given")
        if argv[0].startswith("-"):
            raise CliError(f"flags cannot be placed before plugin name: {argv[0]}")
        if argv[0] != "ate" or state.get("plugin_missing"):
            raise CliError(f'unknown command "{argv[0]}" for "kubectl"')
        if state.get("sleep_seconds"):
            time.sleep(float(state["sleep_seconds"]))
        with locked():
            state = load_state()
            try:
                return run_ate(argv[1:], stdin_text, state)
            finally:
                save_state(state)  # one-shot knobs are spent even when the call fails
    except CliError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def run_ate(args: list[str], stdin_text: str, state: dict[str, Any]) -> int:
    positional, flags = parse_ate_args(args, state.get("unknown_flags", ()))
    if positional[:2] == ["delete", "actor"] and len(positional) == 3 and "atespace" in flags:
        return delete_actor(state, flags["atespace"], positional[2])
    if len(positional) < 2 or positional[1] not in ("egress-policy", "egress-policies"):
        raise CliError(f'unknown command "{" ".join(positional)}" for "kubectl-ate"')
    verb, _, *names = positional
    if verb not in ("create", "get", "update", "delete"):
        raise CliError(f'unknown command "{verb}" for "kubectl-ate"')
    if len(names) != 1:
        raise CliError(f"accepts 1 arg(s), received {len(names)}")
    if "atespace" not in flags:
        raise CliError('required flag(s) "atespace" not set')
    if verb in ("create", "update") and "filename" not in flags:
        raise CliError('required flag(s) "filename" not set')
    if flags["output"] not in ("table", "json", "yaml"):
        raise CliError(f'invalid output format "{flags["output"]}". Must be one of: table, json, yaml')
    contexts = state.get("contexts")
    if contexts is not None and flags.get("context") not in contexts:
        raise CliError(f'failed to connect to ate-api-server: context "{flags.get("context")}" does not exist')
    failure = state.get("fail_next", {}).pop(verb, None)
    if failure:
        print(failure, file=sys.stderr)
        return 1
    canned = state.get("print_next", {}).pop(verb, None)
    if canned is not None:
        print(canned)
        return 0
    actor, atespace = names[0], flags["atespace"]
    handler = {"create": do_create, "get": do_get, "update": do_update, "delete": do_delete}[verb]
    return handler(state, atespace, actor, flags, stdin_text)


def delete_actor(state: dict[str, Any], atespace: str, actor: str) -> int:
    key = f"{atespace}/{actor}"
    if key not in state.get("actors", []):
        raise CliError(f"{who(atespace, actor)} not found")
    state["actors"].remove(key)
    state.get("policies", {}).pop(key, None)  # the actor's egress policy goes with it
    print(f"{who(atespace, actor)} deleted")
    return 0


def who(atespace: str, actor: str) -> str:
    return f'actor "{actor}" in atespace "{atespace}"'


def read_manifest(flags: dict[str, str], stdin_text: str, state: dict[str, Any], atespace: str) -> dict[str, Any]:
    filename = flags["filename"]
    if filename == "-":
        text = stdin_text
    else:
        with open(filename, encoding="utf-8") as handle:
            text = handle.read()
    if not text.strip():
        raise CliError(f'failed to parse egress policy manifest "{filename}": manifest is empty')
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f'failed to parse egress policy manifest "{filename}": invalid YAML: {exc}') from exc
    unknown_to_cli = sorted(field_names(raw) & set(state.get("cli_unknown_fields", [])))
    if unknown_to_cli and state.get("reject_unknown_fields", True):
        raise CliError(
            f'failed to parse egress policy manifest "{filename}": invalid EgressPolicy: '
            f'proto: (line 1:2): unknown field "{unknown_to_cli[0]}"'
        )
    policy = parse_message(raw, "EgressPolicy", state.get("reject_unknown_fields", True))
    metadata = policy.setdefault("metadata", {})
    metadata.setdefault("atespace", atespace)
    metadata.setdefault("name", "default")
    if metadata["atespace"] != atespace:
        raise CliError(f'manifest metadata.atespace "{metadata["atespace"]}" does not match --atespace "{atespace}"')
    if metadata["name"] != "default":
        raise CliError(f'manifest metadata.name "{metadata["name"]}" must be "default"')
    policy["_fields"] = sorted(field_names(raw))
    return policy


def server_rejects(policy: dict[str, Any], state: dict[str, Any], verb: str, atespace: str, actor: str) -> None:
    rejected = sorted(set(policy.pop("_fields", [])) & set(state.get("server_unknown_fields", [])))
    if rejected:
        raise CliError(
            f"failed to {verb} egress policy for {who(atespace, actor)}: rpc error: "
            f'code = InvalidArgument desc = proto: unknown field "{rejected[0]}"'
        )


def print_policy(policy: dict[str, Any], actor: str, flags: dict[str, str], state: dict[str, Any]) -> None:
    if flags["output"] == "table":
        metadata = policy["metadata"]
        print("ATESPACE   ACTOR   RULES   VERSION   AGE")
        print(f"{metadata['atespace']}   {actor}   {len(policy.get('rules', []))}   {metadata['version']}   1s")
        return
    print(json.dumps(to_protojson(policy, "EgressPolicy", state), indent=2))


def store(state: dict[str, Any], key: str, policy: dict[str, Any], *, uid: str, version: int) -> dict[str, Any]:
    stored = {
        "metadata": {
            "atespace": policy["metadata"]["atespace"],
            "name": "default",
            "uid": uid,
            "version": version,
            "createTime": "2026-10-01T00:00:00Z",
        },
        "rules": policy.get("rules", []),
    }
    state.setdefault("policies", {})[key] = stored
    return stored


def do_create(state: dict[str, Any], atespace: str, actor: str, flags: dict[str, str], stdin_text: str) -> int:
    policy = read_manifest(flags, stdin_text, state, atespace)
    server_rejects(policy, state, "create", atespace, actor)
    key = f"{atespace}/{actor}"
    prefix = f"failed to create egress policy for {who(atespace, actor)}: rpc error: "
    if key not in state.get("actors", []):
        raise CliError(prefix + "code = FailedPrecondition desc = parent Actor does not exist")
    if state.get("phantom_exists", 0) > 0:
        state["phantom_exists"] -= 1
        raise CliError(prefix + "code = AlreadyExists desc = EgressPolicy already exists")
    if key in state.get("policies", {}):
        raise CliError(prefix + "code = AlreadyExists desc = EgressPolicy already exists")
    state["next_uid"] = state.get("next_uid", 0) + 1
    store(state, key, policy, uid=f"uid-{state['next_uid']:04d}", version=1)
    print(f"egress policy for {who(atespace, actor)} created")
    return 0


def do_get(state: dict[str, Any], atespace: str, actor: str, flags: dict[str, str], _stdin: str) -> int:
    key = f"{atespace}/{actor}"
    if key not in state.get("actors", []):
        raise CliError(f"{who(atespace, actor)} not found")
    if state.pop("silent_get_once", False):
        return 0
    policy = state.get("policies", {}).get(key)
    if policy is None:
        print(f"{who(atespace, actor)} has no egress policy", file=sys.stderr)
        return 0
    print_policy(policy, actor, flags, state)
    return 0


def do_update(state: dict[str, Any], atespace: str, actor: str, flags: dict[str, str], stdin_text: str) -> int:
    policy = read_manifest(flags, stdin_text, state, atespace)
    metadata = policy["metadata"]
    if not metadata.get("uid") or not metadata.get("version"):
        raise CliError(
            f"manifest for {who(atespace, actor)} lacks the metadata.uid and metadata.version "
            'preconditions that "get egress-policy -o yaml" prints'
        )
    server_rejects(policy, state, "update", atespace, actor)
    key = f"{atespace}/{actor}"
    if key not in state.get("actors", []):
        raise CliError(
            f"failed to update egress policy for {who(atespace, actor)}: rpc error: "
            "code = FailedPrecondition desc = parent Actor does not exist"
        )
    if state.pop("vanish_on_update_once", False):
        state.get("policies", {}).pop(key, None)
    current = state.get("policies", {}).get(key)
    if current is None:
        raise CliError(
            f'{who(atespace, actor)} has no egress policy to update; create it with "kubectl ate create egress-policy"'
        )
    stale = (metadata["uid"], int(metadata["version"])) != (
        current["metadata"]["uid"],
        current["metadata"]["version"],
    )
    if state.get("abort_updates", 0) > 0 or stale:
        state["abort_updates"] = max(0, state.get("abort_updates", 0) - 1)
        raise CliError(
            "manifest's uid and version preconditions do not match those of the stored egress policy "
            f"for {who(atespace, actor)} (changed since it was read, or read from another actor's policy); "
            "re-run "
            '"get egress-policy -o yaml" and reapply the edit: rpc error: code = Aborted desc = '
            "EgressPolicy uid or version does not match"
        )
    store(state, key, policy, uid=current["metadata"]["uid"], version=current["metadata"]["version"] + 1)
    print(f"egress policy for {who(atespace, actor)} updated")
    return 0


def do_delete(state: dict[str, Any], atespace: str, actor: str, flags: dict[str, str], _stdin: str) -> int:
    key = f"{atespace}/{actor}"
    if key not in state.get("actors", []):
        raise CliError(f"{who(atespace, actor)} not found")
    current = state.get("policies", {}).get(key)
    if current is None:
        raise CliError(f"{who(atespace, actor)} has no egress policy")
    guards = (flags.get("uid"), flags.get("version"))
    if (guards[0] and guards[0] != current["metadata"]["uid"]) or (
        guards[1] and int(guards[1]) != current["metadata"]["version"]
    ):
        raise CliError(
            f"failed to delete egress policy for {who(atespace, actor)}: rpc error: "
            "code = Aborted desc = EgressPolicy uid or version does not match"
        )
    del state["policies"][key]
    print(f"egress policy for {who(atespace, actor)} deleted")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
