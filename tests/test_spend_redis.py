"""The spend report's counter reading against a real redis-server on 127.0.0.1 (started by the test run).

The counters are written exactly as envoyproxy/ratelimit writes them, at commit f2fb15770f7f (the code of the
image line Envoy Gateway v1.9 runs; reference/envoy-gateway.md):

* `src/limiter/cache_key.go` `GenerateCacheKey`: the key is the domain, `_`, then for every descriptor entry
  its key, `_`, its value, `_`, and last the window start `now / divider * divider` (`src/utils/utilities.go`
  `UnitToDivider`: Day 86400, Hour 3600, Month 30 days). No `CACHE_KEY_PREFIX` (Envoy Gateway sets none).
* `src/redis/fixed_cache_impl.go` `pipelineAppend`: `INCRBY key <hits>` then `EXPIRE key <divider + jitter>`
  in one pipeline, so the value is a Redis string holding a decimal integer, and a key outlives its window
  by up to `EXPIRATION_JITTER_MAX_SECONDS` (300 by default, `src/settings/settings.go`).
* The descriptor entries are those Envoy Gateway v1.9.0 sends for a shared rule
  (`internal/xds/translator/ratelimit.go`): the generic key `<ns>/<name>/rule/<i>` twice, then
  `rule-<i>-match-<m>` with the `x-actor-id` value for the Distinct match and `rule-<i>-match-<m>` as its own
  value for every regular-expression match that holds.

`upstream_key` below builds keys from those facts alone (not from the program's model), and
`RECORDED_KEY` is one key written out by hand from the same layout, so the test fails if either the model
or the report drifts from upstream.
"""

from __future__ import annotations

import pytest
from redis.cluster import RedisCluster

from core import spend
from core.validation import ValidatedStack, validate_stack
from tools.spend.store import CounterReadError, RedisEndpoint, connect

NOW = 1796064480  # 2026-11-30T18:48:00Z
DAY_START = 1795996800  # 2026-11-30T00:00:00Z
NEXT_DAY = 1796083200  # 2026-12-01T00:00:00Z
DOMAIN = "agent-budgets/agent-budgets"

# Recorded by hand from cache_key.go's layout: actor-a under rule 0 (the default budget, one exclusion slot),
# in the window of 2026-11-30 (Day).
RECORDED_KEY = (
    "agent-budgets/agent-budgets_"
    "agent-budgets/agent-budgets/rule/0_agent-budgets/agent-budgets/rule/0_"
    "rule-0-match-0_actor/agents/actor-a_"
    "rule-0-match-1_rule-0-match-1_"
    "1795996800"
)


def upstream_key(rule: int, subject: str, window_start: int, regex_matches: int = 1) -> str:
    """GenerateCacheKey for the descriptor Envoy Gateway sends for this project's shared rule `rule`."""
    generic = f"{DOMAIN}/rule/{rule}"
    entries = [(generic, generic), (f"rule-{rule}-match-0", subject)]
    entries += [(f"rule-{rule}-match-{m}", f"rule-{rule}-match-{m}") for m in range(1, 1 + regex_matches)]
    key = DOMAIN + "_"
    for entry_key, entry_value in entries:
        key += f"{entry_key}_{entry_value}_"
    return key + str(window_start)


def charge(client, key: str, hits: int, divider: int, jitter: int = 0) -> None:
    """What ratelimit's pipelineAppend sends for one descriptor: INCRBY, then EXPIRE, in one pipeline."""
    pipeline = client.pipeline(transaction=False)
    pipeline.incrby(key, hits)
    pipeline.expire(key, divider + jitter)
    pipeline.execute()


def stack(per: str = "Day", classes: bool = True) -> ValidatedStack:
    budgets: dict = {"default": {"tokens": 500, "per": per}}
    if classes:
        budgets["classes"] = [{"name": "large", "tokens": 5000, "per": "Day", "actors": ["agents/actor-b"]}]
    raw = {
        "actors": ["agents/actor-a", "agents/actor-b", "agents/actor-c"],
        "budgets": budgets,
        "budgetPolicy": {"exclusionSlots": 1},
    }
    return validate_stack(raw, lambda key: (False, False))


def report_at(server, validated: ValidatedStack, now: int) -> spend.SpendReport:
    """Plan, read through the report's own Redis client, build: what `python -m tools.spend` does."""
    plan = spend.plan_counters(validated.settings.actors, validated.rules, "agent-budgets", "agent-budgets", now)
    endpoint = RedisEndpoint("single", (("127.0.0.1", server.port),), "test Redis", password=server.password)
    with connect(endpoint) as store:
        values = store.read(plan.keys)
    return spend.build_report("test", DOMAIN, now, plan, values)


