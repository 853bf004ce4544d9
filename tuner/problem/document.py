"""Read a problem file into plain Python data, refusing what YAML would silently accept.

PyYAML's ``safe_load`` keeps the last of two equal keys (a second ``regimes:`` block
replaces the first without a word), reads ``1e9`` as a string (YAML 1.1 wants
``1.0e9``) and ``on``/``off``/``yes``/``no`` as booleans (so the keys of an on/off
arrival process would become ``True`` and ``False``). This loader refuses duplicate keys
and reads scalars as YAML 1.2 does: exponent notation is a float, only ``true`` and
``false`` are booleans. It also bounds what aliases expand to: ten nested lists of ten
aliases each are a billion values (a "billion laughs" file) that any walk over the data
(validation, a message quoting it) would take hours over, so a document larger than
:data:`MAX_EXPANDED_NODES` once its aliases are expanded, or one whose alias contains
itself, is refused before any of it is constructed.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ..errors import ProblemError, shown_value

_FLOAT = re.compile(
    r"""^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[0-9][0-9_]*[eE][-+]?[0-9]+
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |\.(?:inf|Inf|INF))$
    |^\.(?:nan|NaN|NAN)$""",
    re.VERBOSE,
)


#: Values a document may hold with its aliases expanded; the largest shipped problem
#: holds under 500, so this leaves 200 times that.
MAX_EXPANDED_NODES = 100_000


class _Loader(yaml.SafeLoader):
    """Safe YAML with unique keys, Python-style floats and bounded alias expansion."""

    def compose_document(self) -> yaml.Node:
        node = super().compose_document()
        _check_expansion(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        self.flatten_mapping(node)
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # unhashable: the base constructor reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {shown_value(key)} appears twice in the same mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a node graph whose tree (aliases expanded) is too large or infinite.

    Sizes are memoised per node, so the walk costs the nodes written, not the expansion;
    it is iterative, so a deep document does not exhaust Python's stack.
    """
    sizes: dict[int, int] = {}
    visiting: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children = _children(node)
        if children_done:
            visiting.discard(id(node))
            sizes[id(node)] = size = 1 + sum(sizes[id(child)] for child in children)
            if size > MAX_EXPANDED_NODES:
                raise yaml.composer.ComposerError(
                    None, None, f"the document expands to more than {MAX_EXPANDED_NODES:,} values through its "
                    "aliases (*name); write the repeated part out, or alias less of it", node.start_mark)
        elif id(node) in visiting:
            raise yaml.composer.ComposerError(
                None, None, "an alias (*name) refers to a value that contains it, which never ends", node.start_mark)
        elif id(node) not in sizes:
            visiting.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in children)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


# YAML 1.1 also reads yes/no/on/off as booleans, which turns the keys of
# {process: onoff, on: 2 s, off: 8 s} into True and False; keep only true/false.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def parse_yaml(text: str | bytes) -> object:
    """YAML as problem files read it: safe, unique keys, ``1e9`` a float.

    Raises:
        yaml.YAMLError: malformed YAML or a duplicate key.
    """
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def read_document(path: Path) -> tuple[bytes, dict]:
    """The file's bytes (for its hash) and its top-level mapping.

    Raises:
        ProblemError: the file cannot be read, is not YAML, is empty, or is not a mapping.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read problem file ({exc.strerror or exc})") from None
    try:
        document = parse_yaml(raw)
    except RecursionError:
        raise ProblemError(f"{path}: YAML: malformed YAML (nested too deeply to read)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ProblemError(f"{path}: {where}: malformed YAML ({reason})") from None
    if document is None:
        raise ProblemError(f"{path}: top level: the file is empty; a problem needs name, service, families and regimes")
    if not isinstance(document, dict):
        raise ProblemError(
            f"{path}: top level: expected a mapping of keys (name, service, families, regimes) "
            f"but got {type(document).__name__}"
        )
    return raw, document
