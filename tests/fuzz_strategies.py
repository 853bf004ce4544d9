"""Hypothesis strategies for tests/test_fuzz.py: hostile-but-ordinary input to the CLI.

Each strategy draws a *case*: a small frozen description (what was mutated, where, to
what) that can render itself to files and to an argument list, and that reads well in a
falsifying example. Mutations start from the shipped problem files (search_spaces/*.yaml)
parsed as the project parses them, so a case differs from a file that loads in one
place; option cases start from a command line that succeeds.
"""

from __future__ import annotations

import copy
import re
import csv
import io
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from tuner.problem.document import parse_yaml
from tuner.units import BYTE_UNITS, TIME_UNITS

ROOT = Path(__file__).resolve().parents[1]
SPACES = ROOT / "search_spaces"
TRACES = SPACES / "traces"

#: The shipped problems the fuzz cases start from (the slowest to simulate are drawn least).
FAST_PROBLEMS = ("seed_example", "toy_llm", "toy_embedder")
ALL_PROBLEMS = tuple(sorted(p.stem for p in SPACES.glob("*.yaml")))
#: Problems whose regimes replay a trace (the broken-trace cases rewrite their traces).
TRACE_PROBLEMS = ("toy_llm", "llm_decode")

Path_ = tuple[Any, ...]


@lru_cache(maxsize=None)
def shipped(name: str) -> dict:
    """A shipped problem file as the project's loader reads it (cached; deep-copy to edit)."""
    document = parse_yaml((SPACES / f"{name}.yaml").read_text())
    assert isinstance(document, dict)
    return document


def node_paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every key and list index in ``node``, as paths from the top (parents before children)."""
    paths: list[Path_] = []
    if isinstance(node, dict):
        children = node.items()
    elif isinstance(node, list):
        children = enumerate(node)
    else:
        return paths
    for key, child in children:
        paths.append((*prefix, key))
        paths.extend(node_paths(child, (*prefix, key)))
    return paths


def mapping_paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    """The paths of every mapping in ``node`` (``()`` is the top level)."""
    found = [prefix] if isinstance(node, dict) else []
    if isinstance(node, dict):
        for key, child in node.items():
            found.extend(mapping_paths(child, (*prefix, key)))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found.extend(mapping_paths(child, (*prefix, index)))
    return found


def scalar_paths(node: Any) -> list[Path_]:
    """Paths to numbers and strings: where an expression, a quantity or a count may sit."""
    return [p for p in node_paths(node) if isinstance(get(node, p), (int, float, str))
            and not isinstance(get(node, p), bool)]


def get(node: Any, path: Path_) -> Any:
    for part in path:
        node = node[part]
    return node


def dotted(path: Path_) -> str:
    """``('service', 'operators', 0, 'family')`` → ``service.operators[0].family``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<top>"


# --- values ----------------------------------------------------------------------------

WRONG_TYPES: tuple[Any, ...] = (
    "eight", "", [1, 2], [], {"a": 1}, {}, None, True, False, 64.0, "5", [[[]]], {"nested": {"deeper": [None]}},
)
EXTREME_NUMBERS: tuple[Any, ...] = (
    1e12, 1e308, -1e308, -1, 0, 0.0, -0.0, 1e-300, 5e-324, 2**31, 2**63, 2**64, 10**30, -(2**63),
    "1e12 s", "1e308 GiB", "1e12 GiB", "-0 s", "1e-300 ms", "1e12", "999999999999999999999999 TiB",
)
NON_FINITE: tuple[Any, ...] = (
    math.nan, math.inf, -math.inf, "nan", "inf", "-inf", "nan s", "inf GiB", "inf * ms", "1e308 * 1e308",
)
HOSTILE_EXPRESSIONS: tuple[str, ...] = (
    "10**10**10", "9**9**9**9", "2**1024", "(-8)**(1/3)", "0**-1", "1/0", "1//0", "1%0", "cdiv(1, 0)",
    "log2(0)", "log2(-1)", "sqrt(-1)", "ceil(1e308*10)", "floor(inf)", "max()", "min(1)",
    "__import__('os')", "__import__('os').system('true')", "().__class__.__bases__", "open('/etc/passwd')",
    "exec('1')", "lambda: 1", "[1]*10**9", "'a'*10**9", "x.y", "a[0]", "1 if 1 else 2", "1 < 2",
    "max(1, key=abs)", "((1 + 2)", "1 + 2)", "(((((((((((((((((((((((((1", ")" * 50, "(" * 5000 + "1" + ")" * 5000,
    "1 +", "* 2", "2 GiB * batch", "batch batch", "1e999", "0x10", "1_000", "\x00", "\u202e1+1", "ẞ + 1",
    "1" * 20000, "x" * 20000, "1+" * 10000 + "1", "-" * 10000 + "1", "not_defined_anywhere",
    "undefined_later + 1", "tokens", "context", "ms ms", "",
)
TRACE_PATH_VALUES: tuple[Any, ...] = (
    "traces/missing.csv", "traces", "/dev/null", "/dev/zero", "/", "", "../../../../etc/shadow",
    "traces/azure_llm_conv_2023.csv\x00", "x" * 5000, 7, None,
)