def by_actor(report: spend.SpendReport) -> dict[str, spend.SpendRow]:
    rows = {row.counter.actor: row for row in report.rows}
    assert len(rows) == len(report.rows), "one row per actor in this stack"
    return rows


def test_the_model_writes_the_recorded_upstream_key():
    plan = spend.plan_counters(["agents/actor-a"], stack().rules, "agent-budgets", "agent-budgets", NOW)
    assert [c.key for c in plan.counters] == [RECORDED_KEY]
    assert upstream_key(0, "actor/agents/actor-a", DAY_START) == RECORDED_KEY


def test_a_fresh_window_has_nothing_spent(redis_db):
    rows = by_actor(report_at(redis_db, stack(), NOW))
    assert {actor: (row.spent, row.remaining, row.refused) for actor, row in rows.items()} == {
        "agents/actor-a": (0, 500, False),
        "agents/actor-b": (0, 5000, False),
        "agents/actor-c": (0, 500, False),
    }
    assert {row.counter.resets_at for row in rows.values()} == {NEXT_DAY}


@pytest.mark.parametrize(
    ("spent", "remaining", "percent", "refused"),
    [(200, 300, 40.0, False), (500, 0, 100.0, False), (600, 0, 120.0, True)],
    ids=["below", "at", "over"],
)
def test_spent_below_at_and_over_the_limit(redis_db, spent, remaining, percent, refused):
    client = redis_db.client()
    for hits in (spent - 100, 100):  # two responses, as two stream-end charges
        charge(client, RECORDED_KEY, hits, 86_400, jitter=137)
    assert client.get(RECORDED_KEY) == str(spent).encode()  # the value type ratelimit leaves: a decimal string
    row = by_actor(report_at(redis_db, stack(), NOW))["agents/actor-a"]
    assert (row.spent, row.remaining, row.used_percent, row.refused) == (spent, remaining, percent, refused)
    assert row.counter.key == RECORDED_KEY


def test_a_class_member_is_read_from_its_class_rule_and_others_from_the_default(redis_db):
    client = redis_db.client()
    charge(client, upstream_key(1, "actor/agents/actor-b", DAY_START), 4200, 86_400)
    charge(client, upstream_key(0, "actor/agents/actor-c", DAY_START), 300, 86_400)
    # A stray default-rule counter for the class member (from before it joined the class) is not its budget.
    charge(client, upstream_key(0, "actor/agents/actor-b", DAY_START), 450, 86_400)
    report = report_at(redis_db, stack(), NOW)
    rows = by_actor(report)
    assert (rows["agents/actor-b"].counter.budget, rows["agents/actor-b"].counter.rule) == ("large", 1)
    assert (rows["agents/actor-b"].spent, rows["agents/actor-b"].counter.limit) == (4200, 5000)
    assert (rows["agents/actor-c"].counter.budget, rows["agents/actor-c"].spent) == ("default", 300)
    assert [row.counter.actor for row in report.rows] == ["agents/actor-b", "agents/actor-c", "agents/actor-a"]


def test_a_window_that_just_rolled_over_starts_from_nothing(redis_db):
    client = redis_db.client()
    charge(client, RECORDED_KEY, 450, 86_400, jitter=300)  # yesterday's counter: still in Redis (jitter)
    just_after_midnight = NEXT_DAY + 5
    row = by_actor(report_at(redis_db, stack(), just_after_midnight))["agents/actor-a"]
    assert (row.spent, row.counter.window_start, row.counter.resets_at) == (0, NEXT_DAY, NEXT_DAY + 86_400)
    assert row.counter.key == upstream_key(0, "actor/agents/actor-a", NEXT_DAY)
    assert client.exists(RECORDED_KEY) == 1
    charge(client, row.counter.key, 200, 86_400)
    assert by_actor(report_at(redis_db, stack(), just_after_midnight))["agents/actor-a"].spent == 200


