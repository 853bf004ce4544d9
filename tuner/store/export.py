"""Exports of the config table: project JSON (what the runtime loads) and vLLM-style files.

Neither needs SQLAlchemy to read. Files are written whole: each to a temporary file in
the same directory, then renamed over the target, so an interrupted export never
leaves a half-written file.

Project JSON, one row per line::

    {
      "schema_version": 5,
      "problem": "toy_llm",
      "rows": [
        {"problem": "toy_llm", "regime": "light", "op": "qkv", "bucket": 0, "config": ..., "params": ...},
        ...
      ],
      "details": [
        {"shape": ..., "goodput_rps": ..., "family": ..., "workspace_bytes": ..., ...},
        ...
      ]
    }

``rows[i]`` holds what a lookup reads (:data:`~tuner.store.row.SERVED_FIELDS`: which
config serves which bucket), ``details[i]`` the rest of the same row (its provenance,
goodput and CIs, and what ``tuner.requirements`` needs to tell what its config needs to
run: ``family``, ``family_options``, ``sms``, ``resources``, and the workspace the
simulator reserves, ``workspace_bytes``); a row is the two joined (:func:`join_details`).
Apart because a runtime loads a table at start-up: it parses ``rows`` and stops at
``details``, which it parses when first asked for (a 10,000-row table's details are
three quarters of its text). An export without ``details`` (written before the split,
every field in ``rows``) reads as it did.

vLLM-style: one file per (regime, operator), ``{problem}_{regime}_{op}.json``, holding
``{"<M>": {"BLOCK_SIZE_M": …, "BLOCK_SIZE_N": …, "BLOCK_SIZE_K": …, "GROUP_SIZE_M": …,
"num_warps": …, "num_stages": …}}`` as vLLM's tuned Triton configs do, one key per
bucket (two for edges too uneven for one). vLLM serves the entry whose key is nearest
the runtime M, so the keys are placed to make that lookup land in the right bucket for
every integer M (:func:`nearest_keys`). An operator keyed on several dimensions gets one file per
bucket of the others (``…_{op}_L17..32.json``), keyed on its first. Parameters spelled
``BLOCK_M``/``GROUP_M`` are renamed; parameters vLLM has no key for (``SPLIT_K`` …)
are kept as they are, and a config without the six tile parameters is exported with
its own parameters: both are reported in the returned notes.

An operator of the ``fused_moe`` family (named in ``export_vllm``'s ``moe``) is written
instead where vLLM's fused MoE layer looks for it (:func:`export_vllm_moe`): one folder
per regime, ``{problem}_{regime}/``, holding ``E=..,N=..,device_name=..[,dtype=..].json``
named as vLLM's ``get_config_file_name`` names it, so that
``VLLM_TUNED_CONFIG_FOLDER={problem}_{regime}`` makes vLLM use that regime's configs.

vLLM's files are a fixed format (each entry's keys become kernel keyword arguments), with
no place for a config's requirements: they go beside them, to
``{problem}_requirements.json`` (per regime, operator and bucket, what
:func:`tuner.requirements.requirements` says at the bucket's largest shape), which vLLM
does not read.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import StorageError
from ..outputs import output_problem, umask, write_output
from .row import ROW_FIELDS, SERVED_FIELDS, TableRow, bucket_label, short_repr
from .version import SCHEMA_VERSION, check_export

VLLM_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
_ALIASES = {"BLOCK_M": "BLOCK_SIZE_M", "BLOCK_N": "BLOCK_SIZE_N", "BLOCK_K": "BLOCK_SIZE_K",
            "GROUP_M": "GROUP_SIZE_M"}


#: What a row's details hold: every field but those served.
DETAIL_FIELDS = tuple(name for name in ROW_FIELDS if name not in SERVED_FIELDS)


def json_document(problem: str, rows: Sequence[TableRow]) -> dict[str, Any]:
    """The project JSON export of ``problem``'s rows: the schema version, the problem,
    each row's served fields (``rows``) and the rest of it (``details``), in one order."""
    records = [row.to_dict() for row in rows]
    return {"schema_version": SCHEMA_VERSION, "problem": problem,
            "rows": [{name: record[name] for name in SERVED_FIELDS} for record in records],
            "details": [{name: record[name] for name in DETAIL_FIELDS} for record in records]}