def value_kinds() -> dict[str, st.SearchStrategy[Any]]:
    return {
        "wrong type": st.sampled_from(WRONG_TYPES),
        "extreme number": st.sampled_from(EXTREME_NUMBERS),
        "non-finite number": st.sampled_from(NON_FINITE),
        "hostile expression": st.sampled_from(HOSTILE_EXPRESSIONS),
    }


# --- problem-file mutations ------------------------------------------------------------

@dataclass(frozen=True)
class ProblemMutation:
    """One edit of a shipped problem file: ``kind`` at ``path`` (``value`` where it sets one)."""

    base: str
    kind: str  # drop | duplicate key | wrong type | extreme number | non-finite number | hostile expression | add key
    #          | unitless quantity
    path: Path_
    value: Any = None

    def __repr__(self) -> str:
        shown = repr(self.value)
        if len(shown) > 80:
            shown = shown[:60] + f"…<{len(shown)} chars>"
        return f"ProblemMutation({self.base}: {self.kind} at {dotted(self.path)}" + (
            f" = {shown})" if self.kind not in ("drop",) else ")")

    def _repr_pretty_(self, printer, cycle) -> None:  # Hypothesis prints cases with this
        printer.text(repr(self))

    def document(self) -> dict:
        document = copy.deepcopy(shipped(self.base))
        if self.kind == "duplicate key":
            return document  # applied to the YAML text (a dict cannot hold a key twice)
        parent = get(document, self.path[:-1])
        if self.kind == "drop":
            del parent[self.path[-1]]
        else:
            parent[self.path[-1]] = self.value
        return document

    def text(self) -> str:
        """The mutated file's YAML text."""
        document = self.document()
        if self.kind != "duplicate key":
            return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=10**6)
        return duplicate_key_yaml(document, self.path, self.value)


def duplicate_key_yaml(document: dict, path: Path_, value: Any) -> str:
    """``document`` as YAML whose mapping at ``path[:-1]`` holds key ``path[-1]`` twice:
    the second time with ``value`` (or the same value when ``value`` is None)."""
    text = yaml.safe_dump(document, sort_keys=False, width=10**6)
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    node = root
    for part in path[:-1]:
        if isinstance(node, yaml.MappingNode):
            node = next(v for k, v in node.value if k.value == str(part))
        else:
            node = node.value[part]
    assert isinstance(node, yaml.MappingNode)
    key_node, value_node = next((k, v) for k, v in node.value if k.value == str(path[-1]))
    if value is not None:
        value_node = yaml.compose(yaml.safe_dump(value), Loader=yaml.SafeLoader)
    node.value.append((copy.deepcopy(key_node), value_node))
    return yaml.serialize(root, Dumper=yaml.SafeDumper, width=10**6, allow_unicode=True)