def test_a_budget_whose_per_changed_ignores_the_old_windows_key(redis_db):
    client = redis_db.client()
    charge(client, RECORDED_KEY, 400, 86_400)  # spent under `per: Day`
    at_13_20 = DAY_START + 13 * 3600 + 20 * 60
    row = by_actor(report_at(redis_db, stack(per="Hour"), at_13_20))["agents/actor-a"]
    assert (row.spent, row.counter.per, row.counter.limit) == (0, "Hour", 500)
    assert row.counter.key == upstream_key(0, "actor/agents/actor-a", DAY_START + 13 * 3600)
    assert row.counter.resets_at == DAY_START + 14 * 3600
    # The key has no unit in it (cache_key.go): in the first hour of a day an Hour window starts where the
    # Day window did, so ratelimit itself reads the Day counter there. The report shows what ratelimit counts.
    first_hour = by_actor(report_at(redis_db, stack(per="Hour"), DAY_START + 600))["agents/actor-a"]
    assert (first_hour.counter.key, first_hour.spent) == (RECORDED_KEY, 400)


def test_ten_thousand_counters_come_back_in_one_pipelined_round_trip(redis_db):
    client = redis_db.client()
    keys = [upstream_key(0, f"actor/agents/agent-{n:05d}", DAY_START) for n in range(10_000)]
    pipeline = client.pipeline(transaction=False)
    for n, key in enumerate(keys):
        if n % 3 == 0:
            pipeline.incrby(key, n)
            pipeline.expire(key, 86_400)
    pipeline.execute()
    before = client.info("stats")["total_commands_processed"]
    endpoint = RedisEndpoint("single", (("127.0.0.1", redis_db.port),), "test Redis", password=redis_db.password)
    with connect(endpoint) as store:
        after_connect = client.info("stats")["total_commands_processed"]
        values = store.read(keys)
        after_read = client.info("stats")["total_commands_processed"]
    assert {k: v for k, v in values.items() if v is not None} == {
        k: str(n).encode() for n, k in enumerate(keys) if n % 3 == 0
    }
    # One MGET for all 10,000 keys (INFO itself counts as one command each time it is asked).
    assert after_read - after_connect == 1 + 1
    assert after_connect - before >= 2  # the report's own HELLO/AUTH and PING, before reading


def test_a_wrong_password_and_an_unreachable_server_are_told_apart(redis_db):
    wrong = RedisEndpoint(
        "single", (("127.0.0.1", redis_db.port),), "test Redis", password="nope", password_source="the test"
    )
    with pytest.raises(CounterReadError) as refused, connect(wrong):
        pass
    assert refused.value.reason == "auth" and "refused the login" in str(refused.value)
    assert "check the password (from the test)" in str(refused.value)
    missing = RedisEndpoint("single", (("127.0.0.1", redis_db.port),), "test Redis", password_source="X")
    with pytest.raises(CounterReadError) as no_password, connect(missing):
        pass
    assert no_password.value.reason == "auth"
    from tests.support.redis_server import free_port

    nobody = RedisEndpoint("single", (("127.0.0.1", free_port()),), "test Redis", password="x", timeout=2)
    with pytest.raises(CounterReadError) as unreachable, connect(nobody):
        pass
    assert unreachable.value.reason == "unreachable" and "test Redis is unreachable" in str(unreachable.value)


def test_a_key_that_is_not_a_counter_is_an_error_not_a_number(redis_db):
    redis_db.client().set(RECORDED_KEY, "lots")
    with pytest.raises(spend.SpendError, match="not a counter"):
        report_at(redis_db, stack(), NOW)


def _read_through(endpoint: RedisEndpoint, keys: list[str]) -> dict[str, bytes | None]:
    with connect(endpoint) as store:
        return store.read(keys)


def test_a_redis_cluster_is_read_node_by_node(redis_binaries_present):
    """redis.type: cluster: keys of different hash slots, read with the cluster protocol (one-node cluster)."""
    from tests.support.redis_server import local_cluster

    with local_cluster("cluster-password") as node:
        client = RedisCluster(host="127.0.0.1", port=node.port, password=node.password)
        keys = [upstream_key(0, f"actor/agents/agent-{n}", DAY_START) for n in range(50)]
        for n, key in enumerate(keys):
            charge(client, key, n + 1, 86_400)
        assert len({client.keyslot(key) for key in keys}) > 10  # really spread over slots
        client.close()
        endpoint = RedisEndpoint.from_url(
            "cluster", f"127.0.0.1:{node.port}", where="test cluster", password=node.password
        )
        values = _read_through(endpoint, [*keys, "absent"])
    assert values == {**{key: str(n + 1).encode() for n, key in enumerate(keys)}, "absent": None}


