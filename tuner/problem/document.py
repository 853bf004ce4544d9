"""Read a problem file into plain Python data, refusing what YAML would silently accept.

PyYAML's ``safe_load`` keeps the last of two equal keys (a second ``regimes:`` block
replaces the first without a word), reads ``1e9`` as a string (YAML 1.1 wants
``1.0e9``) and ``on``/``off``/``yes``/``no`` as booleans (so the keys of an on/off
arrival process would become ``True`` and ``False``). This loader refuses duplicate keys
and reads scalars as YAML 1.2 does: exponent notation is a float, only ``true`` and
``false`` are booleans.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ..errors import ProblemError

_FLOAT = re.compile(
    r"""^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[0-9][0-9_]*[eE][-+]?[0-9]+
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |\.(?:inf|Inf|INF))$
    |^\.(?:nan|NaN|NAN)$""",
    re.VERBOSE,
)


class _Loader(yaml.SafeLoader):
    """Safe YAML with unique keys and Python-style floats."""

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
                    None, None, f"key {key!r} appears twice in the same mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


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