@st.composite
def problem_mutations(draw: st.DrawFn, bases: tuple[str, ...] = ALL_PROBLEMS) -> ProblemMutation:
    """A shipped problem with one key dropped or duplicated, or one value replaced by a
    wrong type, an extreme or non-finite number, or a hostile expression."""
    base = draw(st.sampled_from(bases))
    document = shipped(base)
    kind = draw(st.sampled_from(("drop", "duplicate key", "wrong type", "extreme number", "non-finite number",
                                 "hostile expression", "add key")))
    if kind == "duplicate key":
        mapping = draw(st.sampled_from([p for p in mapping_paths(document) if get(document, p)]))
        key = draw(st.sampled_from(sorted(get(document, mapping), key=str)))
        other = draw(st.one_of(st.none(), st.sampled_from(WRONG_TYPES + EXTREME_NUMBERS)))
        return ProblemMutation(base, kind, (*mapping, key), other)
    if kind == "drop":
        return ProblemMutation(base, kind, draw(st.sampled_from(node_paths(document))))
    if kind == "add key":
        mapping = draw(st.sampled_from(mapping_paths(document)))
        key = draw(st.sampled_from(("spare", "regime", "Name", "rate", "x" * 300, "1", "__class__", "")))
        if key in get(document, mapping):
            key = key + "_extra"
        value = draw(st.sampled_from(WRONG_TYPES + ("1 GiB", 3)))
        return ProblemMutation(base, kind, (*mapping, key), value)
    if kind == "wrong type":
        path = draw(st.sampled_from(node_paths(document)))
    else:
        path = draw(st.sampled_from(scalar_paths(document)))
    return ProblemMutation(base, kind, path, draw(value_kinds()[kind]))


#: ``NUMBER UNIT`` as a problem file writes a time or a size (``10 ms``, ``80 GiB``).
UNIT_LITERAL = re.compile(r"^\s*([0-9][0-9.eE+-]*)\s*(%s)\s*$" % "|".join(
    sorted(map(re.escape, {**BYTE_UNITS, **TIME_UNITS}), key=len, reverse=True)))


def unit_paths(document: dict) -> list[Path_]:
    """Every scalar written as ``NUMBER UNIT``."""
    return [path for path in scalar_paths(document)
            if isinstance(get(document, path), str) and UNIT_LITERAL.match(get(document, path))]


@st.composite
def unitless_quantities(draw: st.DrawFn, bases: tuple[str, ...] = ALL_PROBLEMS) -> ProblemMutation:
    """A shipped problem with one time or size written without its unit: the same number
    (as YAML writes a number, or quoted), or another one (issue 38, item 4: ``tpot: 60``
    was read as 60 seconds, silently)."""
    base = draw(st.sampled_from(bases))
    document = shipped(base)
    path = draw(st.sampled_from(unit_paths(document)))
    number = float(UNIT_LITERAL.match(get(document, path)).group(1))
    number = draw(st.sampled_from((number, 0, 1, 60, 0.5, 1e-3, 80, 2**30)))
    written = draw(st.sampled_from(("number", "text")))
    value = (int(number) if float(number).is_integer() else number) if written == "number" else f"{number:g}"
    return ProblemMutation(base, "unitless quantity", path, value)


# --- broken traces ---------------------------------------------------------------------

@lru_cache(maxsize=None)
def trace_rows(name: str = "azure_llm_conv_2023.csv", rows: int = 400) -> tuple[list[str], list[list[str]]]:
    """The header and the first ``rows`` rows of a shipped trace (a short trace simulates fast)."""
    with (TRACES / name).open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        body = [row for _, row in zip(range(rows), reader)]
    return header, body


TRACE_BREAKS = (
    "negative timestamps", "out-of-order timestamps", "non-numeric timestamp", "empty file", "header only",
    "no TIMESTAMP column", "missing size column", "bad size", "equal timestamps", "one row", "ragged rows",
    "seconds timestamps", "binary junk", "long line", "nan timestamp", "huge timestamps", "duplicated header",
    "mixed timestamp formats", "BOM and CRLF",
)