def export_json(problem: str, rows: Sequence[TableRow], path: str | Path) -> Path:
    """Write the project JSON of ``problem``'s rows to ``path`` (atomically), one row
    (and one row's details) per line: a diff of two exports shows the rows that changed."""
    path = Path(path)
    lines = []
    for key, value in json_document(problem, rows).items():
        if type(value) is list and value:
            items = ",\n".join(f"    {json.dumps(item)}" for item in value)
            lines.append(f"  {json.dumps(key)}: [\n{items}\n  ]")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    write_output(path, "{\n" + ",\n".join(lines) + "\n}\n")  # `-`: standard output, written through
    return path


def join_details(document: Mapping[str, Any], path: object) -> list[Any]:
    """Each row record of a project JSON export whole: ``rows[i]`` joined with
    ``details[i]`` (:func:`json_document`); ``rows`` as they are when there are no details
    (an export written before the split). A record that is not an object is left for the
    row decoder to refuse, naming it.

    Raises:
        StorageError: no list of rows; details that are not a list of objects, one per
            row; a field in both a row and its details.
    """
    rows = document.get("rows")
    if type(rows) is not list:
        raise StorageError(f"{path}: the exported table has no list of rows")
    if "details" not in document:
        return rows
    details = document["details"]
    if type(details) is not list or len(details) != len(rows):
        found = f"{len(details)} entries" if type(details) is list else f"a {type(details).__name__}"
        raise StorageError(f"{path}: 'details' must be a list of one object per row ({len(rows)}), found {found}")
    out = []
    for index, (row, extra) in enumerate(zip(rows, details)):
        if type(extra) is not dict:
            raise StorageError(f"{path}: row {index}: its details must be an object, found "
                               f"{type(extra).__name__} {short_repr(extra)}")
        if type(row) is dict:
            both = row.keys() & extra.keys()
            if both:
                raise StorageError(f"{path}: row {index}: field {min(both)!r} is both in 'rows' and in 'details'")
            row = {**row, **extra}
        out.append(row)
    return out


def read_json(path: str | Path) -> tuple[str, list[TableRow]]:
    """Read a project JSON export: ``(problem, rows)``.

    Raises:
        StorageError: unreadable or malformed file.
        SchemaMismatchError: written by a tuner with another schema version.
    """
    path = Path(path)
    try:
        document = json.loads(path.read_bytes())  # (bytes: UTF-8 with a BOM, or UTF-16, as the runtime reads them)
    except (OSError, ValueError, RecursionError) as exc:  # (ValueError: not JSON, or past the digit limit)
        raise StorageError(f"{path}: cannot read the exported table ({exc})") from None
    check_export(document, path)
    records = join_details(document, path)
    try:
        return str(document["problem"]), [TableRow.decode(row) for row in records]
    except (KeyError, TypeError, ValueError) as exc:
        raise StorageError(f"{path}: malformed row in the exported table ({exc!r})") from None


def vllm_config(row: TableRow) -> tuple[dict[str, Any], str | None]:
    """The vLLM-style entry of a row, and a note when it is not plain vLLM."""
    entry, issue = _vllm_entry(row)
    where = f"{row.regime}/{row.op}" + (f"@{bucket_label(row.bucket_bounds)}" if row.bucket_bounds else "")
    return entry, None if issue is None else f"{where}: {issue}"


def _vllm_entry(row: TableRow) -> tuple[dict[str, Any], str | None]:
    """The entry, and what is not plain vLLM about it (None when nothing)."""
    renamed = {_ALIASES.get(k, k): v for k, v in row.params.items()}
    missing = [k for k in VLLM_KEYS if k not in renamed]
    if missing:
        return dict(row.params), (f"config {row.config!r} has no vLLM tile parameters "
                                  f"(missing {', '.join(missing)}); exported its own parameters as they are")
    entry = {k: renamed[k] for k in VLLM_KEYS}
    extra = {k: v for k, v in renamed.items() if k not in VLLM_KEYS}
    entry.update(extra)
    if extra:
        return entry, f"parameters {', '.join(extra)} have no vLLM key; kept in the file as they are"
    return entry, None


