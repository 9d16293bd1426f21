#!/usr/bin/env python3
"""A fake ``kubectl`` with a fake ``ate`` plugin, for the egress-policy provider's tests and benchmark.

It answers what the real commands answer, for the commands the provider runs. Upstream sources it
follows (agent-substrate/substrate; ``egress_policy.go`` and ``printer/egress_policy.go`` @18d1c266, the
newest versions found, with update and delete; ``root.go`` @2e3e300; ``builder.go`` @1549b7f):

* ``cmd/kubectl-ate/internal/cmd/root.go``: the persistent flags of every command, ``--kubeconfig``,
  ``--context``, ``--endpoint``, ``--token-file``, ``--trace`` and ``-o/--output`` (table, json or yaml,
  checked before any command runs);
* ``cmd/kubectl-ate/internal/cmd/egress_policy.go``: ``get|create|update|delete egress-policy <actor>``
  (alias ``egress-policies``), exactly one argument; ``-a/--atespace`` on all four (required);
  ``-f/--filename`` on create and update only (required); ``--uid`` and ``--version`` (int64) on delete
  only, a passed guard being empty or below 1 refused before dialing; the manifest strict protojson
  (unknown fields refused), metadata defaulted from ``-a`` and ``default`` then checked; update refused
  before dialing without ``metadata.uid`` and ``metadata.version``; ``get`` of a missing policy prints
  "has no egress policy" to stderr and exits 0; ``update`` and ``delete`` of a missing policy and all
  three of a missing actor answer with the wording of that file; create and update print the stored
  policy in the ``-o`` format, delete prints one line whatever ``-o`` says;
* ``cmd/kubectl-ate/internal/printer/{egress_policy,printer}.go``: json prints the bare policy through
  protojson (int64 as strings, empty fields left out), table prints one row; yaml is not emulated (it
  prints a marker line, then the JSON): the provider always asks for json;
* ``cmd/kubectl-ate/internal/cmd/actor.go`` and ``printer/printer.go`` @18d1c266: ``get actors`` (alias
  ``actor``), the one listing the orphan command (tools/egress_orphans.py) needs, since no command lists
  egress policies (``get egress-policy`` takes exactly one actor, "TODO(#1550)", and ateapi's Control service
  has no List RPC for them): the client is built first; with names, ``-A`` or a missing ``-a`` is refused and
  each actor is read (a missing one fails "failed to get actor"); without names exactly one of ``-a`` and
  ``-A/--all-atespaces`` (refused in actor.go's words); json prints a ListActorsResponse (``{"actors": [...]}``,
  ``{}`` when empty, sorted by atespace, then name) for a listing or several names, the bare actor for one.
  The server filters by atespace with no existence check (``controlapi`` ``ListActors`` hands the atespace to the
  store), so an atespace without actors lists none. An actor prints only ``metadata.atespace`` and
  ``metadata.name`` here (the fake keeps no template, state or uid); table prints actor.go's columns;
* ``internal/ateclient/builder.go``: the kubeconfig is ``--kubeconfig`` (a path), else ``$KUBECONFIG``,
  else ``~/.kube/config`` (client-go loading rules), the context ``--context`` or the current one; a
  failure is "failed to connect to ate-api-server: failed to load kubeconfig: ..." in client-go's words;
  then, before any RPC, the Kubernetes lookups of a Substrate install (Service ``api`` in ``ate-system``,
  its pods, the ``ate-api-server-deployment`` Deployment, the ``ate-client`` token), each failure wrapped
  as "failed to connect to ate-api-server: <builder.go's words>: <client-go's NotFound>" (knob
  ``no_substrate``);
* the ateapi store as the review of ``controlapi/egress_policy.go`` describes it: a uid per policy, a
  version that grows on every write (update included, even with the same rules), AlreadyExists on a
  second create, FailedPrecondition for a missing actor, Aborted for stale update preconditions or
  delete guards;
* kubectl's plugin dispatch: a flag before the plugin name is refused, a missing plugin is
  ``unknown command "ate" for "kubectl"``.

pflag/cobra syntax as the real parser takes it: ``--flag value``, ``--flag=value``, ``-a value``,
``-avalue``, ``-a=value``; ``--trace`` alone or ``=true|false``; flags anywhere after the plugin name.
Simplifications, none reachable by the provider: manifests and kubeconfigs must be JSON (YAML's JSON
subset; the provider writes JSON manifests and tests write JSON kubeconfigs); the server's own rule
validation (``apivalidation/egress_policy.go``) is not repeated here beyond refusing unknown fields
(``core/egress/constraints.py`` checks those rules before any call, and its tests cover them); ``delete actor``
exists only as far as the tests use it (``delete actor <name> -a <atespace>``).

Each cluster (the ``server`` of the kubeconfig context's cluster) has its own actors and policies, so
tests can tell which cluster a call reached. State is a directory named by ``FAKE_ATE_STATE``:

    knobs.json                     behaviour switches (below)
    calls.jsonl                    one line per run: argv, stdin, the kubeconfig file and its mode
    clusters/<server>/actors/<atespace>/<name>           an actor exists (empty file)
    clusters/<server>/policies/<atespace>/<name>.json    its stored policy

Knobs (``knobs.json``):

    unknown_flags           flags this build does not define, e.g. ["--context"] or ["--uid"]
    missing_verbs           egress-policy verbs this build lacks, e.g. ["update", "delete"]
    plugin_missing          true: kubectl has no "ate" plugin
    sleep_seconds           time each call takes once connected (latency, or long enough to time out)
    abort_updates           answer Aborted to this many updates, then behave
    server_unknown_fields   field names the server refuses as unknown (InvalidArgument)
    cli_unknown_fields      field names an older kubectl-ate's own parser does not know
    phantom_exists          answer AlreadyExists to this many creates although there is no policy
    vanish_on_update_once   the next update finds the policy deleted (a concurrent delete)
    fail_next               {"<verb>": ["<stderr line>", ...]}: the next such calls fail with these lines
                            (``get actors`` is the verb "get-actors")
    fail_always             {"<verb>": "<stderr line>"}: every such call fails so
    print_next              {"<verb>": "<text>"}: the next such call prints that text and exits 0
    expiration_as_string    print expirationSeconds as "900" (default true, like protojson)
    log_calls               false: do not write calls.jsonl (the benchmark counts its own)
    track_in_flight         true: keep the highest number of runs in progress in in_flight.json
    rendezvous              N: each run, once connected, waits until N runs are in progress at once (or
                            ``rendezvous_timeout`` seconds, default 20, have passed), so a test can tell
                            that N calls overlapped without relying on sleeps (needs track_in_flight)
    no_substrate            {"<server>": "<step>"}: that cluster has no Substrate API server; the client
                            fails at ``service`` (no Service api), ``pods`` (none behind it),
                            ``deployment`` (no ate-api-server-deployment) or ``token`` (no ate-client)
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import sys
import time

STATE_ENV = "FAKE_ATE_STATE"
NOUNS = ("egress-policy", "egress-policies")
VERBS = ("get", "create", "update", "delete")

# protojson field names of the EgressPolicy messages: lowerCamel name -> type. A type is a message
# name, "str", "int" (int32), "int64" (printed as a string) or a one-item list.
SCHEMA: dict[str, dict] = {
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
    "CredentialHeader": {"header": "str", "prefix": "str", "credentialUri": "str", "actorJwt": "ActorJWTSource"},
    "ActorJWTSource": {"audiences": ["str"], "expirationSeconds": "int64"},
}

# Flags: name -> (canonical name, takes a value). Persistent ones (root.go) go with every command.
PERSISTENT_FLAGS = {
    "--kubeconfig": ("kubeconfig", True),
    "--context": ("context", True),
    "--endpoint": ("endpoint", True),
    "--token-file": ("token-file", True),
    "--output": ("output", True),
    "-o": ("output", True),
    "--trace": ("trace", False),
}
ATESPACE = {"--atespace": ("atespace", True), "-a": ("atespace", True)}
FILENAME = {"--filename": ("filename", True), "-f": ("filename", True)}
GUARDS = {"--uid": ("uid", True), "--version": ("version", True)}
ALL_ATESPACES = {"--all-atespaces": ("all-atespaces", False), "-A": ("all-atespaces", False)}
LOCAL_FLAGS: dict[tuple[str, str], dict[str, tuple[str, bool]]] = {
    ("get", "actors"): {**ATESPACE, **ALL_ATESPACES},
    ("get", "egress-policy"): ATESPACE,
    ("create", "egress-policy"): {**ATESPACE, **FILENAME},
    ("update", "egress-policy"): {**ATESPACE, **FILENAME},
    ("delete", "egress-policy"): {**ATESPACE, **GUARDS},
    ("delete", "actor"): ATESPACE,
}
REQUIRED = {
    ("get", "actors"): (),
    ("get", "egress-policy"): ("atespace",),
    ("create", "egress-policy"): ("atespace", "filename"),
    ("update", "egress-policy"): ("atespace", "filename"),
    ("delete", "egress-policy"): ("atespace",),
    ("delete", "actor"): ("atespace",),
}
ALL_VALUE_FLAGS = {
    name for table in (PERSISTENT_FLAGS, ATESPACE, FILENAME, GUARDS) for name, (_, v) in table.items() if v
}


class CliError(Exception):
    """Printed as cobra prints errors ("Error: ...") with exit status 1."""


# --- state ----------------------------------------------------------------------------------------


def root() -> str:
    path = os.environ.get(STATE_ENV)
    if not path:
        raise CliError(f"{STATE_ENV} is not set")
    return path


class locked:  # noqa: N801 - used like a function: `with locked():`
    """The state lock (an exclusive flock): held only for reads and writes of the state, never while a
    call sleeps. (No contextlib or typing here: each import costs every one of thousands of runs.)"""

    def __enter__(self) -> None:
        self.handle = open(os.path.join(root(), "lock"), "a", encoding="utf-8")
        fcntl.flock(self.handle, fcntl.LOCK_EX)

    def __exit__(self, *_: object) -> None:
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def remove_if_present(path: str) -> None:
    if os.path.exists(path):  # only the fake's own runs remove state files, under the lock
        os.remove(path)


def load_knobs() -> dict:
    try:
        with open(os.path.join(root(), "knobs.json"), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {}


def save_knobs(knobs: dict) -> None:
    path = os.path.join(root(), "knobs.json")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(knobs, handle)
    os.replace(path + ".tmp", path)


def take(knobs: dict, key: str, verb: str) -> object:
    """Consume the next one-shot entry of knob ``key`` for ``verb`` (None when there is none)."""
    queue = knobs.get(key, {}).get(verb)
    if isinstance(queue, list):
        return queue.pop(0) if queue else None
    if queue is not None:
        del knobs[key][verb]
    return queue


def cluster_slug(server: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", server)


class Cluster:
    """The actors and policies of one cluster (a directory under ``clusters/``)."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.base = os.path.join(root(), "clusters", cluster_slug(server))

    def actor_exists(self, atespace: str, actor: str) -> bool:
        return os.path.exists(os.path.join(self.base, "actors", atespace, actor))

    def actor_refs(self, atespace: str | None) -> list[tuple[str, str]]:
        """(atespace, name) of every actor, of one atespace or (None) of all."""
        base = os.path.join(self.base, "actors")
        spaces = [atespace] if atespace is not None else (sorted(os.listdir(base)) if os.path.isdir(base) else [])
        refs = []
        for space in spaces:
            folder = os.path.join(base, space)
            if os.path.isdir(folder):
                refs += [(space, name) for name in sorted(os.listdir(folder))]
        return refs

    def remove_actor(self, atespace: str, actor: str) -> None:
        os.remove(os.path.join(self.base, "actors", atespace, actor))
        remove_if_present(self.policy_path(atespace, actor))

    def policy_path(self, atespace: str, actor: str) -> str:
        return os.path.join(self.base, "policies", atespace, actor + ".json")

    def policy(self, atespace: str, actor: str) -> dict | None:
        try:
            with open(self.policy_path(atespace, actor), encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None

    def store(self, atespace: str, actor: str, policy: dict | None) -> None:
        path = self.policy_path(atespace, actor)
        if policy is None:
            remove_if_present(path)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(policy, handle)
        os.replace(path + ".tmp", path)

    def next_uid(self) -> str:
        os.makedirs(self.base, exist_ok=True)
        path = os.path.join(self.base, "next_uid")
        try:
            with open(path, encoding="utf-8") as handle:
                number = int(handle.read() or 0) + 1
        except FileNotFoundError:
            number = 1
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(str(number))
        return f"uid-{number:04d}"


# --- command line (pflag/cobra) ---------------------------------------------------------------------


def unknown_flag(arg: str) -> CliError:
    if arg.startswith("--"):
        return CliError(f"unknown flag: {arg.partition('=')[0]}")
    return CliError(f"unknown shorthand flag: {arg[1:2]!r} in {arg}")


def command_of(args: list[str]) -> tuple[str, str]:
    """The verb and noun: the first two words that are neither flags nor flag values."""
    words: list[str] = []
    i = 0
    while i < len(args) and len(words) < 2:
        arg = args[i]
        if arg.startswith("-") and arg != "-":
            name = arg.partition("=")[0] if arg.startswith("--") else arg[:2]
            takes_value = name in ALL_VALUE_FLAGS and "=" not in arg and (arg.startswith("--") or len(arg) == 2)
            i += 2 if takes_value else 1
            continue
        words.append(arg)
        i += 1
    words += [""] * (2 - len(words))
    return words[0], words[1]


def parse_args(args: list[str], defined: dict[str, tuple[str, bool]], missing: list[str]) -> tuple[list[str], dict]:
    """Positional arguments and flags as pflag parses them; unknown flags are refused like cobra."""
    positional: list[str] = []
    flags: dict = {"output": "table"}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional += args[i + 1 :]
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            i += 1
            continue
        if arg.startswith("--"):
            name, eq, inline = arg.partition("=")
            shown = name
        else:
            name, rest = arg[:2], arg[2:]
            eq, inline = ("=", rest[1:]) if rest.startswith("=") else (("=", rest) if rest else ("", ""))
            shown = f"{name[1]!r} in {arg}"
        if name not in defined or name in missing:
            raise unknown_flag(arg)
        key, takes_value = defined[name]
        if not takes_value:
            if eq and inline not in ("true", "false"):
                raise CliError(f'invalid argument "{inline}" for "{name}" flag: strconv.ParseBool: parsing "{inline}"')
            flags[key] = inline != "false"
        elif eq:
            flags[key] = inline
        else:
            if i + 1 >= len(args):
                raise CliError(f"flag needs an argument: {shown}")
            i += 1
            flags[key] = args[i]
        flags.setdefault("_set", []).append(key)
        i += 1
    return positional, flags


# --- protojson ------------------------------------------------------------------------------------


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def parse_message(value: object, message: str) -> dict:
    if not isinstance(value, dict):
        raise CliError(f"invalid EgressPolicy: proto: {message} must be an object, got {json.dumps(value)}")
    fields = SCHEMA[message]
    out: dict = {}
    for key, item in value.items():
        name = camel(key)
        if name not in fields:
            raise CliError(f'invalid EgressPolicy: proto: (line 1:2): unknown field "{key}"')
        out[name] = parse_value(item, fields[name])
    return out


def parse_value(value: object, kind: object) -> object:
    if isinstance(kind, list):
        if not isinstance(value, list):
            raise CliError(f"invalid EgressPolicy: proto: expected a list, got {json.dumps(value)}")
        return [parse_value(v, kind[0]) for v in value]
    if kind == "str":
        if not isinstance(value, str):
            raise CliError(f"invalid EgressPolicy: proto: invalid value for string field: {json.dumps(value)}")
        return value
    if kind in ("int", "int64"):
        try:
            return int(value)  # protojson takes numbers and decimal strings for integers
        except (TypeError, ValueError):
            raise CliError(
                f"invalid EgressPolicy: proto: invalid value for integer field: {json.dumps(value)}"
            ) from None
    return parse_message(value, kind)


def field_names(value: object) -> set[str]:
    names: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            names.add(key)
            names |= field_names(item)
    elif isinstance(value, list):
        for item in value:
            names |= field_names(item)
    return names


def to_protojson(value: object, kind: object, knobs: dict) -> object:
    if isinstance(kind, list):
        return [to_protojson(v, kind[0], knobs) for v in value]
    if kind == "int64":
        return str(value)
    if kind in ("str", "int"):
        return value
    out: dict = {}
    for name, item in value.items():
        sub = SCHEMA[kind][name]
        if item in ("", [], None, 0) and sub != "AllPorts":
            continue
        if name == "expirationSeconds" and not knobs.get("expiration_as_string", True):
            out[name] = int(item)
        else:
            out[name] = to_protojson(item, sub, knobs)
    return out


def print_policy(policy: dict, actor: str, output: str, knobs: dict) -> None:
    if output == "table":
        meta = policy["metadata"]
        print("ATESPACE   ACTOR   RULES   VERSION   AGE")
        print(f"{meta['atespace']}   {actor}   {len(policy.get('rules', []))}   {meta['version']}   1s")
        return
    text = json.dumps(to_protojson(policy, "EgressPolicy", knobs), indent=2, sort_keys=True)
    print(text if output == "json" else "# yaml output is not emulated\n" + text)


# --- connecting -----------------------------------------------------------------------------------


def kubeconfig_files(flags: dict) -> list[str]:
    explicit = flags.get("kubeconfig")
    if explicit:
        if not os.path.exists(explicit):
            raise CliError(
                f"failed to connect to ate-api-server: failed to load kubeconfig: stat {explicit}: "
                "no such file or directory"
            )
        return [explicit]
    env = os.environ.get("KUBECONFIG")
    candidates = [p for p in env.split(os.pathsep) if p] if env else [os.path.expanduser("~/.kube/config")]
    return [p for p in candidates if os.path.exists(p)]


def connect(flags: dict) -> Cluster:
    """Resolve the cluster as client-go's loading rules do (kubeconfig files merged, first wins)."""
    merged: dict = {"clusters": {}, "contexts": {}, "current-context": ""}
    for path in kubeconfig_files(flags):
        with open(path, encoding="utf-8") as handle:
            try:
                document = json.load(handle)
            except json.JSONDecodeError as exc:
                raise CliError(
                    f"failed to connect to ate-api-server: failed to load kubeconfig: {path}: {exc}"
                ) from exc
        for section in ("clusters", "contexts"):
            for entry in document.get(section) or []:
                merged[section].setdefault(entry["name"], entry[section[:-1]])
        merged["current-context"] = merged["current-context"] or document.get("current-context", "")
    if not merged["contexts"]:
        raise CliError(
            "failed to connect to ate-api-server: failed to load kubeconfig: invalid configuration: "
            "no configuration has been provided, try setting KUBERNETES_MASTER environment variable"
        )
    name = flags.get("context") or merged["current-context"]
    context = merged["contexts"].get(name)
    if context is None:
        raise CliError(
            "failed to connect to ate-api-server: failed to load kubeconfig: "
            f"context was not found for specified context: {name}"
        )
    cluster = merged["clusters"].get(context.get("cluster"), {})
    return Cluster(cluster.get("server", "unknown"))


# --- main -----------------------------------------------------------------------------------------


def log_call(argv: list[str], stdin_text: str, knobs: dict) -> None:
    if knobs.get("log_calls", True) is False:
        return
    kubeconfig = None
    if "--kubeconfig" in argv[:-1]:
        kubeconfig = argv[argv.index("--kubeconfig") + 1]
    else:
        kubeconfig = next((a.split("=", 1)[1] for a in argv if a.startswith("--kubeconfig=")), None)
    entry: dict = {"argv": argv, "stdin": stdin_text, "kubeconfig": kubeconfig}
    if kubeconfig and os.path.exists(kubeconfig):
        entry["kubeconfig_mode"] = stat.S_IMODE(os.stat(kubeconfig).st_mode)
        with open(kubeconfig, encoding="utf-8") as handle:
            entry["kubeconfig_text"] = handle.read()
    with open(os.path.join(root(), "calls.jsonl"), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


class in_flight:  # noqa: N801 - used like a function: `with in_flight(track):`
    """Count the runs in progress and keep the highest count in in_flight.json (knob ``track_in_flight``)."""

    def __init__(self, track: bool) -> None:
        self.track = track

    def bump(self, step: int) -> None:
        if not self.track:
            return
        with locked():
            counts = {"now": 0, "max": 0}
            path = os.path.join(root(), "in_flight.json")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as handle:
                    counts = json.load(handle)
            counts["now"] += step
            counts["max"] = max(counts["max"], counts["now"])
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(counts, handle)

    def __enter__(self) -> None:
        self.bump(1)

    def __exit__(self, *_: object) -> None:
        self.bump(-1)


def main(argv: list[str]) -> int:
    stdin_text = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    try:
        with locked():
            knobs = load_knobs()
            log_call(argv, stdin_text, knobs)
        if not argv:
            raise CliError("no command given")
        if argv[0].startswith("-"):
            raise CliError(f"flags cannot be placed before plugin name: {argv[0]}")
        if argv[0] != "ate" or knobs.get("plugin_missing"):
            raise CliError(f'unknown command "{argv[0]}" for "kubectl"')
        with in_flight(knobs.get("track_in_flight", False)):
            return run_ate(argv[1:], stdin_text, knobs)
    except CliError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def run_ate(args: list[str], stdin_text: str, knobs: dict) -> int:
    verb, noun = command_of(args)
    noun = "egress-policy" if noun in NOUNS else noun
    noun = "actors" if (verb, noun) == ("get", "actor") else noun
    if noun == "egress-policy" and verb in knobs.get("missing_verbs", []):
        # An older build: the parent command exists (for actors) without this subcommand, so cobra
        # parses the rest as the parent's flags and refuses the first local one (-a).
        parse_args(args, PERSISTENT_FLAGS, [])
        print(f"Usage:\n  kubectl-ate {verb} [command]")  # not runnable: cobra prints help, exit 0
        return 0
    if (verb, noun) not in LOCAL_FLAGS:
        raise CliError(f'unknown command "{verb}" for "kubectl-ate"')
    defined = {**PERSISTENT_FLAGS, **LOCAL_FLAGS[(verb, noun)]}
    positional, flags = parse_args(args, defined, knobs.get("unknown_flags", []))
    names = positional[2:]
    if noun == "actors":  # no argument count: a listing, or any number of actors
        if flags["output"] not in ("table", "json", "yaml"):
            raise CliError(f'invalid output format "{flags["output"]}". Must be one of: table, json, yaml')
        return get_actors(names, flags)
    # cobra's order: arguments, then the root's PersistentPreRunE (output format), then required flags
    if len(names) != 1:
        raise CliError(f"accepts 1 arg(s), received {len(names)}")
    if flags["output"] not in ("table", "json", "yaml"):
        raise CliError(f'invalid output format "{flags["output"]}". Must be one of: table, json, yaml')
    missing = [name for name in REQUIRED[(verb, noun)] if name not in flags]
    if missing:
        raise CliError("required flag(s) " + ", ".join(f'"{m}"' for m in missing) + " not set")
    actor, atespace = names[0], flags["atespace"]
    if noun == "actor":
        cluster = connect(flags)
        with locked():
            if not cluster.actor_exists(atespace, actor):
                raise CliError(f"{who(atespace, actor)} not found")
            cluster.remove_actor(atespace, actor)  # Substrate deletes the actor's policy with it
        print(f"{who(atespace, actor)} deleted")
        return 0
    handler = {"get": do_get, "create": do_create, "update": do_update, "delete": do_delete}[verb]
    return handler(atespace, actor, flags, stdin_text)


def get_actors(names: list[str], flags: dict) -> int:
    """``get actors`` as actor.go @18d1c266 runs it: connect, check the flags, read or list, print."""
    cluster = dial(flags)
    atespace, every = flags.get("atespace", ""), flags.get("all-atespaces", False)
    with transaction("get-actors"):
        if names:
            if every:
                raise CliError("-A/--all-atespaces cannot be used when getting actors; pass --atespace")
            if not atespace:
                raise CliError("--atespace is required when getting actors")
            for name in names:
                if not cluster.actor_exists(atespace, name):
                    raise CliError(
                        f'failed to get actor "{name}": rpc error: code = NotFound desc = Actor {atespace}/{name} '
                        "not found"
                    )
            refs = [(atespace, name) for name in names]
        else:
            if every and atespace:
                raise CliError("--atespace and -A/--all-atespaces are mutually exclusive")
            if not every and not atespace:
                raise CliError("specify --atespace <name> to list one atespace, or -A/--all-atespaces for all")
            refs = cluster.actor_refs(None if every else atespace)
    refs = sorted(refs)
    actors = [{"metadata": {"atespace": a, "name": n}} for a, n in refs]
    if flags["output"] == "table":
        print("ATESPACE   NAME   TEMPLATE   STATE   WORKER POD   WORKER IPS   VERSION   AGE")
        for a, n in refs:
            print(f"{a}   {n}   /   ACTOR_STATE_SUSPENDED   <none>      0   1s")
        return 0
    document: dict = actors[0] if len(names) == 1 else ({"actors": actors} if actors else {})
    text = json.dumps(document, indent=2, sort_keys=True)
    print(text if flags["output"] == "json" else "# yaml output is not emulated\n" + text)
    return 0


def who(atespace: str, actor: str) -> str:
    return f'actor "{actor}" in atespace "{atespace}"'


# builder.go's steps before the gRPC dial, each with the error it returns when the object is missing
# (client-go's NotFound reads `<resource> "<name>" not found`), as every verb wraps it.
SUBSTRATE_MISSING = {
    "service": 'failed to get api service: services "api" not found',
    "pods": "no ate-api-server pods found in ate-system namespace",
    "deployment": ('failed to get ate-api-server deployment: deployments.apps "ate-api-server-deployment" not found'),
    "token": 'failed to request ateapi bearer token: serviceaccounts "ate-client" not found',
}


def dial(flags: dict) -> Cluster:
    """Connect (kubeconfig, context, the Substrate install), then spend the call's latency outside the lock."""
    cluster = connect(flags)
    knobs = load_knobs()
    step = knobs.get("no_substrate", {}).get(cluster.server)
    if step:
        raise CliError(f"failed to connect to ate-api-server: {SUBSTRATE_MISSING[step]}")
    if knobs.get("rendezvous"):
        meet(int(knobs["rendezvous"]), float(knobs.get("rendezvous_timeout", 20)))
    seconds = knobs.get("sleep_seconds")
    if seconds:
        time.sleep(float(seconds))
    return cluster


def meet(count: int, timeout: float) -> None:
    """Wait until ``count`` runs have been in progress at once (in_flight.json's ``max``), or ``timeout``."""
    path = os.path.join(root(), "in_flight.json")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with locked(), open(path, encoding="utf-8") as handle:
            if json.load(handle)["max"] >= count:
                return
        time.sleep(0.01)


class transaction:  # noqa: N801 - used like a function: `with transaction(verb) as knobs:`
    """The state lock with the knobs loaded; a ``fail_next``/``fail_always`` failure for the verb is raised
    on entry, and one-shot knobs spent are saved even when the call fails."""

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self.lock = locked()

    def __enter__(self) -> dict:
        self.lock.__enter__()
        self.knobs = load_knobs()
        self.before = json.dumps(self.knobs, sort_keys=True)
        failure = take(self.knobs, "fail_next", self.verb) or self.knobs.get("fail_always", {}).get(self.verb)
        if failure:
            self.__exit__()
            raise CliError(failure.removeprefix("Error: "))
        return self.knobs

    def __exit__(self, *_: object) -> None:
        try:
            if json.dumps(self.knobs, sort_keys=True) != self.before:
                save_knobs(self.knobs)
        finally:
            self.lock.__exit__()


def canned(knobs: dict, verb: str) -> bool:
    text = take(knobs, "print_next", verb)
    if text is None:
        return False
    print(text)
    return True


def read_manifest(flags: dict, stdin_text: str, atespace: str, knobs: dict) -> dict:
    filename = flags["filename"]
    if filename == "-":
        text = stdin_text
    else:
        try:
            with open(filename, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise CliError(f"open {filename}: {exc.strerror.lower()}") from exc
    prefix = f'failed to parse egress policy manifest "{filename}": '
    if not text.strip():
        raise CliError(prefix + "manifest is empty")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(prefix + f"invalid YAML: {exc}") from exc
    if raw is None:
        raise CliError(prefix + "manifest is empty")
    old_cli = sorted(field_names(raw) & set(knobs.get("cli_unknown_fields", [])))
    if old_cli:
        raise CliError(prefix + f'invalid EgressPolicy: proto: (line 1:2): unknown field "{old_cli[0]}"')
    try:
        policy = parse_message(raw, "EgressPolicy")
    except CliError as exc:
        raise CliError(prefix + str(exc)) from None
    metadata = policy.setdefault("metadata", {})
    metadata["atespace"] = metadata.get("atespace") or atespace
    metadata["name"] = metadata.get("name") or "default"
    if metadata["atespace"] != atespace:
        raise CliError(f'manifest metadata.atespace "{metadata["atespace"]}" does not match --atespace "{atespace}"')
    if metadata["name"] != "default":
        raise CliError(f'manifest metadata.name "{metadata["name"]}" must be "default"')
    policy["_fields"] = sorted(field_names(raw))
    return policy


def server_rejects(policy: dict, knobs: dict, verb: str, atespace: str, actor: str) -> None:
    rejected = sorted(set(policy.pop("_fields", [])) & set(knobs.get("server_unknown_fields", [])))
    if rejected:
        raise CliError(
            f"failed to {verb} egress policy for {who(atespace, actor)}: rpc error: "
            f'code = InvalidArgument desc = proto: unknown field "{rejected[0]}"'
        )


def stored(policy: dict, uid: str, version: int, created: str) -> dict:
    return {
        "metadata": {
            "atespace": policy["metadata"]["atespace"],
            "name": "default",
            "uid": uid,
            "version": version,
            "createTime": created,
            "updateTime": "2026-10-01T00:00:00Z",
        },
        "rules": policy.get("rules", []),
    }


def do_get(atespace: str, actor: str, flags: dict, _stdin: str) -> int:
    cluster = dial(flags)
    with transaction("get") as knobs:
        if not cluster.actor_exists(atespace, actor):
            raise CliError(f"{who(atespace, actor)} not found")
        if canned(knobs, "get"):
            return 0
        policy = cluster.policy(atespace, actor)
        if policy is None:
            print(f"{who(atespace, actor)} has no egress policy", file=sys.stderr)
            return 0
        print_policy(policy, actor, flags["output"], knobs)
    return 0


def do_create(atespace: str, actor: str, flags: dict, stdin_text: str) -> int:
    policy = read_manifest(flags, stdin_text, atespace, load_knobs())
    cluster = dial(flags)
    prefix = f"failed to create egress policy for {who(atespace, actor)}: rpc error: "
    with transaction("create") as knobs:
        if canned(knobs, "create"):
            return 0
        server_rejects(policy, knobs, "create", atespace, actor)
        if not cluster.actor_exists(atespace, actor):
            raise CliError(prefix + "code = FailedPrecondition desc = parent Actor does not exist")
        if knobs.get("phantom_exists", 0) > 0:
            knobs["phantom_exists"] -= 1
            raise CliError(prefix + "code = AlreadyExists desc = EgressPolicy already exists")
        if cluster.policy(atespace, actor) is not None:
            raise CliError(prefix + "code = AlreadyExists desc = EgressPolicy already exists")
        created = stored(policy, cluster.next_uid(), 1, "2026-10-01T00:00:00Z")
        cluster.store(atespace, actor, created)
        print_policy(created, actor, flags["output"], knobs)
    return 0


def do_update(atespace: str, actor: str, flags: dict, stdin_text: str) -> int:
    policy = read_manifest(flags, stdin_text, atespace, load_knobs())
    metadata = policy["metadata"]
    if not metadata.get("uid") or not metadata.get("version"):
        raise CliError(
            f"manifest for {who(atespace, actor)} lacks the metadata.uid and metadata.version "
            'preconditions that "get egress-policy -o yaml" prints'
        )
    cluster = dial(flags)
    with transaction("update") as knobs:
        if canned(knobs, "update"):
            return 0
        server_rejects(policy, knobs, "update", atespace, actor)
        if knobs.pop("vanish_on_update_once", False):
            cluster.store(atespace, actor, None)
        current = cluster.policy(atespace, actor)
        if current is None:
            if not cluster.actor_exists(atespace, actor):
                raise CliError(f"{who(atespace, actor)} not found")
            raise CliError(
                f"{who(atespace, actor)} has no egress policy to update; "
                'create it with "kubectl ate create egress-policy"'
            )
        stale = (metadata["uid"], int(metadata["version"])) != (
            current["metadata"]["uid"],
            current["metadata"]["version"],
        )
        if knobs.get("abort_updates", 0) > 0 or stale:
            knobs["abort_updates"] = max(0, knobs.get("abort_updates", 0) - 1)
            raise CliError(
                "manifest's uid and version preconditions do not match those of the stored egress policy for "
                f"{who(atespace, actor)} (changed since it was read, or read from another actor's policy); re-run "
                '"get egress-policy -o yaml" and reapply the edit: rpc error: code = Aborted desc = '
                "EgressPolicy version conflict"
            )
        meta = current["metadata"]
        updated = stored(policy, meta["uid"], meta["version"] + 1, meta["createTime"])
        cluster.store(atespace, actor, updated)
        print_policy(updated, actor, flags["output"], knobs)
    return 0


def do_delete(atespace: str, actor: str, flags: dict, _stdin: str) -> int:
    uid, version = flags.get("uid"), None
    if "version" in flags:
        try:
            version = int(flags["version"])
        except ValueError:
            raise CliError(
                f'invalid argument "{flags["version"]}" for "--version" flag: strconv.ParseInt: parsing '
                f'"{flags["version"]}": invalid syntax'
            ) from None
    if "uid" in flags and not uid:
        raise CliError("--uid must not be empty")
    if version is not None and version < 1:
        raise CliError(f"--version must be at least 1, got {version}")
    cluster = dial(flags)
    with transaction("delete"):
        current = cluster.policy(atespace, actor)
        if current is None:
            if not cluster.actor_exists(atespace, actor):
                raise CliError(f"{who(atespace, actor)} not found")
            raise CliError(f"{who(atespace, actor)} has no egress policy")
        meta = current["metadata"]
        if (uid and uid != meta["uid"]) or (version is not None and version != meta["version"]):
            what = "UID" if uid and uid != meta["uid"] else "version"
            raise CliError(
                f"failed to delete egress policy for {who(atespace, actor)}: rpc error: "
                f"code = Aborted desc = EgressPolicy {what} conflict"
            )
        cluster.store(atespace, actor, None)
    print(f"egress policy for {who(atespace, actor)} deleted")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