@dataclass(frozen=True)
class BrokenTrace:
    """A short copy of the Azure conversation trace with one ``break_`` applied (``detail``
    picks among variants of it); every trace file of ``base`` is pointed at it."""

    base: str
    break_: str
    detail: int = 0

    def csv_text(self) -> str:
        header, body = trace_rows()
        header, body = list(header), [list(r) for r in body]
        detail = self.detail
        seconds = [f"{i * 0.25:.3f}" for i in range(len(body))]
        if self.break_ == "negative timestamps":
            for i, row in enumerate(body):
                row[0] = f"{(i - len(body) // (1 + detail % 3)) * 0.5:.3f}"
        elif self.break_ == "out-of-order timestamps":
            for i, row in enumerate(body):
                row[0] = seconds[-1 - i] if detail % 2 else seconds[(i * 7919) % len(body)]
        elif self.break_ == "seconds timestamps":
            for i, row in enumerate(body):
                row[0] = seconds[i]
        elif self.break_ == "non-numeric timestamp":
            body[detail % len(body)][0] = ("abc", "", "2023-13-45 99:99:99", "1,5", "--1")[detail % 5]
        elif self.break_ == "nan timestamp":
            body[detail % len(body)][0] = ("nan", "inf", "-inf", "NaN")[detail % 4]
        elif self.break_ == "huge timestamps":
            for i, row in enumerate(body):
                row[0] = repr((1e300, 1e15, 2.0**63)[detail % 3] * (1 + i * 1e-9 * (detail % 3 != 0)) + i)
        elif self.break_ == "equal timestamps":
            for row in body:
                row[0] = "2023-11-16 18:17:03.9799600"
        elif self.break_ == "empty file":
            return ""
        elif self.break_ == "header only":
            body = []
        elif self.break_ == "one row":
            body = body[:1]
        elif self.break_ == "no TIMESTAMP column":
            header[0] = "Time"
        elif self.break_ == "missing size column":
            header, body = header[:2], [row[:2] for row in body]
        elif self.break_ == "bad size":
            body[detail % len(body)][1 + detail % 2] = ("0", "-1", "1e308", "nan", "x", "", "4.5", "1e30")[detail % 8]
        elif self.break_ == "ragged rows":
            body[detail % len(body)] = body[detail % len(body)][: detail % 3]
            body[(detail + 1) % len(body)] += ["extra", "cells"]
        elif self.break_ == "binary junk":
            return "TIMESTAMP,ContextTokens,GeneratedTokens\n\x00\xff\xfe\x01garbage\x00,\x00,\n"
        elif self.break_ == "long line":
            body[detail % len(body)][1] = "9" * 100_000
        elif self.break_ == "duplicated header":
            body.insert(detail % len(body), list(header))
        elif self.break_ == "mixed timestamp formats":
            for i, row in enumerate(body[::2]):
                row[0] = seconds[2 * i]
        out = io.StringIO()
        newline = "\r\n" if self.break_ == "BOM and CRLF" else "\n"
        writer = csv.writer(out, lineterminator=newline)
        writer.writerow(header)
        writer.writerows(body)
        return ("\ufeff" if self.break_ == "BOM and CRLF" else "") + out.getvalue()

    def problem_text(self, trace_name: str) -> str:
        """The base problem with every trace reference (arrivals and empirical sizes) at ``trace_name``."""
        document = copy.deepcopy(shipped(self.base))
        for regime in document["regimes"].values():
            arrivals = regime.get("arrivals", {})
            if arrivals.get("process") == "trace":
                arrivals["file"] = trace_name
            for size in (regime.get("sizes") or {}).values():
                if isinstance(size, dict) and "trace" in size:
                    size["trace"] = trace_name
        return yaml.safe_dump(document, sort_keys=False, width=10**6)

    @property
    def disordered(self) -> bool:
        """Timestamps that go backwards or below zero: a trace no recorder writes."""
        return self.break_ in ("negative timestamps", "out-of-order timestamps")


@st.composite
def broken_traces(draw: st.DrawFn) -> BrokenTrace:
    return BrokenTrace(draw(st.sampled_from(TRACE_PROBLEMS)), draw(st.sampled_from(TRACE_BREAKS)),
                       draw(st.integers(0, 40)))


