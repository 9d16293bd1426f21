"""The repository's stack files as seeds of generated configurations (tests/support/mutations.py).

Every `Pulumi.<stack>.yaml` beside `Pulumi.yaml` is a seed, so a key added to a stack file is mutated too; keys
the stack files leave out are reached through the models (`known_keys`), and sections move between stack files
(each is the other's donor). A generated stack file is read exactly as the spend report and the program read one
(`tools.spend.stack.raw_config`): secrets as placeholders, values decoded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from hypothesis import note
from hypothesis import strategies as st

from core.config_messages import aliases, model_at
from core.problems import PROJECT
from core.settings import StackSettings
from tests.support.mutations import Json, mutated
from tests.support.mutations import Path as DocumentPath
from tools.spend.stack import PROJECT_FILE, raw_config, stack_names

ROOT = Path(__file__).resolve().parents[2]
PREFIX = f"{PROJECT}:"
PROJECT_DOCUMENT: dict[str, Any] = yaml.safe_load((ROOT / PROJECT_FILE).read_text(encoding="utf-8"))
STACK_DOCUMENTS: dict[str, Json] = {
    name: yaml.safe_load((ROOT / f"Pulumi.{name}.yaml").read_text(encoding="utf-8")) for name in stack_names(ROOT)
}
# What `pulumi config set --secret` writes in a stack file (the ciphertext is never read).
SECURE_VALUE = {"secure": "v1:Zm96ekluZw==:property-test-ciphertext"}


def known_keys(path: DocumentPath, node: Mapping[Any, Any]) -> list[str]:
    """Keys the models accept at `path` of a stack document that `node` does not have yet."""
    if path == ("config",):
        return [PREFIX + alias for alias in aliases(StackSettings) if PREFIX + alias not in node]
    if len(path) < 2 or not isinstance(path[1], str) or not path[1].startswith(PREFIX):
        return []
    model = model_at([path[1].removeprefix(PREFIX), *path[2:]])
    return [alias for alias in aliases(model) if alias not in node] if model is not None else []


@dataclass
class GeneratedStack:
    """One generated stack file, and whether the secrets it needs are set in the backend."""

    stack: str
    mutations: list[str]
    document: Json
    secrets_set: bool
    raw: dict[str, Any] = field(init=False)
    secret_keys: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.raw, self.secret_keys = raw_config(PROJECT_DOCUMENT, self.document)

    def secret_state(self, key: str) -> tuple[bool, bool]:
        """As the engine answers: a key in the file is set (a secret if `secure:`); any other key is set, as a
        secret, exactly when the stack's secrets are set."""
        if key in self.raw:
            return True, key in self.secret_keys
        return self.secrets_set, self.secrets_set


@st.composite
def stack_files(draw: st.DrawFn) -> GeneratedStack:
    """A stack file of the repository with 1 to 4 mutations, maybe with a section stored as a secret."""
    stack = draw(st.sampled_from(sorted(STACK_DOCUMENTS)))
    donors = [document for name, document in STACK_DOCUMENTS.items() if name != stack]
    done, document = draw(mutated(STACK_DOCUMENTS[stack], within=("config",), known_keys=known_keys, donors=donors))
    config = document["config"]
    if config and draw(st.integers(min_value=0, max_value=7)) == 0:
        key = draw(st.sampled_from(sorted(config, key=repr)))
        config[key] = SECURE_VALUE
        done.append(f"{key} stored as a secret")
    generated = GeneratedStack(stack, done, document, draw(st.booleans()))
    note(f"stack {stack}, secrets set: {generated.secrets_set}; mutations: {done}")
    return generated