def test_a_sentinel_names_the_master_to_read(redis_db):
    """redis.type: sentinel: `<master name>,<sentinel>`; the sentinel gives the master's address."""
    from tests.support.redis_server import local_sentinel

    charge(redis_db.client(), RECORDED_KEY, 321, 86_400)
    with local_sentinel(redis_db, "budgets") as sentinel_port:
        endpoint = RedisEndpoint.from_url(
            "sentinel", f"budgets,127.0.0.1:{sentinel_port}", where="test sentinel", password=redis_db.password
        )
        assert (endpoint.master, endpoint.nodes) == ("budgets", (("127.0.0.1", sentinel_port),))
        assert _read_through(endpoint, [RECORDED_KEY]) == {RECORDED_KEY: b"321"}
        wrong = RedisEndpoint.from_url("sentinel", f"other,127.0.0.1:{sentinel_port}", where="test sentinel", timeout=2)
        with pytest.raises(CounterReadError) as unknown, connect(wrong):
            pass
    assert unknown.value.reason == "unreachable"
    assert "know no healthy master named 'other'" in str(unknown.value)


def test_the_test_server_moves_to_another_port_when_its_port_was_taken(redis_server):
    """The harness itself: a port found free can be taken before redis-server binds it."""
    import socket

    from tests.support.redis_server import free_port, local_redis

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken, free_port()])
        with local_redis("p", choose_port=lambda: next(ports)) as server:
            assert server.port != taken and server.client().ping()


def test_sentinels_with_their_own_password_are_logged_in_to_with_it(redis_db):
    """redis.sentinelPasswordConfig (envoy-ratelimit's REDIS_SENTINEL_AUTH): the Sentinels' password is sent to
    the Sentinels only, and a refusal by the Sentinels is named as theirs, not blamed on the Redis password."""
    from tests.support.redis_server import local_sentinel

    charge(redis_db.client(), RECORDED_KEY, 77, 86_400)
    with local_sentinel(redis_db, "budgets", password="sentinel-secret") as sentinel_port:

        def endpoint(**sentinel: object) -> RedisEndpoint:
            return RedisEndpoint.from_url(
                "sentinel",
                f"budgets,127.0.0.1:{sentinel_port}",
                where="test sentinel",
                password=redis_db.password,
                password_source="the Redis password variable",
                sentinel_password_source="the sentinel variable",
                timeout=2,
                **{"sentinel_auth": True, **sentinel},
            )

        assert _read_through(endpoint(sentinel_password="sentinel-secret"), [RECORDED_KEY]) == {RECORDED_KEY: b"77"}
        cases = (
            ({"sentinel_password": None}, "they need their own password: the sentinel variable"),
            ({"sentinel_password": "wrong"}, "check the Sentinels' password (from the sentinel variable)"),
            ({"sentinel_auth": False}, "they need a password of their own: set redis.sentinelPasswordConfig"),
        )
        for sentinel, fix in cases:
            with pytest.raises(CounterReadError) as refused, connect(endpoint(**sentinel)):
                pass
            message = str(refused.value)
            assert refused.value.reason == "auth"
            assert f"test sentinel: the Sentinels at 127.0.0.1:{sentinel_port} refused the login" in message
            assert fix in message and "Redis password variable" not in message
    assert "AuthenticationError" in message


def test_a_private_ca_is_trusted_besides_the_system_roots(redis_db):
    """redis.tlsCaCertificate: the server certificate is signed by a private CA (envoy-ratelimit's REDIS_TLS_CACERT)."""
    from tests.support.tls_proxy import issue_server_certificate, tls_terminator

    charge(redis_db.client(), RECORDED_KEY, 5, 86_400)
    certificate = issue_server_certificate("localhost")
    with tls_terminator(redis_db.port, certificate) as tls_port:

        def endpoint(ca_pem: str | None, host: str = "localhost") -> RedisEndpoint:
            return RedisEndpoint(
                "single", ((host, tls_port),), "test TLS Redis", tls=True, ca_pem=ca_pem, password=redis_db.password
            )

        assert _read_through(endpoint(certificate.ca_pem), [RECORDED_KEY]) == {RECORDED_KEY: b"5"}
        with pytest.raises(CounterReadError) as untrusted, connect(endpoint(None)):
            pass
        other_ca = issue_server_certificate("localhost", ca_name="another CA").ca_pem
        with pytest.raises(CounterReadError) as wrong_ca, connect(endpoint(other_ca)):
            pass
        with pytest.raises(CounterReadError) as wrong_name, connect(endpoint(certificate.ca_pem, host="127.0.0.1")):
            pass
    for refused in (untrusted, wrong_ca, wrong_name):
        assert refused.value.reason == "unreachable"
        assert "TLS is on: is the server speaking TLS, and is its certificate trusted?" in str(refused.value)
    assert "certificate verify failed" in str(untrusted.value)