# --- options ---------------------------------------------------------------------------
# No value holds a NUL: neither argv nor the environment can carry one, so only a Python
# caller of ``main([...])`` could pass it (problem files may hold one, YAML escapes it).

BAD_FLOATS = ("abc", "", " ", "-1", "0", "-0", "nan", "NaN", "inf", "-inf", "1e308", "1e309", "1e12", "1e9",
              "1e6", "1e-300", "5e-324", "0x10", "1,5", "1_0", "--1", "½", "1" * 400)
BAD_INTS = ("abc", "", "-1", "0", "1.5", "1e3", "2147483648", "9223372036854775808", "99999999999999999999999",
            "-9223372036854775809", "0x10", "nan", "inf", "١", " 1")
#: Counts (--trials, tune's --seeds): bad ones, without the huge legal ones (a legal run that long is
#: intrinsic, not a bug).
BAD_COUNTS = ("abc", "", "-1", "0", "1.5", "1e3", "-9223372036854775809", "0x10", "nan", "inf", " 1")
BAD_NAMES = ("", ",", "nope", "light,light", "LIGHT", "light,", ",light", "light,nope", "x" * 5000, "é",
             "light heavy", "*", "../light")
BAD_ASSIGNS = ("", "=", "stage", "stage=", "=lean", "stage=lean=fast", "stage@=lean", "stage@M1..2=lean",
               "stage@=", "stage=variant=", "stage=variant=lean,variant=fast", "stage=variant", "stage==lean",
               "nope=lean", "stage=" + "x" * 5000, "stage;lean", "stage=lean,stage=fast", "qkv@M17..256=tile128",
               "qkv@M..16=nope", "qkv@nope=tile128", "@=")


#: Names of --storage values the test makes (tests/test_fuzz.py ``storages``); ``good``
#: is a copy of a tuned database, the others should each be refused in one line.
STORAGES = ("good", "good path", "empty", "in-memory", "sqlite root", "sqlite slash", "missing dir", "directory",
            "directory path", "garbage", "truncated", "empty json", "bad json", "missing json", "no dialect",
            "not a url", "postgres refused", "mysql", "read-only uri", "long path", "bare scheme")


def storages(directory: Path, good: Path) -> dict[str, str]:
    """The --storage values of :data:`STORAGES`, with their files made under ``directory``."""
    garbage = directory / "garbage.db"
    garbage.write_bytes(b"this is not a SQLite file\n" * 100)
    truncated = directory / "truncated.db"
    truncated.write_bytes(good.read_bytes()[:5000])
    (directory / "empty.json").write_text("")
    (directory / "bad.json").write_text('{"schema_version": "1", "rows": [{"regime": 7}]}')
    (directory / "a_directory").mkdir(exist_ok=True)
    values = {
        "good": f"sqlite:///{good}", "good path": str(good), "empty": "", "in-memory": "sqlite://",
        "sqlite root": "sqlite:///", "sqlite slash": "sqlite:////", "missing dir": f"sqlite:///{directory}/no/x.db",
        "directory": f"sqlite:///{directory / 'a_directory'}", "directory path": str(directory / "a_directory"),
        "garbage": str(garbage), "truncated": str(truncated), "empty json": str(directory / "empty.json"),
        "bad json": str(directory / "bad.json"), "missing json": str(directory / "missing.json"),
        "no dialect": "nosuchdialect://x", "not a url": "not a url at all",
        "postgres refused": "postgresql://127.0.0.1:1/nothing", "mysql": "mysql://127.0.0.1:1/x",
        "read-only uri": f"sqlite:///file:{good}?mode=ro&uri=true", "long path": "sqlite:///" + "x" * 5000,
        "bare scheme": "://",
    }
    assert set(values) == set(STORAGES)
    return values


def storage_option() -> st.SearchStrategy[str]:
    return st.sampled_from(STORAGES).map(lambda name: "{storage:" + name + "}")