def nearest_keys(edges: Sequence[float]) -> tuple[list[tuple[int, int]], bool]:
    """Integer keys for buckets with ascending upper ``edges`` (bucket ``i`` holds
    ``(edges[i-1], edges[i]]``, the last also every value above) such that vLLM's lookup,
    the key nearest to M (``min(keys, key=lambda k: abs(k - M))``), lands in M's bucket for
    every integer M >= 1.

    One key per bucket when possible: the midpoint of consecutive keys must fall between
    the last integer of a bucket ``h`` and the next, ``k[j] + k[j+1] = 2h + 1`` (odd, so
    no integer M is ever a tie), so every key follows from the first, and each must lie in
    its own bucket, which bounds the first. When no first key satisfies every bound (edges
    too uneven), each bucket gets two keys, its lowest and its highest integer: every
    integer of a bucket is then strictly nearer one of its own keys than any other.
    Buckets holding no integer M get no key.

    Returns:
        ``[(key, bucket), ...]`` in ascending key order, and whether it is one key per bucket.
    """
    ranges = []  # (bucket, lowest integer, highest integer) of the buckets that hold one
    previous = 0  # M >= 1: the first bucket starts at 1
    for i, edge in enumerate(edges):
        lo, hi = previous + 1, math.floor(edge)
        if i == len(edges) - 1:
            hi = max(hi, lo)  # the last bucket also takes every value above its edge
        previous = max(previous, hi)
        if hi >= lo:
            ranges.append((i, lo, hi))
    # k[j] = c[j] + sign[j] * k[0], each within [lo_j, hi_j]
    low, high = ranges[0][1], ranges[0][2]
    c, sign = [0], [1]
    for (_, _, hi_before), (_, lo, hi) in zip(ranges, ranges[1:]):
        c.append(2 * hi_before + 1 - c[-1])
        sign.append(-sign[-1])
        if sign[-1] > 0:
            low, high = max(low, lo - c[-1]), min(high, hi - c[-1])
        else:
            low, high = max(low, c[-1] - hi), min(high, c[-1] - lo)
    if low <= high:
        return [(c[j] + sign[j] * high, bucket) for j, (bucket, _, _) in enumerate(ranges)], True
    pairs = []
    for bucket, lo, hi in ranges:
        pairs.extend([(lo, bucket)] if lo == hi else [(lo, bucket), (hi, bucket)])
    return pairs, False


