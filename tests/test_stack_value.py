"""tools/stack_value.py: the settings `make up` reads from a stack file, defaults applied, one line per key."""

from __future__ import annotations

import yaml

from tools import stack_value


def _project(tmp_path, config):
    (tmp_path / "Pulumi.yaml").write_text("name: agent-budgets\nruntime: python\n", encoding="utf-8")
    stack = {"config": {f"agent-budgets:{key}": value for key, value in config.items()}}
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump(stack), encoding="utf-8")
    return tmp_path


BASE = {
    "kubernetes": {"context": "kind-agent-budgets"},
    "actors": ["agents/actor-a"],
    "budgets": {"default": {"tokens": 500, "per": "Day"}},
    "routes": [{"name": "mock", "models": ["mock-small"], "provider": "mock"}],
}


def test_values_set_and_defaults_print_one_line_each(tmp_path, capsys):
    project = _project(tmp_path, {**BASE, "substrate": {"trust": {"mode": "localJwks"}}})
    keys = ["substrate.trust.mode", "substrate.trust.jwksConfigMap", "gateway.namespace", "gateway.smallCluster"]
    assert stack_value.main(["--project-dir", str(project), *keys]) == 0
    assert capsys.readouterr().out.splitlines() == ["localJwks", "substrate-actor-jwks", "agent-budgets", "false"]


def test_a_map_prints_as_json(tmp_path, capsys):
    project = _project(tmp_path, BASE)
    assert stack_value.main(["--project-dir", str(project), "substrate.trust"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["mode"] == "clusterTrustBundle"


def test_an_unknown_key_names_what_there_is(tmp_path, capsys):
    project = _project(tmp_path, BASE)
    assert stack_value.main(["--project-dir", str(project), "substrate.trust.modes"]) == 1
    error = capsys.readouterr().err
    assert "stack dev: 'substrate.trust.modes' is not a setting: substrate.trust has" in error
    assert "jwksConfigMap" in error and "mode" in error


def test_a_configuration_the_program_refuses_is_refused_with_its_message(tmp_path, capsys):
    project = _project(tmp_path, {**BASE, "substrate": {"trust": {"mode": "trustMe"}}})
    assert stack_value.main(["--project-dir", str(project), "substrate.trust.mode"]) == 1
    error = capsys.readouterr().err
    assert "invalid stack configuration" in error and "agent-budgets:substrate.trust.mode" in error