@dataclass(frozen=True)
class OptionCase:
    """A command line built from a succeeding one by replacing or adding ``changes``
    (``{storage}``, ``{db}`` and ``{dir}`` are filled in by the test)."""

    command: tuple[str, ...]
    changes: tuple[tuple[str, str], ...] = field(default=())

    def __repr__(self) -> str:
        shown = " ".join(f"{k} {v!r}" if len(v) < 60 else f"{k} {v[:40]!r}…<{len(v)} chars>"
                         for k, v in self.changes)
        return f"OptionCase(tuner {' '.join(self.command)} {shown})"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


def _options(draw: st.DrawFn, choices: dict[str, st.SearchStrategy[str]], at_most: int = 2) -> tuple:
    names = draw(st.lists(st.sampled_from(sorted(choices)), min_size=1, max_size=at_most, unique=True))
    return tuple((name, draw(choices[name])) for name in names)


def _good_or(bad: tuple[str, ...], good: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(bad), st.sampled_from(good))


@st.composite
def simulate_options(draw: st.DrawFn) -> OptionCase:
    """``tuner simulate seed_example|toy_llm`` with one or two odd options."""
    base = draw(st.sampled_from(("seed_example", "toy_llm")))
    choices = {
        "--horizon": _good_or(BAD_FLOATS, ("0.25", "1")),
        "--seed": _good_or(BAD_INTS, ("0", "7", "4294967295")),
        "--regime": _good_or(BAD_NAMES, ("light", "heavy")),
        "--assign": _good_or(BAD_ASSIGNS, ("stage=fast", "qkv=tile128")),
        # huge legal counts are left out (a run that long is intrinsic), but not one past int64
        "--capacity-seeds": _good_or(BAD_COUNTS + ("9223372036854775808",), ("1", "2")),
        "--policy": st.sampled_from(("table", "static:light", "static:nope", "static:", "isolated-fastest", "x",
                                     "")),
        "--storage": storage_option(),
        "--trace": st.sampled_from(("{dir}", "{dir}/t.json", "{dir}/no/such/t.json", "/dev/full", "",
                                    "{dir}/t.json.gz")),
        "--trace-window": st.sampled_from(("30:", ":", "5:1", "a:b", "-1:2", "nan:inf", "0:1e308", "")),
        "--trace-kernels": st.sampled_from(("all", "none", "sample:0", "sample:-1", "sample:x", "sample:", "x")),
    }
    return OptionCase(("simulate", base), _options(draw, choices))


@st.composite
def tune_options(draw: st.DrawFn) -> OptionCase:
    """``tuner tune seed_example`` into a copy of a tuned database, with one or two odd options."""
    choices = {
        "--horizon": _good_or(BAD_FLOATS, ("0.25",)),
        "--seed": _good_or(BAD_INTS, ("3",)),
        "--seeds": _good_or(BAD_COUNTS, ("1",)),
        "--trials": _good_or(BAD_COUNTS, ("1", "2")),
        "--regimes": _good_or(BAD_NAMES, ("light", "heavy,light")),
        "--oracle-limit": _good_or(BAD_INTS, ("1",)),
        "--jobs": st.sampled_from(("0", "-1", "abc", "1", "")),
        "--heartbeat": _good_or(BAD_FLOATS, ("5",)),
        "--storage": storage_option(),
        "--fresh": st.just(""),
        "--oracle": st.just(""),
    }
    return OptionCase(("tune", "seed_example"), _options(draw, choices, at_most=3))


@st.composite
def table_options(draw: st.DrawFn) -> OptionCase:
    """``tuner table show`` / ``table export`` with odd options (the database must never change)."""
    which = draw(st.sampled_from(("show", "export")))
    choices = {
        "--storage": storage_option(),
        "--problem": _good_or(BAD_NAMES, ("seed_example",)),
    }
    if which == "export":
        choices["--format"] = st.sampled_from(("json", "vllm", "xml", "", "JSON"))
        choices["OUT"] = st.sampled_from(("{dir}/t.json", "{dir}", "{dir}/no/such/t.json", "/dev/full", "",
                                          "{dir}/garbage.db", "{db}", "{dir}/out_dir"))
    else:
        choices["--json"] = st.just("")
    return OptionCase(("table", which), _options(draw, choices, at_most=3))
