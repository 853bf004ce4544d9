"""Read a problem file into plain Python data, refusing what YAML would silently accept.

PyYAML's ``safe_load`` keeps the last of two equal keys (a second ``regimes:`` block
replaces the first without a word) and reads ``1e9`` as a string (YAML 1.1 wants
``1.0e9``). Both surprise people who write numbers the way they do in Python, so this
loader refuses duplicate keys and reads exponent notation as a float.
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


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


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
        document = yaml.load(raw, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
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
