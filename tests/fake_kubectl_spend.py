#!/usr/bin/env python3
"""A fake `kubectl` for the spend report's tests: the two calls the report makes, answered as kubectl does.

* `kubectl [--kubeconfig F] --context C -n NS get secret NAME -o jsonpath={.data.KEY}` prints the base64
  value with no trailing newline (kubectl's jsonpath printer, k8s.io/client-go `util/jsonpath`); a missing
  Secret is `Error from server (NotFound): secrets "NAME" not found` on stderr, exit status 1.
* `kubectl ... -n NS port-forward --address 127.0.0.1 service/NAME :PORT` prints
  `Forwarding from 127.0.0.1:LOCAL -> PORT` (client-go `tools/portforward/portforward.go`) and runs until
  it is terminated. A real kubectl binds a free local port and relays it to the pod; here LOCAL is the port
  of the test's real redis-server, which stands in for the relayed pod. A missing Service is
  `Error from server (NotFound): services "NAME" not found`, exit status 1.
* An unknown context is `error: context "C" does not exist`, exit status 1 (client-go
  `tools/clientcmd/client_config.go`; what kubectl v1.32 prints for `--context` naming no context).
* The kubeconfig as client-go's loading rules find it (`tools/clientcmd/loader.go`): `--kubeconfig F` is
  the only file, and must exist (`error: stat F: no such file or directory`, exit status 1, before anything
  else); else the files listed in `$KUBECONFIG` that exist; else `~/.kube/config`, which the state's
  `contexts` stand in for. The contexts are those the files name (YAML or JSON).

State is the JSON file named by `FAKE_KUBECTL_SPEND`:

    contexts    the kube contexts of the default kubeconfig (no --kubeconfig, no $KUBECONFIG)
    secrets     {"NS/NAME": {"KEY": "<plain value>"}}
    services    {"NS/NAME": <local port to announce>}
    silent      true: port-forward prints nothing and hangs (a cluster that never answers)
    calls       appended by the fake: {"argv": [...], "pid": N, and with --kubeconfig F: "kubeconfig": F,
                "kubeconfig_mode": <permission bits>, "kubeconfig_text": <its contents> when F exists}
    stopped     appended by the fake: the pid of every port-forward that received SIGTERM
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import signal
import stat
import sys
import time
from typing import Any

import yaml

STATE_ENV = "FAKE_KUBECTL_SPEND"


def update_state(change: Any) -> dict[str, Any]:
    path = os.environ[STATE_ENV]
    with open(path, "r+", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        state = json.load(file)
        change(state)
        file.seek(0)
        file.truncate()
        json.dump(state, file)
    return state


def fail(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.exit(1)


def call_record(argv: list[str]) -> dict[str, Any]:
    record: dict[str, Any] = {"argv": argv, "pid": os.getpid()}
    if argv[:1] == ["--kubeconfig"] and len(argv) > 1:
        path = argv[1]
        record["kubeconfig"] = path
        if os.path.exists(path):
            record["kubeconfig_mode"] = stat.S_IMODE(os.stat(path).st_mode)
            with open(path, encoding="utf-8") as file:
                record["kubeconfig_text"] = file.read()
    return record


def contexts_of(path: str) -> list[str]:
    with open(path, encoding="utf-8") as file:
        document = yaml.safe_load(file) or {}
    return [entry.get("name") for entry in document.get("contexts") or [] if isinstance(entry, dict)]


def known_contexts(explicit: str | None, state: dict[str, Any]) -> list[str]:
    """The contexts kubectl would see, by client-go's loading rules."""
    if explicit is not None:
        if not os.path.exists(explicit):
            fail(f"error: stat {explicit}: no such file or directory")
        return contexts_of(explicit)
    listed = [path for path in os.environ.get("KUBECONFIG", "").split(os.pathsep) if path]
    if listed:
        return [name for path in listed if os.path.exists(path) for name in contexts_of(path)]
    return list(state.get("contexts", []))


def main(argv: list[str]) -> None:
    record = call_record(argv)
    state = update_state(lambda s: s.setdefault("calls", []).append(record))
    args = list(argv)
    explicit = None
    if args[:1] == ["--kubeconfig"]:
        explicit, args = args[1], args[2:]
    contexts = known_contexts(explicit, state)
    if args[:1] != ["--context"]:
        fail("fake kubectl: the report must always pass --context")
    context, args = args[1], args[2:]
    if context not in contexts:
        fail(f'error: context "{context}" does not exist')
    if args[:1] != ["-n"]:
        fail("fake kubectl: expected -n NAMESPACE")
    namespace, args = args[1], args[2:]
    if args[:2] == ["get", "secret"] and len(args) == 5 and args[3] == "-o":
        name, output = args[2], args[4]
        key = output.removeprefix("jsonpath={.data.").removesuffix("}")
        secret = state.get("secrets", {}).get(f"{namespace}/{name}")
        if secret is None:
            fail(f'Error from server (NotFound): secrets "{name}" not found')
        value = secret.get(key)
        sys.stdout.write(base64.b64encode(value.encode()).decode() if value is not None else "")
        return
    if args[:3] == ["port-forward", "--address", "127.0.0.1"] and len(args) == 5:
        resource, port = args[3], args[4]
        if not resource.startswith("service/") or not port.startswith(":"):
            fail(f"fake kubectl: unexpected port-forward {resource} {port}")
        name = resource.removeprefix("service/")
        local = state.get("services", {}).get(f"{namespace}/{name}")
        if local is None:
            fail(f'Error from server (NotFound): services "{name}" not found')

        def stop(signum: int, frame: Any) -> None:
            update_state(lambda s: s.setdefault("stopped", []).append(os.getpid()))
            sys.exit(0)

        signal.signal(signal.SIGTERM, stop)
        if not state.get("silent"):
            print(f"Forwarding from 127.0.0.1:{local} -> {port.removeprefix(':')}", flush=True)
        while True:
            time.sleep(0.1)
    fail(f"fake kubectl: unexpected command {argv}")


if __name__ == "__main__":
    main(sys.argv[1:])