def export_vllm(rows: Sequence[TableRow], out_dir: str | Path,
                moe: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[list[Path], list[str]]:
    """Write vLLM-style files under ``out_dir`` (created if missing): per (regime, operator
    [, bucket of its other key dimensions]) one file whose keys (:func:`nearest_keys`)
    make vLLM's nearest-M lookup serve each bucket's config for every integer M in it.

    Args:
        moe: the operators of the ``fused_moe`` family, each with its family's options
            (``experts``, ``dtype``, …): their rows go where vLLM's fused MoE layer reads
            them (:func:`export_vllm_moe`), not into ``{problem}_{regime}_{op}.json``.

    Returns the files written and the notes (configs that are not plain vLLM tiles,
    buckets that needed two keys, where the fused MoE folders are and how vLLM is pointed
    at one).

    Raises:
        StorageError: ``out_dir`` is a file, malformed bucket bounds, or a fused_moe
            operator whose file name cannot be made (a missing option or shape key, a
            device vLLM has no name for); nothing is written then.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise StorageError(f"{out}: exists and is not a directory")
    moe = moe or {}
    moe_rows = [r for r in rows if r.op in moe]
    moe_files, moe_notes = _moe_contents(moe_rows, out, moe)
    rows = [r for r in rows if r.op not in moe]
    groups: dict[tuple[str, str, str, str], list[TableRow]] = {}
    for row in rows:
        bounds = list((row.bucket_bounds or {}).items())
        rest = bucket_label(dict(bounds[1:]))
        groups.setdefault((row.problem, row.regime, row.op, rest), []).append(row)
    files: dict[Path, dict[str, Any]] = {}
    notes: list[str] = []
    for (problem, regime, op, rest), group in groups.items():
        group.sort(key=lambda r: r.bucket)
        content = _keyed_entries(group, f"{regime}/{op}" + (f"@{rest}" if rest else ""), notes)
        name = _safe(f"{problem}_{regime}_{op}" + (f"_{rest}" if rest else "")) + ".json"
        files[out / name] = content
    needs = requirements_document(list(rows) + moe_rows)
    if any(r.family is not None for r in list(rows) + moe_rows):  # (a table of declared profiles: nothing to add)
        problem = next(iter(needs.values()))["problem"]
        files[out / (_safe(f"{problem}_requirements") + ".json")] = needs
        notes.append(f"vLLM's config files have no place for requirements (workspace, launches, SMs): they are in "
                     f"{_safe(f'{problem}_requirements')}.json beside them, which vLLM does not read")
    _write_all({**files, **moe_files}, out)
    return list(files) + list(moe_files), notes + moe_notes


def requirements_document(rows: Sequence[TableRow]) -> dict[str, Any]:
    """``"{regime}/{op}/{bucket}" -> requirements`` of every row of a built-in family
    (:func:`tuner.requirements.requirements` at the row's shape: its bucket's largest at
    the service's largest batch), with the row's problem; a row it cannot judge (a
    declared profile, an unknown family) carries only what the simulator reserves for
    it (``reserved_workspace_bytes``, the row's ``workspace_bytes``)."""
    from ..requirements import RequirementsError, requirements

    out: dict[str, Any] = {}
    for row in rows:
        entry: dict[str, Any] = {"problem": row.problem, "config": row.config,
                                 "reserved_workspace_bytes": row.workspace_bytes}
        if row.family is not None and row.sms is not None and row.shape:
            try:
                entry.update(requirements(row.family, row.params, row.shape, sms=row.sms, options=row.family_options,
                                          resources=row.resources, shape_range=row.bucket_bounds).to_dict())
            except RequirementsError:
                pass
        out[f"{row.regime}/{row.op}/{row.bucket}"] = entry
    return out


def _keyed_entries(group: Sequence[TableRow], where: str, notes: list[str]) -> dict[str, Any]:
    """``{"<M>": entry}`` for one operator's rows in one regime (sorted by bucket), keyed
    on the bucket's first dimension so that the nearest-key lookup lands in each bucket
    (:func:`nearest_keys`); notes what is not plain vLLM, once per kind."""
    first_dim = next(iter(group[0].bucket_bounds or {}), None)
    if first_dim is None:
        m = (group[0].shape or {}).get("M", 1)
        pairs: list[tuple[int, int]] = [(int(m), 0)]
    else:
        try:
            edges = [float(r.bucket_bounds[first_dim][1]) for r in group]  # type: ignore[index]
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise StorageError(f"{where}: malformed bucket bounds ({exc!r})") from None
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise StorageError(f"{where}: bucket upper edges {edges} are not ascending")
        pairs, one_each = nearest_keys(edges)
        if not one_each:
            notes.append(f"{where}: bucket edges too uneven for one key per bucket under nearest-{first_dim} "
                         "lookup; each bucket has a key at its lowest and its highest value")
    content: dict[str, Any] = {}
    issues: dict[str, list[str]] = {}  # what is not plain vLLM -> the buckets it concerns
    for key, position in pairs:
        entry, issue = _vllm_entry(group[position])
        content[str(key)] = entry
        label = bucket_label(group[position].bucket_bounds)
        if issue is not None and label not in issues.setdefault(issue, []):
            issues[issue].append(label)
    for issue, labels in issues.items():  # one note per file and kind, not per bucket
        buckets = "" if len(group) == 1 else (" (every bucket)" if len(labels) == len(group)
                                              else f"@{', '.join(labels)}")
        notes.append(f"{where}{buckets}: {issue}")
    return content


# --- vLLM's fused MoE layer ---------------------------------------------------------------

#: The ``dtype=`` vLLM puts in a fused MoE config file's name, per dtype a fused_moe
#: family may declare (None: no ``dtype=`` part). vLLM's ``_get_config_dtype_str``
#: (vllm/model_executor/layers/fused_moe/config.py) returns a string only for the
#: quantised schemes (``fp8_w8a8``, ``fp8_w8a16``, ``int8_w8a16``, ``int4_w4a16``) and
#: ``float32``; bf16 and fp16 layers share the files without one.
VLLM_MOE_DTYPES: dict[str, str | None] = {
    "bf16": None, "bfloat16": None, "fp16": None, "float16": None, "half": None,
    "fp32": "float32", "float32": "float32",
    "fp8": "fp8_w8a8", "fp8_w8a8": "fp8_w8a8", "fp8_w8a16": "fp8_w8a16",
    "int8_w8a16": "int8_w8a16", "int4_w4a16": "int4_w4a16",
}


def vllm_moe_file_name(experts: int, n: int, device_name: str, dtype: str | None = None,
                       block_shape: Sequence[int] | None = None) -> str:
    """The file vLLM's fused MoE layer reads its tuned configs from, as
    ``get_config_file_name(E, N, dtype, block_shape)`` in
    vllm/model_executor/layers/fused_moe/fused_moe.py names it:
    ``E={E},N={N},device_name={device}`` then ``,dtype={dtype}`` when vLLM's dtype
    string is not None (:data:`VLLM_MOE_DTYPES`), then ``,block_shape=[n,k]`` (no space)
    when both block sizes are non-zero, then ``.json``. ``N`` is the intermediate size
    per expert (``try_get_optimal_moe_config`` takes ``E, _, N = w2_shape``), ``E`` the
    experts of the layer on this GPU.

    Raises:
        StorageError: a dtype vLLM has no config-file name for.
    """
    try:
        selector = VLLM_MOE_DTYPES[str(dtype if dtype is not None else "bf16").lower()]
    except KeyError:
        raise StorageError(f"dtype {dtype!r} has no vLLM fused_moe config-file name "
                           f"(known: {', '.join(VLLM_MOE_DTYPES)})") from None
    name = f"E={experts},N={n},device_name={device_name}"
    if selector:
        name += f",dtype={selector}"
    if block_shape and all(block_shape):
        name += f",block_shape=[{','.join(str(int(b)) for b in block_shape)}]"
    return name + ".json"


def vllm_folder(problem: str, regime: str) -> str:
    """The folder of one regime's fused MoE files under the export directory."""
    return _safe(f"{problem}_{regime}")


def _moe_contents(rows: Sequence[TableRow], out: Path, moe: Mapping[str, Mapping[str, Any]]
                  ) -> tuple[dict[Path, dict[str, Any]], list[str]]:
    """The fused MoE files (see :func:`export_vllm_moe`) and their notes, nothing written."""
    from ..profile.devices import VLLM_DEVICE_NAMES  # stdlib only; not on read_json's path

    groups: dict[tuple[str, str, str], list[TableRow]] = {}
    for row in rows:
        groups.setdefault((row.problem, row.regime, row.op), []).append(row)
    files: dict[Path, dict[str, Any]] = {}
    writers: dict[Path, str] = {}
    notes: list[str] = []
    folders: dict[tuple[str, str], list[str]] = {}
    for (problem, regime, op), group in groups.items():
        group.sort(key=lambda r: r.bucket)
        where = f"{regime}/{op}"
        options = moe[op]
        dims = {d for r in group for d in (r.bucket_bounds or {})}
        if dims - {"M"}:
            raise StorageError(f"{where}: fused_moe buckets on {', '.join(sorted(dims))}; vLLM's fused MoE "
                               "configs are keyed by M (tokens) alone")
        experts = options.get("experts")
        if experts is None:
            raise StorageError(f"{where}: fused_moe option 'experts' (E) is missing; vLLM's config file name "
                               "needs it")
        if isinstance(experts, bool) or not isinstance(experts, int) or experts < 1:
            raise StorageError(f"{where}: fused_moe option 'experts' (E) must be a positive integer, "
                               f"found {experts!r}")
        widths = {(r.shape or {}).get("N") for r in group}
        if None in widths:
            raise StorageError(f"{where}: shape key 'N' (intermediate size per expert) is missing; vLLM's "
                               "config file name needs it")
        if len(widths) != 1:
            raise StorageError(f"{where}: shape key 'N' differs between buckets ({sorted(map(str, widths))})")
        n = widths.pop()
        if isinstance(n, float) and n.is_integer():
            n = int(n)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise StorageError(f"{where}: shape key 'N' must be a positive integer, found {n!r}")
        device = group[0].device
        try:
            device_name = VLLM_DEVICE_NAMES[str(device).lower()]
        except KeyError:
            raise StorageError(f"{where}: device {device!r} has no vLLM device name (known: "
                               f"{', '.join(VLLM_DEVICE_NAMES)}); set the problem's device.name to one") from None
        block_shape = options.get("block_shape")
        try:
            name = vllm_moe_file_name(experts, n, device_name, options.get("dtype"), block_shape)
        except StorageError as exc:
            raise StorageError(f"{where}: fused_moe option 'dtype': {exc}") from None
        except (TypeError, ValueError):
            raise StorageError(f"{where}: fused_moe option 'block_shape' must be two integers, "
                               f"found {block_shape!r}") from None
        content = _keyed_entries(group, where, notes)
        path = out / vllm_folder(problem, regime) / name
        if path.parent.exists() and not path.parent.is_dir():
            raise StorageError(f"{path.parent}: exists and is not a directory (regime {regime}'s vLLM folder)")
        if path in files and files[path] != content:
            raise StorageError(f"{regime}: fused_moe operators {writers[path]} and {op} both map to vLLM's "
                               f"{name} with different configs; vLLM reads one file per (E, N, dtype)")
        if path not in files:
            files[path], writers[path] = content, op
            folders.setdefault((problem, regime), []).append(name)
    for (problem, regime), names in folders.items():
        folder = out / vllm_folder(problem, regime)
        notes.append(f"{regime}: vLLM fused_moe configs in {folder}/ ({', '.join(names)}); point vLLM at this "
                     f"regime with VLLM_TUNED_CONFIG_FOLDER={folder} and restart it (vLLM reads the files at "
                     "start-up; switching regimes while serving is what tuner's runtime does)")
    return files, notes


def export_vllm_moe(rows: Sequence[TableRow], out_dir: str | Path,
                    moe: Mapping[str, Mapping[str, Any]]) -> tuple[list[Path], list[str]]:
    """Write the fused MoE operators' rows where vLLM's fused MoE layer reads them.

    vLLM (vllm/model_executor/layers/fused_moe/fused_moe.py) finds a layer's tuned
    configs in ``get_moe_configs``: the file named by ``get_config_file_name`` (here
    :func:`vllm_moe_file_name`, with the device name of the rows' device preset,
    :data:`tuner.profile.devices.VLLM_DEVICE_NAMES`) in the folder ``VLLM_TUNED_CONFIG_FOLDER``
    first, then in its bundled ``configs/`` folder; it reads the keys with ``int(key)``
    and ``try_get_optimal_moe_config`` serves, for M tokens, the entry whose key is
    nearest (``min(configs.keys(), key=lambda x: abs(x - M))``). So each regime gets its
    own folder, ``out_dir/{problem}_{regime}/``, one file per operator there, keyed by
    :func:`nearest_keys` so that every M of a bucket is served that bucket's config.

    Args:
        moe: operator name -> its fused_moe family options: ``experts`` (E, required),
            ``dtype`` (default bf16: no ``dtype=`` part), ``block_shape`` (optional).

    Returns the files written and the notes (one per regime folder saying how to point
    vLLM at it, and what is not plain vLLM).

    Raises:
        StorageError: one line naming the operator and the missing or bad key.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise StorageError(f"{out}: exists and is not a directory")
    files, notes = _moe_contents([r for r in rows if r.op in moe], out, moe)
    _write_all(files, out)
    return list(files), notes


def _write_all(files: Mapping[Path, Any], out: Path) -> None:
    """Every file of a multi-file export, or none: each target checked first (not a
    directory, special file or database: :func:`tuner.outputs.output_problem`), every
    file written into a staging folder inside ``out``, and only then each moved into
    place (a rename within one file system). A file that cannot be written (a full disk,
    no permission) leaves ``out`` as it was, and the error names that file, not a
    temporary one; before, one regime folder could end half old, half new."""
    for path in files:
        problem = output_problem(path)
        if problem is not None:
            raise StorageError(f"{path}: {problem}; nothing was written")
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tuner-export-", dir=out))
    try:
        staged = []
        for i, (path, content) in enumerate(files.items()):
            part = staging / f"{i}.json"
            try:
                part.write_text(json.dumps(content, indent=4) + "\n")
                os.chmod(part, 0o666 & ~umask())  # an export is an ordinary file
            except OSError as exc:
                raise StorageError(f"{path}: cannot be written ({exc.strerror or exc}); nothing in {out} "
                                   "changed") from None
            staged.append((part, path))
        for part, path in staged:
            path.parent.mkdir(exist_ok=True)
            os.replace(part, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=,-]+", "-", name)


