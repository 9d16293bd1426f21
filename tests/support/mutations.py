"""Hypothesis strategies that turn a real document (a stack file, a resource's props) into the mistakes people
and other programs make with it.

Nothing here knows the configuration keys: every mutation starts from the document it is given (the stack
files, the resources the program registers), so a key added to a stack file or a model is mutated too. A
mutation is one of:

- a value replaced by any JSON/YAML value: null, a boolean, an extreme or non-finite number, text with control
  characters, lone surrogates, combining marks or right-to-left marks, a very long string, an empty or a huge
  collection, or any nesting of those;
- a string or a number changed in place (odd characters inserted, repeated to a great length, an extreme value);
- a key or a list item removed, or duplicated (a list item twice; a key's value under a near-miss spelling);
- a value wrapped in an extra list or map;
- a key the document's model knows added with any value (`known_keys`, so keys the stack files leave out are
  reached too), or a subtree copied from another document at the same place (`donors`).

Shrinking works on the draws, so a failure is reported as the smallest document that still fails.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from hypothesis import strategies as st

Path = tuple[str | int, ...]
Json = Any

# Characters people paste by accident or that encoders choke on: control characters, a lone surrogate of each
# half, combining marks, right-to-left and other invisible marks, a byte-order mark, a non-breaking space.
ODD_CHARACTERS = (
    "\x00",
    "\x07",
    "\t",
    "\n",
    "\r",
    "\x1b",
    "\x7f",
    "\x85",
    "\ud800",
    "\udcff",
    "\udfff",
    "\u0301",
    "\u20dd",
    "\u202e",
    "\u200f",
    "\u200b",
    "\u2028",
    "\ufeff",
    "\u00a0",
    "\uffff",
    "\U0001f600",
)
# Text YAML or JSON would read as something else, and numbers written as prose.
ODD_TEXT = (
    "",
    " ",
    "~",
    "null",
    "None",
    "true",
    "yes",
    "on",
    "0",
    "-1",
    "1e3",
    "5,000",
    "5k",
    "NaN",
    "Infinity",
    "-inf",
    "0x10",
    "{}",
    "[]",
    "<secret>",
    "e\u0301",
    "\u202eabc",
    "a\u200fb",
    "agents/actor-a\ud800",
    "\uff41\uff47\uff45\uff4e\uff54\uff53/actor-a",  # fullwidth letters
)
EXTREME_NUMBERS: tuple[int | float, ...] = (
    0,
    -1,
    1,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**53 + 1,
    2**63,
    2**64,
    -(2**63),
    10**100,
    0.5,
    -0.0,
    1e-300,
    1e308,
    math.inf,
    -math.inf,
    math.nan,
    3.0,
)
# Lengths of "very long" text and "huge" collections: past every limit the program states, still fast to check.
LONG_TEXT_LENGTHS = (300, 4_097, 70_000)
HUGE_SIZES = (300, 3_000)
# A list is made huge only when its items are short: thousands of very long strings measure the machine, not the
# program.
HUGE_ITEMS_UP_TO = 2_000

odd_characters = st.one_of(
    st.sampled_from(ODD_CHARACTERS),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.characters(categories=["Cc", "Cf", "Mn", "Me", "Zs", "Zl", "Zp"]),
)
plain_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
odd_text = st.one_of(
    st.sampled_from(ODD_TEXT),
    plain_text,
    st.lists(st.one_of(odd_characters, plain_text), min_size=1, max_size=5).map("".join),
    st.builds(
        lambda unit, length: (unit * length)[:length],
        st.text(min_size=1, max_size=3),
        st.sampled_from(LONG_TEXT_LENGTHS),
    ),
)
odd_numbers = st.one_of(
    st.sampled_from(EXTREME_NUMBERS),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), odd_numbers, odd_text)
short_scalars = st.one_of(st.none(), st.booleans(), odd_numbers, st.sampled_from(ODD_TEXT), plain_text)
# Map keys as YAML may produce them: text of every kind, and the numbers, booleans and null YAML reads as keys.
odd_keys = st.one_of(odd_text, st.integers(min_value=-5, max_value=5), st.booleans(), st.none())


def _huge(item: st.SearchStrategy[Json]) -> st.SearchStrategy[Json]:
    size = st.sampled_from(HUGE_SIZES)
    return st.one_of(
        st.builds(lambda value, n: [copy.deepcopy(value) for _ in range(n)], item, size),
        st.builds(lambda n: [f"agents/actor-{i:05d}" for i in range(n)], size),
        st.builds(lambda value, n: {f"key-{i}": copy.deepcopy(value) for i in range(n)}, item, size),
    )


values = st.one_of(
    scalars,
    st.just([]),
    st.just({}),
    st.recursive(
        scalars,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(odd_keys, children, max_size=4)),
        max_leaves=8,
    ),
    _huge(short_scalars),
)


# ---------------------------------------------------------------------------------------------------------
# Walking a document


def node_paths(document: Json, path: Path = ()) -> Iterator[Path]:
    """Every node of a document, depth first, the root (`()`) first."""
    yield path
    if isinstance(document, dict):
        for key, value in document.items():
            yield from node_paths(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from node_paths(value, (*path, index))


def get(document: Json, path: Path) -> Json:
    for part in path:
        document = document[part]
    return document


def _set(document: Json, path: Path, value: Json) -> Json:
    if not path:
        return value
    get(document, path[:-1])[path[-1]] = value
    return document


def near_miss_keys(key: Any) -> list[Any]:
    """Spellings of `key` a person types instead: snake_case, other case, plural, padded, invisible, dotted."""
    if not isinstance(key, str):
        return [str(key)]
    prefix, _, name = key.rpartition(":")
    lead = f"{prefix}:" if prefix else ""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
    spellings = [
        snake,
        name.lower(),
        name.upper(),
        name + "s",
        name + " ",
        " " + name,
        name + "\u200b",
        f"{name}.{name}",
    ]
    return [lead + spelling for spelling in spellings if spelling != name]


# ---------------------------------------------------------------------------------------------------------
# Mutations

KnownKeys = Callable[[Path, Json], Sequence[str]]


@st.composite
def mutation(
    draw: st.DrawFn,
    document: Json,
    within: Path = (),
    known_keys: KnownKeys | None = None,
    donors: Sequence[Json] = (),
    extra_values: st.SearchStrategy[Json] | None = None,
) -> tuple[str, Json]:
    """One mutation of `document` (a deep copy is changed) below `within`; returns (what was done, result).

    `extra_values` are values of the document's own world that may replace any node too (an engine's unknown).
    """
    document = copy.deepcopy(document)
    # The node at `within` itself keeps its place and kind (a stack file's `config:` stays a map); below it,
    # anything goes.
    paths = [path for path in node_paths(document) if path[: len(within)] == within and len(path) > len(within)]
    root = get(document, within)
    if not paths or (isinstance(root, dict) and known_keys is not None and known_keys(within, root)):
        paths.insert(0, within)
    path = draw(st.sampled_from(paths))
    node = get(document, path)
    parent = get(document, path[:-1]) if len(path) > len(within) else None
    operations = ["replace", "wrap"] if parent is not None or not within else []
    if isinstance(node, str):
        operations += ["odd-text", "long-text"]
    if isinstance(node, int | float) and not isinstance(node, bool):
        operations += ["extreme-number", "extreme-number"]
    if parent is not None:
        operations.append("remove")
    if isinstance(parent, list):
        operations.append("duplicate-item")
    if isinstance(parent, dict):
        operations.append("duplicate-key")
    if isinstance(node, dict) and known_keys is not None and known_keys(path, node):
        operations.append("add-known-key")
    if isinstance(node, list) and node and len(repr(node)) <= HUGE_ITEMS_UP_TO:
        operations.append("huge-list")
    if any(_has(donor, path) for donor in donors):
        operations.append("graft")
    if not operations:
        return "nothing to change", document
    operation = draw(st.sampled_from(operations))
    where = "/".join(map(str, path)) or "<root>"

    if operation == "replace":
        value = draw(values if extra_values is None else st.one_of(values, extra_values))
        return f"{where} = {value!r:.200}", _set(document, path, value)
    if operation == "wrap":
        wrapped = draw(st.sampled_from(["list", "map"]))
        key = path[-1] if path and isinstance(path[-1], str) else "value"
        value = [node] if wrapped == "list" else {key: node}
        return f"{where} wrapped in a {wrapped}", _set(document, path, value)
    if operation == "odd-text":
        position = draw(st.integers(min_value=0, max_value=len(node)))
        inserted = draw(st.lists(odd_characters, min_size=1, max_size=3).map("".join))
        value = node[:position] + inserted + node[position:]
        return f"{where} = {value!r:.200}", _set(document, path, value)
    if operation == "long-text":
        length = draw(st.sampled_from(LONG_TEXT_LENGTHS))
        value = (node * (length // max(len(node), 1) + 1))[:length] if node else "x" * length
        return f"{where} = {len(value)} characters", _set(document, path, value)
    if operation == "extreme-number":
        value = draw(odd_numbers)
        return f"{where} = {value!r}", _set(document, path, value)
    if operation == "remove":
        del parent[path[-1]]
        return f"{where} removed", document
    if operation == "duplicate-item":
        position = draw(st.integers(min_value=0, max_value=len(parent)))
        parent.insert(position, copy.deepcopy(node))
        return f"{where} duplicated at {position}", document
    if operation == "duplicate-key":
        spelling = draw(st.sampled_from([*near_miss_keys(path[-1]), *[k for k in parent if k != path[-1]]]))
        parent[spelling] = copy.deepcopy(node)
        return f"{where} also written as {spelling!r}", document
    if operation == "add-known-key":
        assert known_keys is not None
        key = draw(st.sampled_from(list(known_keys(path, node))))
        value = draw(values)
        node[key] = value
        return f"{where}/{key} = {value!r:.200}", document
    if operation == "huge-list":
        size = draw(st.sampled_from(HUGE_SIZES))
        value = [copy.deepcopy(node[i % len(node)]) for i in range(size)]
        return f"{where} repeated to {size} items", _set(document, path, value)
    donor = draw(st.sampled_from([donor for donor in donors if _has(donor, path)]))
    value = copy.deepcopy(get(donor, path))
    return f"{where} taken from another document", _set(document, path, value)


def _has(document: Json, path: Path) -> bool:
    for part in path:
        in_map = isinstance(document, dict) and part in document
        in_list = isinstance(document, list) and isinstance(part, int) and 0 <= part < len(document)
        if in_map or in_list:
            document = document[part]
        else:
            return False
    return True


@st.composite
def mutated(
    draw: st.DrawFn,
    document: Json,
    within: Path = (),
    known_keys: KnownKeys | None = None,
    donors: Sequence[Json] = (),
    max_mutations: int = 4,
    extra_values: st.SearchStrategy[Json] | None = None,
) -> tuple[list[str], Json]:
    """1 to `max_mutations` mutations of `document` in a row; returns what was done and the result."""
    done: list[str] = []
    count = draw(st.integers(min_value=1, max_value=max_mutations))
    for _ in range(count):
        if within and not _has(document, within):
            break  # an earlier mutation removed the subtree
        what, document = draw(mutation(document, within, known_keys, donors, extra_values))
        done.append(what)
    return done, document
