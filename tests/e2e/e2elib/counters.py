"""Per-actor rate-limit counters, read straight from the rate-limit service's Redis.

The ratelimit service keys a counter as ``<domain>_<key1>_<value1>_..._<window start>``
(envoyproxy/ratelimit src/limiter/cache_key.go). For the budget rules the Distinct ``x-actor-id``
entry puts the actor's JWT subject in the key, so every counter of ``agents/actor-a`` contains
``_actor/agents/actor-a_``. A counter is read with ``redis-cli --scan --pattern`` and ``GET``, and an
actor's spend is the sum over its keys (one per rule and window). A pool's rule has no Distinct entry, so its
one counter holds no actor: it is read by the rule's own first entry, ``<domain>_<domain>/rule/<index>_...``
(envoyproxy/gateway v1.9.0 internal/xds/translator/ratelimit.go).

Redis needs a password (Secret ``redis-auth``). It goes to ``redis-cli`` as ``REDISCLI_AUTH``
inside the pod, read from the exec's stdin: never on a command line, never printed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.ratelimit_model import shared_rule_of_key

from .kube import Kube
from .runner import check

GLOB_SPECIALS = "\\*?[]"

# Runs inside the Redis pod: `sh -c SCRIPT sh <get|del> <pattern>...`. Prints one line per key:
# "<pattern index>\t<key>\t<GET value or DEL count>". The password arrives on stdin.
SCRIPT = r"""
IFS= read -r password || true
if [ -n "$password" ]; then
  REDISCLI_AUTH="$password"
  export REDISCLI_AUTH
fi
unset password
pong="$(redis-cli PING 2>&1)"
if [ "$pong" != PONG ]; then
  echo "redis-cli PING failed: $pong" >&2
  exit 3
fi
mode="$1"
shift
i=0
for pattern in "$@"; do
  redis-cli --scan --pattern "$pattern" | while IFS= read -r key; do
    [ -n "$key" ] || continue
    if [ "$mode" = del ]; then
      value="$(redis-cli DEL "$key")"
    else
      value="$(redis-cli GET "$key")"
    fi
    printf '%s\t%s\t%s\n' "$i" "$key" "$value"
  done
  i=$((i + 1))
done
"""


class CounterError(RuntimeError):
    """The counters could not be read."""


def escape_glob(text: str) -> str:
    """Escapes Redis glob specials so a subject matches only itself."""
    return "".join(f"\\{char}" if char in GLOB_SPECIALS else char for char in text)


def rule_pattern(domain: str, index: int) -> str:
    """The SCAN pattern of every counter of one shared rule, e.g. ``agent-budgets/agent-budgets_..._rule/2_*``."""
    generic = f"{domain}/rule/{index}"
    return f"{escape_glob(domain)}_{escape_glob(generic)}_{escape_glob(generic)}_*"


def key_pattern(subject: str) -> str:
    """The SCAN pattern of every counter of one actor, e.g. ``*_actor/agents/actor-a_*``."""
    if not subject or "\n" in subject:
        raise ValueError(f"bad subject {subject!r}")
    return f"*_{escape_glob(subject)}_*"


@dataclass(frozen=True)
class CounterReading:
    subject: str
    keys: tuple[tuple[str, int], ...] = ()

    @property
    def total(self) -> int:
        return sum(value for _, value in self.keys)

    def by_rule(self, domain: str) -> dict[int, int]:
        """Each budget rule's counter of this actor, by rule index (one key per rule and window).

        A shared rule's first descriptor entry is `<domain>/rule/<index>` (Envoy Gateway v1.9.0
        internal/xds/translator/ratelimit.go), so the key holds `_<domain>/rule/<index>_`.
        """
        totals: dict[int, int] = {}
        for key, value in self.keys:
            index = shared_rule_of_key(domain, key)
            if index is not None:
                totals[index] = totals.get(index, 0) + value
        return totals


def parse_script_output(text: str, patterns: int) -> list[list[tuple[str, int]]]:
    """Groups the script's ``index<TAB>key<TAB>value`` lines by pattern index.

    An empty value (a key that expired between SCAN and GET) counts 0; anything else that is not an
    integer is an error, because a wrong number would make every check lie.
    """
    grouped: list[list[tuple[str, int]]] = [[] for _ in range(patterns)]
    seen: set[tuple[int, str]] = set()
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        index, key, raw = int(parts[0]), parts[1], parts[2].strip()
        if index >= patterns:
            raise CounterError(f"counter output names pattern {index}, but only {patterns} were asked for")
        if (index, key) in seen:  # SCAN may return a key twice
            continue
        seen.add((index, key))
        if raw == "":
            value = 0
        else:
            try:
                value = int(raw)
            except ValueError:
                raise CounterError(f"counter {key!r} holds {raw!r}, not an integer") from None
        grouped[index].append((key, value))
    for keys in grouped:
        keys.sort()
    return grouped


class Counters:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        pod: str,
        secret: str,
        secret_key: str,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.pod = pod
        self.secret = secret
        self.secret_key = secret_key
        self.sleep = sleep
        self.clock = clock
        self._password: str | None = None

    def _password_line(self) -> str:
        if self._password is None:
            try:
                self._password = self.kube.secret_value(self.namespace, self.secret, self.secret_key)
            except Exception as exc:
                raise CounterError(
                    f"cannot read the Redis password from Secret {self.namespace}/{self.secret}: {exc}"
                ) from exc
        return self._password + "\n"

    def _exec(self, mode: str, patterns: Sequence[str]) -> list[list[tuple[str, int]]]:
        result = self.kube.run(
            "-n",
            self.namespace,
            "exec",
            "-i",
            self.pod,
            "--",
            "sh",
            "-c",
            SCRIPT,
            "sh",
            mode,
            *patterns,
            input=self._password_line(),
            timeout=60,
        )
        try:
            check(result, f"redis-cli in {self.namespace}/{self.pod}")
        except Exception as exc:
            raise CounterError(str(exc)) from exc
        return parse_script_output(result.stdout, len(patterns))

    def read(self, subjects: Iterable[str]) -> dict[str, CounterReading]:
        subjects = list(subjects)
        grouped = self._exec("get", [key_pattern(s) for s in subjects])
        return {s: CounterReading(s, tuple(keys)) for s, keys in zip(subjects, grouped, strict=True)}

    def rule_total(self, domain: str, index: int) -> int:
        """The sum of one shared rule's counters (a pool's: one per window, whoever charged it)."""
        [keys] = self._exec("get", [rule_pattern(domain, index)])
        return sum(value for _, value in keys)

    def clear_rule(self, domain: str, index: int) -> int:
        """Deletes every counter of one shared rule; returns how many keys went."""
        [keys] = self._exec("del", [rule_pattern(domain, index)])
        return sum(value for _, value in keys)

    def totals(self, subjects: Iterable[str]) -> dict[str, int]:
        return {s: reading.total for s, reading in self.read(subjects).items()}

    def clear(self, subjects: Iterable[str]) -> int:
        """Deletes every counter of these actors; returns how many keys went."""
        grouped = self._exec("del", [key_pattern(s) for s in subjects])
        return sum(value for keys in grouped for _, value in keys)

    def wait_for(self, expected: Mapping[str, int], timeout: float = 10.0, interval: float = 0.25) -> dict[str, int]:
        """Polls until each actor's total equals the expected value (charges land at stream end,
        shortly after the caller got its response); returns the last totals either way."""
        deadline = self.clock() + timeout
        while True:
            totals = self.totals(expected)
            if all(totals[s] == v for s, v in expected.items()) or self.clock() >= deadline:
                return totals
            self.sleep(interval)
