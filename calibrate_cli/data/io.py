"""Reading model outputs from files and writing results, safely (docs/conventions.md).

Sources are paths with an optional key: ``logits.npy``, ``outputs.npz:logits``, ``run.pt:logits``,
``preds.csv``, ``preds.parquet:logit_*``, ``run.safetensors:logits``, ``run.h5:/eval/logits``,
``run.zarr:logits`` (the optional formats live in :mod:`calibrate_cli.data.formats`). Nothing is ever
unpickled: ``.npy``/``.npz`` load with ``allow_pickle=False``, ``.pt`` with
``torch.load(weights_only=True)`` (torch is optional and imported only for ``.pt``). Large ``.npy``
files are memory-mapped. Every problem is an :class:`InputError` whose one-line message
starts with the file's path. Outputs are written atomically and never overwrite without ``force``.
"""

from __future__ import annotations

import csv
import errno
import fnmatch
import json
import math
import os
import re
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Sequence

import numpy as np

from ..errors import CalibError, InputError, OutputError
from .number_text import PLAIN_NUMBERS, is_plain_float, lenient_only, parse_int
from .predictions import with_stored_precision

__all__ = [
    "load_array",
    "load_scores",
    "load_labels",
    "list_shards",
    "pair_shards",
    "load_shard",
    "read_scores",
    "stream_scores",
    "NotStreamed",
    "ScoresFile",
    "AmbiguousHeaderError",
    "CsvCellError",
    "load_temperature",
    "write_text",
    "write_array",
    "check_output_path",
    "check_array_path",
    "atomic_write",
    "split_source",
    "SUFFIXES",
    "INPUT_FORMATS",
    "InputFormat",
]

#: a .npy file larger than this is memory-mapped, not read: a pass reads it chunk by chunk and gives
#: the pages back (calibrate_cli.data.pages), so neither scores nor labels stay resident whole
MMAP_THRESHOLD_BYTES = 16 << 20
_NPY_MAGIC = b"\x93NUMPY"


@dataclass(frozen=True)
class InputFormat:
    """One file type calib reads arrays from: ``load(path, key, label) -> np.ndarray``.

    ``keyed``: the file holds several arrays, addressed as ``file.ext:KEY`` (``key`` None when not
    given). ``load`` must never unpickle and must raise InputError (one line naming ``label``) for
    every problem with the file. Adding a format is one loader and one entry in :data:`INPUT_FORMATS`
    (docs/contributing.md, "Adding an input format").
    """

    load: Callable[[Path, "str | None", str], np.ndarray]
    keyed: bool = False
    #: columns are chosen by name (score columns, a labels column): Parquet / Arrow / Feather
    table: bool = False
    #: keys are paths inside the file and may hold '/' (HDF5, Zarr)
    nested_keys: bool = False
    #: the "file" is a directory (a Zarr store)
    directory: bool = False


def _load_npy_source(path: Path, key, label: str) -> np.ndarray:
    return _load_npy(path, label)


def _fast_csv(
    path: Path, label: str, header=None, expected_rows=None, label_col=None, score_cols=None, check_index=False
):
    """(names, chosen columns, scores, labels) through the C-speed reader, or None when the full reader
    must run (:mod:`calibrate_cli.data.csvfast`: any doubt, and every error, goes to the full reader).
    ``check_index``: the columns are scores, refused when one looks like a row index (:class:`IndexWatch`)."""
    from . import csvfast

    chosen: list = []

    def decide(cells: list[str], line: int, n_rows: int) -> bool:
        return _first_row_is_header(cells, label, line, n_rows, expected_rows)

    def choose(names, width):
        table = _CsvTable(names, [[""] * width], [0])
        col = None if label_col is None else _column_index(names, label_col, width, label)
        chosen[:] = _score_columns(table, score_cols, col, label, check_index=check_index)
        return list(chosen), col

    found = csvfast.read_numeric_csv(path, label, header, decide, choose)
    if found is None:
        return None
    names, scores, labels = found
    return names, list(chosen), scores, labels


def _load_csv_source(path: Path, key, label: str) -> np.ndarray:
    if key is not None:  # file.csv:COLS, as for tables
        return read_scores(label).scores
    fast = _fast_csv(path, label)
    if fast is not None:
        values = fast[2]
        return values[:, 0] if values.shape[1] == 1 else values
    table = _read_csv_table(path, label)
    values = _numeric(table, list(range(table.width)), label)
    return values[:, 0] if values.shape[1] == 1 else values


#: suffix → format (lower case). The loaders are defined below; looked up at call time.
INPUT_FORMATS: dict[str, InputFormat] = {
    ".npy": InputFormat(_load_npy_source),
    ".npz": InputFormat(lambda path, key, label: _load_npz(path, key, label), keyed=True),
    ".pt": InputFormat(lambda path, key, label: _load_torch(path, key, label), keyed=True),
    ".pth": InputFormat(lambda path, key, label: _load_torch(path, key, label), keyed=True),
    ".csv": InputFormat(_load_csv_source, keyed=True),  # file.csv:COLS chooses columns, as for tables
    ".parquet": InputFormat(lambda path, key, label: _tables().load_table_array(path, key, label), keyed=True, table=True),
    ".arrow": InputFormat(lambda path, key, label: _tables().load_table_array(path, key, label), keyed=True, table=True),
    ".feather": InputFormat(lambda path, key, label: _tables().load_table_array(path, key, label), keyed=True, table=True),
    ".safetensors": InputFormat(lambda path, key, label: _arrays().load_safetensors(path, key, label), keyed=True),
    ".h5": InputFormat(lambda path, key, label: _arrays().load_hdf5(path, key, label), keyed=True, nested_keys=True),
    ".hdf5": InputFormat(lambda path, key, label: _arrays().load_hdf5(path, key, label), keyed=True, nested_keys=True),
    ".zarr": InputFormat(
        lambda path, key, label: _arrays().load_zarr(path, key, label), keyed=True, nested_keys=True, directory=True
    ),
}


def _tables():
    from . import tables

    return tables


def _arrays():
    from . import arrays

    return arrays


SUFFIXES = tuple(INPUT_FORMATS)
_KEYED = tuple(suffix for suffix, fmt in INPUT_FORMATS.items() if fmt.keyed)
_KEYED_SPLIT = re.compile(
    r"^(.*?(?:" + "|".join(re.escape(s) for s in _KEYED) + r")):(.*)$", re.IGNORECASE | re.DOTALL
)


def split_source(source: str | os.PathLike) -> tuple[Path, str | None]:
    """``"run.npz:logits"`` → (Path("run.npz"), "logits"); keys only follow keyed formats (.npz, .pt, .pth,
    tables, .safetensors, .h5/.hdf5, .zarr; in HDF5 and Zarr the key is a path: ``run.h5:/eval/logits``).

    The key starts after the first ``.npz:``/``.pt:``/``.pth:`` (so ``run.npz::x`` is the key
    ``":x"`` and ``run.npz:`` the empty key, both reported as bad keys of ``run.npz``), unless
    the whole text names an existing file.
    """
    text = os.fspath(source)
    match = _KEYED_SPLIT.match(text)
    if match and not Path(text).exists():
        head, key = match.group(1), match.group(2)
        fmt = INPUT_FORMATS.get(Path(head).suffix.lower())
        if ("/" not in key and "\\" not in key) or (fmt is not None and fmt.nested_keys):
            return Path(head), key
    return Path(text), None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _os_reason(exc: OSError) -> str:
    """An OSError's reason without the path it repeats (``File name too long``, ``Permission denied``)."""
    return resource_problem(exc) or exc.strerror or _one_line(exc)


#: the input files checked by :func:`_check_readable` in this process (label → size in bytes): an
#: "out of memory" that no loader caught names them (the CLI clears it when a command starts)
INPUTS_READ: dict[str, int] = {}


def inputs_read_text(prefix: str = "") -> str:
    """``prefix`` + ``x.npy (160 MB), y.npy (16 MB)``, the largest first; "" when none was read."""
    if not INPUTS_READ:
        return ""
    largest = sorted(INPUTS_READ.items(), key=lambda item: -item[1])
    return prefix + names_text([f"{label} ({_size(size)})" for label, size in largest], limit=4)


#: errno → what it means when opening or reading an input fails with it: the machine's limits, not
#: the file's content (never "truncated or corrupt")
_RESOURCE_ERRNOS = {
    errno.ENOMEM: "out of memory",
    errno.EMFILE: "too many open files in this process (ulimit -n)",
    errno.ENFILE: "too many open files on this system",
}


def resource_problem(exc: BaseException) -> str | None:
    """What an OSError with an errno of :data:`_RESOURCE_ERRNOS` means (None for any other error)."""
    return _RESOURCE_ERRNOS.get(getattr(exc, "errno", None)) if isinstance(exc, OSError) else None


def _check_readable(path: Path, label: str, directory: bool = False) -> None:
    """A regular, readable file (a FIFO or a device would block or never end: refused); with
    ``directory``, a readable directory (a Zarr store)."""
    if not os.fspath(label).strip():
        raise InputError("'': empty file name")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{label}: no such file") from None
    except OSError as exc:
        raise InputError(f"{label}: cannot read ({_os_reason(exc)})") from None
    INPUTS_READ[label] = info.st_size
    if directory:
        if not stat.S_ISDIR(info.st_mode):
            raise InputError(f"{label}: expected a directory (a {path.suffix} store)")
        if not os.access(path, os.R_OK | os.X_OK):
            raise InputError(f"{label}: permission denied")
        return
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{label}: is a directory, expected a file")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{label}: not a regular file (a FIFO, socket or device); save the array to a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{label}: permission denied")


def _npy_header(f: BinaryIO, label: str, size: int, what: str = "file") -> tuple[tuple, np.dtype]:
    """Read a .npy header from ``f`` and check that the data it declares fits in ``size`` bytes."""
    from numpy.lib import format as npy_format

    try:
        version = npy_format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = npy_format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, _, dtype = npy_format.read_array_header_2_0(f)
        else:
            from numpy.lib import _format_impl

            shape, _, dtype = _format_impl._read_array_header(f, version)
    except MemoryError:
        raise
    except Exception as exc:  # a mangled header: numpy's parser raises ValueError, TokenError, SyntaxError, ...
        raise InputError(f"{label}: not a valid .npy {what} (bad header: {type(exc).__name__}: {_one_line(exc)})") from None
    if dtype.hasobject:
        raise InputError(f"{label}: holds Python objects (pickled), which calib never loads")
    declared = math.prod(shape) * dtype.itemsize
    available = size - f.tell()
    if declared > available:
        raise InputError(
            f"{label}: the .npy header declares shape {tuple(shape)} of {dtype} ({_size(declared)}), "
            f"but the {what} holds only {_size(max(available, 0))} of data: truncated or corrupt"
        )
    return shape, dtype


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.3g} {unit}" if unit != "bytes" else f"{n} bytes"
        n /= 1000
    return f"{n:.3g} PB"  # pragma: no cover


def _load_npy(path: Path, label: str) -> np.ndarray:
    with open(path, "rb") as f:
        head = f.read(6)
    if head != _NPY_MAGIC:
        if head[:1] == b"\x80":
            raise InputError(f"{label}: contains a pickled object, which calib never loads; save arrays with np.save")
        raise InputError(f"{label}: not a .npy file (bad header)")
    size = path.stat().st_size
    with open(path, "rb") as f:
        _npy_header(f, label, size)
    mmap = "r" if size > MMAP_THRESHOLD_BYTES else None
    try:
        array = np.load(path, mmap_mode=mmap, allow_pickle=False)
        if mmap:  # truncated by another process while mapped: one line naming it and exit 2, not SIGBUS
            from .pages import watch_mapped

            watch_mapped(array, label)
        return array
    except ValueError as exc:
        if "pickle" in str(exc).lower() or "object arrays" in str(exc).lower():
            raise InputError(f"{label}: holds Python objects (pickled), which calib never loads") from None
        raise InputError(f"{label}: truncated or corrupt .npy file ({_one_line(exc)})") from None
    except (OSError, EOFError) as exc:
        if resource_problem(exc):  # ENOMEM from mmap under ulimit -v, EMFILE: the machine, not the file
            raise InputError(f"{label}: cannot read ({resource_problem(exc)})") from None
        raise InputError(f"{label}: truncated or corrupt .npy file ({_one_line(exc)})") from None
    except MemoryError:
        raise
    except Exception as exc:  # a mangled header: numpy's parser raises TokenError, SyntaxError, ...
        raise InputError(f"{label}: corrupt .npy header ({type(exc).__name__}: {_one_line(exc)})") from None


def names_text(keys: Sequence[str], limit: int = 12) -> str:
    """``a, b, c`` (the first ``limit`` names, then how many more), or ``none``."""
    keys = list(keys)
    if not keys:
        return "none"
    shown = ", ".join(keys[:limit])
    return shown + (f", … ({len(keys) - limit} more)" if len(keys) > limit else "")


_names = names_text


def pick_key(keys: list[str], key: str | None, label: str, path: Path, what: str = "arrays") -> str:
    """The member ``key`` of a file holding ``keys`` (the only one when no key is given); one line otherwise."""
    if key is None:
        if len(keys) == 1:
            return keys[0]
        if not keys:
            raise InputError(f"{label}: holds no {what}")
        raise InputError(f"{label}: holds several {what} ({_names(keys)}); name one as {path}:KEY")
    if key == "":
        raise InputError(f"{label}: no key after ':' (found: {_names(keys)}); name one as {path}:KEY")
    if key not in keys:
        raise InputError(f"{label}: no array named {key!r} (found: {_names(keys)})")
    return key


def _load_npz(path: Path, key: str | None, label: str) -> np.ndarray:
    import zipfile  # here: only .npz files need it (~6 ms of every command's start)

    try:
        with np.load(path, allow_pickle=False) as archive:
            name = pick_key(list(archive.files), key, label, path)
            member = name if name in archive.zip.namelist() else name + ".npy"
            size = archive.zip.getinfo(member).file_size
            with archive.zip.open(member) as f:
                _npy_header(f, label, size, what=f"member {name!r}")
            return np.asarray(archive[name])
    except InputError:
        raise
    except ValueError as exc:
        if "pickle" in str(exc).lower() or "object arrays" in str(exc).lower():
            raise InputError(f"{label}: holds Python objects (pickled), which calib never loads") from None
        raise InputError(f"{label}: corrupt .npz file ({_one_line(exc)})") from None
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise InputError(f"{label}: truncated or corrupt .npz file ({_one_line(exc)})") from None
    except NotImplementedError as exc:  # zipfile: a compression method Python cannot read (e.g. AES)
        raise InputError(f"{label}: a member uses a compression calib cannot read ({_one_line(exc)}); "
                         "save it with np.savez or np.savez_compressed") from None
    except RuntimeError as exc:  # zipfile: an encrypted member
        raise InputError(f"{label}: {_one_line(exc)}; calib reads unencrypted .npz files only") from None


_PICKLED_PT = (
    "holds pickled Python objects, and calib never unpickles (it reads .pt files with "
    "torch.load(weights_only=True)); re-save the outputs as tensors: torch.save(logits_tensor, 'logits.pt') "
    "or a dict of tensors, safetensors, or np.save('logits.npy', array)"
)


def _tensor_leaves(obj, torch, prefix: str = "") -> list:
    """(dotted name, tensor) of every tensor in nested dicts / lists / tuples ("model.logits", "outputs.0")."""
    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    if isinstance(obj, dict):
        items = ((str(k), v) for k, v in obj.items())
    elif isinstance(obj, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(obj))
    else:
        return []
    out = []
    for name, value in items:
        out += _tensor_leaves(value, torch, f"{prefix}.{name}" if prefix else name)
    return out


def _load_torch(path: Path, key: str | None, label: str) -> np.ndarray:
    try:
        import torch
    except ImportError:
        raise InputError(
            f"{label}: reading .pt/.pth files needs PyTorch: pip install torch==2.13.0 "
            "(the pinned version; an unpinned torch pulls a multi-GB CUDA build), or save the arrays with np.save"
        ) from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about pickle protocols before refusing
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        text = _one_line(exc)
        if (
            "weights_only" in text.lower().replace(" ", "_")
            or "Unsupported global" in text
            or "GLOBAL" in text
            or type(exc).__name__ == "UnpicklingError"
        ):
            raise InputError(f"{label}: {_PICKLED_PT}") from None
        raise InputError(f"{label}: cannot read as a torch file ({text})") from None
    if isinstance(obj, torch.Tensor):
        if key is not None:
            raise InputError(f"{label}: holds a single tensor, not a dict; drop ':{key}'")
        tensor = obj
    else:
        leaves = dict(_tensor_leaves(obj, torch))
        if not leaves:
            raise InputError(f"{label}: expected a tensor or a dict of tensors, got {type(obj).__name__} with no tensors")
        tensor = leaves[pick_key(list(leaves), key, label, path)]
    tensor = tensor.detach().cpu()
    if tensor.layout != torch.strided or tensor.is_quantized:
        raise InputError(f"{label}: holds a sparse or quantised tensor; save a dense one (tensor.to_dense())")
    if tensor.dtype == torch.bfloat16:
        # numpy has no bfloat16: widen to float32 exactly, remembering the stored precision
        return with_stored_precision(tensor.float().numpy(), eps=float(torch.finfo(torch.bfloat16).eps))
    if tensor.dtype.is_complex:
        raise InputError(f"{label}: holds complex numbers ({tensor.dtype}); scores must be real")
    try:
        return tensor.numpy()
    except (TypeError, RuntimeError) as exc:  # e.g. float8 dtypes numpy cannot hold
        raise InputError(f"{label}: tensor dtype {tensor.dtype} cannot be read ({_one_line(exc)}); save float32") from None


# ---------------------------------------------------------------------------------------------
# CSV


class AmbiguousHeaderError(InputError):
    """The first row of a CSV file could be a header or a row of data; the caller must say which."""


class CsvCellError(InputError):
    """A CSV cell that must be a number is not (e.g. an id column among the score columns);
    ``named`` tells whether the file has a header (so that columns can be picked by name)."""

    def __init__(self, message: str, *, named: bool = False) -> None:
        super().__init__(message)
        self.named = named


@dataclass(frozen=True)
class _CsvTable:
    """A CSV file as text: the header's names (None without a header), the data rows, and the
    line number of each data row in the file (1-based; blank lines are skipped but counted)."""

    names: list[str] | None
    rows: list[list[str]]
    lines: list[int]

    @property
    def width(self) -> int:
        return len(self.names) if self.names is not None else len(self.rows[0]) if self.rows else 0

    def column_name(self, index: int) -> str:
        return repr(self.names[index]) if self.names is not None else str(index)


def _is_number(cell: str) -> bool:
    """A number as calib reads it: ASCII decimal or scientific notation (or nan/inf), never
    ``float()``'s ``1_5`` or non-ASCII digits (:mod:`calibrate_cli.data.number_text`)."""
    return is_plain_float(cell)


def _cell_float(cell: str) -> float:
    """``float(cell)`` of a plain number; ValueError for anything else (``1_5``, ``١٢`` included)."""
    value = float(cell)
    if ("_" in cell or not cell.isascii()) and not is_plain_float(cell):
        raise ValueError(cell)
    return value


def _not_plain(cell: str) -> str:
    """Why a cell that ``float()`` would read is refused (empty when ``float()`` refuses it too)."""
    return f" calib reads ({PLAIN_NUMBERS})" if lenient_only(cell) else ""


def _first_row_is_header(cells: list[str], label: str, line: int, n_rows: int, expected_rows: int | None) -> bool:
    """Header detection: names only → header; numbers only → data; anything else is ambiguous.

    A row of the integers 0, 1, …, W−1 is also ambiguous: it is how pandas writes the header of
    unnamed columns (``DataFrame(array).to_csv(index=False)``), and a plausible row of data. It is
    settled only when ``expected_rows`` (the other input's N) fits one reading and not the other.
    """
    for i, c in enumerate(cells):
        if lenient_only(c):
            raise InputError(f"{label}: line {line}, column {i}: {c!r} is not a number{_not_plain(c)}")
    kinds = ["empty" if not c else "number" if _is_number(c) else "name" for c in cells]
    if all(k == "name" for k in kinds):
        return True
    shown = ",".join(cells)
    shown = shown if len(shown) <= 60 else shown[:57] + "…"
    if all(k == "number" for k in kinds):
        if cells != [str(i) for i in range(len(cells))] or n_rows == 1:
            return False
        if expected_rows is not None and expected_rows != n_rows and expected_rows == n_rows - 1:
            return True
        if expected_rows is not None and expected_rows == n_rows:
            return False
        raise AmbiguousHeaderError(
            f"{label}: line {line}: cannot tell whether the first row {shown!r} is a header (as pandas writes "
            f"column names) or data ({n_rows - 1} or {n_rows} samples)"
        )
    why = "has an empty cell" if "empty" in kinds else "mixes names and numbers"
    raise AmbiguousHeaderError(
        f"{label}: line {line}: cannot tell whether the first row {shown!r} is a header or data (it {why})"
    )


def _read_csv_table(
    path: Path, label: str, header: bool | None = None, expected_rows: int | None = None
) -> _CsvTable:
    """Rows of text; ``header`` True/False says whether the first row is a header, None detects it."""
    rows, lines = [], []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            for row in reader:
                if row and any(c.strip() for c in row):
                    rows.append(row)
                    lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise InputError(f"{label}: not a text CSV file") from None
    except (OSError, csv.Error) as exc:
        raise InputError(f"{label}: cannot read CSV ({_one_line(exc)})") from None
    if not rows:
        raise InputError(f"{label}: empty CSV file (N = 0)")
    first = [c.strip() for c in rows[0]]
    if header is None:
        header = _first_row_is_header(first, label, lines[0], len(rows), expected_rows)
    names = None
    if header:
        names, rows, lines = first, rows[1:], lines[1:]
        if not rows:
            raise InputError(f"{label}: a header row but no data (N = 0)")
    width = len(names) if names is not None else len(rows[0])
    for row, line in zip(rows, lines):
        if len(row) != width:
            raise InputError(f"{label}: line {line} has {len(row)} columns, expected {width}")
    return _CsvTable(names, rows, lines)


def _column_index(header: list[str] | None, column: str, width: int, label: str) -> int:
    if header is not None and column in header:
        return header.index(column)
    try:
        index = parse_int(column)
    except ValueError:
        names = ", ".join(header) if header else "no header row"
        raise InputError(f"{label}: no column named {column!r} ({names})") from None
    if not -width <= index < width:
        raise InputError(f"{label}: column {index} is out of range ({width} columns)")
    return index % width


def _score_columns(
    table: _CsvTable, spec: str | None, exclude: int | None, label: str, *, check_index: bool = False
) -> list[int]:
    """The score columns: all but ``exclude`` (the labels), or those ``spec`` names.

    ``spec`` is a comma-separated list of column names, 0-based indices or glob patterns
    (``p_*``; matched against the header, in file order). ``check_index``: without ``spec``, a
    column named as a row index (:func:`index_name`) is refused (:class:`IndexColumnError`)."""
    width = table.width
    if spec is None:
        columns = [i for i in range(width) if i != exclude]
        if check_index and table.names is not None:
            named = [c for c in columns if index_name(table.names[c])]
            if named:
                raise index_column_error(label, table.names, columns, named[0], "by its name")
        return columns
    chosen: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if any(ch in part for ch in "*?["):
            if table.names is None:
                raise InputError(f"{label}: column pattern {part!r} needs a header row with column names")
            hits = [i for i, name in enumerate(table.names) if fnmatch.fnmatchcase(name, part)]
            if not hits:
                raise InputError(f"{label}: no column matches {part!r} (columns: {_names(table.names)})")
        else:
            hits = [_column_index(table.names, part, width, label)]
        chosen += [i for i in hits if i not in chosen]
    if not chosen:
        raise InputError(f"{label}: no score columns chosen by {spec!r}")
    if exclude is not None and exclude in chosen:
        raise InputError(f"{label}: column {table.column_name(exclude)} is both the labels and a score column")
    return chosen


def _numeric(table: _CsvTable, columns: list[int], label: str) -> np.ndarray:
    values = np.empty((len(table.rows), len(columns)), dtype=np.float64)
    for i, row in enumerate(table.rows):
        try:
            values[i] = [_cell_float(row[c]) for c in columns]
        except ValueError:
            c = next(c for c in columns if not _is_number(row[c]))
            where = f"{label}: line {table.lines[i]}, column {table.column_name(c)}: {row[c].strip()!r} is not a number"
            if lenient_only(row[c]):  # 1_5, ١٢: float() reads them, calib does not
                raise InputError(where + _not_plain(row[c])) from None
            raise CsvCellError(where, named=table.names is not None) from None
    return values


def class_names_of(columns: Sequence[str]) -> list[str]:
    """The class of each score column: its name without the prefix that every score column
    shares up to an underscore (``p_cat, p_dog`` → ``cat, dog``; ``cat, dog`` stay)."""
    columns = list(columns)
    cut = os.path.commonprefix(columns).rfind("_") + 1 if len(columns) > 1 else 0
    if cut and all(len(c) > cut for c in columns):
        return [c[cut:] for c in columns]
    return columns


def class_lookup(classes: Sequence[str], label: str) -> tuple[list[str], dict[str, int]]:
    """(the short class names, {full or short name: class index}) of score columns named after classes;
    a name that would point at two columns is a one-line error."""
    short = class_names_of(classes)
    lookup: dict[str, int] = {}
    for i, names in enumerate(zip(classes, short)):
        for text in names:
            if lookup.setdefault(text, i) != i:
                raise InputError(f"{label}: class name {text!r} names two score columns")
    return short, lookup


def _labels_from_cells(cells: list[str], lines: list[int], label: str, column: str, classes: Sequence[str] | None):
    """Labels from text: numbers as they are (checked later), or class names mapped to class indices."""
    for cell, line in zip(cells, lines):
        if not cell:
            raise InputError(f"{label}: line {line}: empty label in column {column}")
    try:
        return np.array([_cell_float(c) for c in cells], dtype=np.float64)
    except ValueError:
        pass
    line, name = next((ln, c) for c, ln in zip(cells, lines) if not _is_number(c))
    if lenient_only(name) and (classes is None or name not in class_lookup(classes, label)[1]):
        raise InputError(f"{label}: line {line}: label {name!r} is not a number{_not_plain(name)}")
    if classes is None:
        raise InputError(
            f"{label}: line {line}: label {name!r} is a name, but the score columns have no names to match it to; "
            "give class indices 0..K−1, or name the score columns after the classes (p_<class> or <class>)"
        )
    short, lookup = class_lookup(classes, label)
    out = np.empty(len(cells), dtype=np.int64)
    for i, (cell, line) in enumerate(zip(cells, lines)):
        index = lookup.get(cell)
        if index is None:
            raise InputError(
                f"{label}: line {line}: label {cell!r} is not a class (classes: {_names(short)}, "
                "from the score columns' names, in their order)"
            )
        out[i] = index
    return out


# ------------------------------------------------------------------------------- index columns
#: column names that say "row number", not "score" (compared stripped, in lower case); pandas' index
#: column written without a name ("") and read back ("Unnamed: 0") too
INDEX_NAMES = frozenset({"id", "idx", "index", "row", ""})
_UNNAMED = re.compile(r"unnamed: ?\d+")
#: a column holding the integers 0..N−1 (or 1..N) in order is a row index from this many rows on
#: (below, a genuine score column can read 0, 1 or 1, 2: the probabilities of two one-hot rows)
MIN_INDEX_ROWS = 3


def index_name(name: str) -> bool:
    """Whether a column's name says it holds row numbers: id, idx, index, row (any case), or the
    name pandas gives its unnamed index column ("", "Unnamed: 0")."""
    text = name.strip().lower()
    return text in INDEX_NAMES or _UNNAMED.fullmatch(text) is not None


class IndexColumnError(InputError):
    """The score columns were not chosen, and one of the columns taken for scores looks like a row
    index (by its name, or by holding 0..N−1 or 1..N in order). ``reason`` is the message without the
    remedy, ``spec`` a choice of the other columns that fixes it (None when there is none)."""

    def __init__(self, reason: str, spec: str | None):
        fix = f"score_cols={spec!r}" if spec is not None else "score_cols"
        super().__init__(f"{reason}; choose the score columns ({fix})")
        self.reason, self.spec = reason, spec


def _suggested_spec(names: Sequence[str] | None, rest: list[int]) -> str | None:
    """A ``score_cols`` choosing exactly the columns ``rest`` (in order): a glob of their common
    prefix (``logit_*``) when it matches them and nothing else, else their names (or indices)."""
    if not rest:
        return None
    if names is None:
        return ",".join(str(c) for c in rest)
    chosen = [names[c] for c in rest]
    prefix = os.path.commonprefix(chosen) if len(chosen) > 1 else ""
    # a prefix that ends a word (logit_, p-) or is followed by numbers only (c0, c1, …): not l* of logit_0, label
    word = prefix[-1:] in ("_", "-", ".", " ") or all(name[len(prefix):].isdigit() for name in chosen)
    if prefix and word and not any(ch in prefix for ch in "*?[,"):
        pattern = prefix + "*"
        if [i for i, name in enumerate(names) if fnmatch.fnmatchcase(name, pattern)] == rest:
            return pattern
    return ",".join(chosen)


def index_column_error(
    label: str, names: Sequence[str] | None, columns: list[int], bad: int, why: str
) -> IndexColumnError:
    """The error for score column ``bad`` (a file column index) that looks like a row index."""
    shown = repr(names[bad]) if names is not None else str(bad)
    rest = [c for c in columns if c != bad and not (names is not None and index_name(names[c]))]
    reason = f"{label}: column {shown} looks like a row index ({why}), not scores"
    return IndexColumnError(reason, _suggested_spec(names, rest))


class IndexWatch:
    """Watches score columns chosen by default, block by block, for a row index: a column holding
    the integers 0..N−1 or 1..N in order (N ≥ :data:`MIN_INDEX_ROWS`). :meth:`finish` after the last
    block raises :class:`IndexColumnError` for the first such column. ``columns``: the file columns
    of the scores' columns (in order), ``names`` the file's column names (None without a header)."""

    def __init__(self, label: str, names: Sequence[str] | None, columns: list[int]):
        self.label, self.names, self.columns = label, names, list(columns)
        self.starts: dict[int, int | None] = {j: None for j in range(len(self.columns))}  # candidates
        self.rows = 0

    def block(self, scores: np.ndarray) -> None:
        scores = np.asarray(scores)
        rows = scores.shape[0] if scores.ndim else 0
        if not rows or not self.starts or scores.ndim > 2:
            self.starts = {} if scores.ndim > 2 else self.starts
            self.rows += rows
            return
        for j in list(self.starts):
            column = scores[:, j] if scores.ndim == 2 else scores
            start = self.starts[j]
            if start is None:
                first = column[0]
                if not (first == 0 or first == 1):
                    del self.starts[j]
                    continue
                start = self.starts[j] = int(first)
            if not _counts_up(column, start + self.rows):
                del self.starts[j]
        self.rows += rows

    def finish(self) -> None:
        if self.rows < MIN_INDEX_ROWS or not self.starts:
            return
        bad = self.columns[min(self.starts)]
        start = self.starts[min(self.starts)]
        why = f"it holds {start}, {start + 1}, {start + 2}, …, {start + self.rows - 1} in order"
        raise index_column_error(self.label, self.names, self.columns, bad, why)


def _counts_up(column: np.ndarray, first: int) -> bool:
    """Whether ``column`` is first, first + 1, …, in order (compared in blocks: no (N,) temporary)."""
    n = column.shape[0]
    if column[-1] != first + n - 1:
        return False
    step = 1 << 16
    for a in range(0, n, step):
        part = column[a:a + step]
        if not np.array_equal(part, np.arange(first + a, first + a + part.shape[0])):
            return False
    return True


def check_index_values(label: str, names, columns: list[int], scores: np.ndarray) -> None:
    """Refuse score columns chosen by default when one holds 0..N−1 or 1..N in order (:class:`IndexWatch`)."""
    watch = IndexWatch(label, names, columns)
    watch.block(scores)
    watch.finish()


@dataclass(frozen=True)
class ScoresFile:
    """What :func:`read_scores` found: the scores, the labels column (or None), and the classes'
    names when the score columns have names (CSV with a header; used to read class-name labels).
    ``score_columns``: the columns the scores were read from, for the report: their names, or their
    0-based indices in a CSV file without a header (None for files without columns)."""

    scores: np.ndarray
    labels: np.ndarray | None = None
    class_names: tuple[str, ...] | None = None
    score_columns: tuple[str, ...] | tuple[int, ...] | None = None


def read_scores(
    source: str | os.PathLike,
    *,
    label_col: str | None = None,
    score_cols: str | None = None,
    header: bool | None = None,
    expected_rows: int | None = None,
) -> ScoresFile:
    """Load scores, and with ``label_col`` (CSV or table file: a column name or index) the labels column.

    Table files (Parquet, Arrow, Feather) take ``score_cols``/``label_col`` as CSV does, by column name
    (:func:`calibrate_cli.data.tables.read_table`; a list column may hold the K scores). CSV options: ``score_cols`` picks the score columns (names, indices or globs such as ``p_*``,
    comma-separated; other columns are ignored); ``header`` says whether the first row is a
    header (None: detected, and an error when it cannot be told); ``expected_rows`` (the labels'
    N, when known) settles a first row that could be either. Labels given as class names map to the
    score columns' order (see :func:`class_names_of`).
    """
    path, key = split_source(source)
    label = os.fspath(source)
    fmt = INPUT_FORMATS.get(path.suffix.lower())
    if fmt is not None and fmt.table:
        _check_readable(path, label)
        scores, labels, classes = _tables().read_table(path, key, label, score_cols=score_cols, label_col=label_col)
        return ScoresFile(scores, labels, classes, classes)
    if path.suffix.lower() != ".csv":
        if label_col is not None:
            raise InputError(f"{label}: --label-col works with .csv and table files only (.parquet, .arrow, .feather)")
        if score_cols is not None:
            raise InputError(f"{label}: score columns can be chosen in CSV and table files only (.csv, .parquet, .arrow, .feather)")
        return ScoresFile(load_array(source))
    _check_readable(path, label)
    score_cols = _csv_key_columns(key, score_cols, label)
    by_default = score_cols is None  # every column but the labels: none may be a row index
    fast = _fast_csv(path, label, header, expected_rows, label_col, score_cols, check_index=by_default)
    if fast is not None:
        names, columns, scores, labels = fast
    else:
        table = _read_csv_table(path, label, header, expected_rows)
        names = table.names
        col = None if label_col is None else _column_index(table.names, label_col, table.width, label)
        columns = _score_columns(table, score_cols, col, label, check_index=by_default)
        scores = _numeric(table, columns, label)
    if by_default:
        check_index_values(label, names, columns, scores)
    classes = tuple(names[c] for c in columns) if names is not None else None
    if fast is None:
        labels = None
        if col is not None:
            labels = _labels_from_cells(
                [row[col].strip() for row in table.rows], table.lines, label, table.column_name(col), classes
            )
    shown = classes if classes is not None else tuple(columns)
    return ScoresFile(scores[:, 0] if scores.shape[1] == 1 else scores, labels, classes, shown)


def _csv_key_columns(key: str | None, score_cols: str | None, label: str) -> str | None:
    """The score columns of ``file.csv:COLS`` (the key) or ``--scores`` (not both), as for tables."""
    if key is None:
        return score_cols
    if score_cols is not None:
        raise InputError(f"{label}: columns given twice (after ':' and as score columns); give one")
    if not key.strip():
        raise InputError(f"{label}: no columns after ':'; name them, e.g. {label}p_* or {label}label")
    return key


class NotStreamed(Exception):
    """A streamed read (:func:`stream_scores`) found what only the whole-file reader handles: read it whole."""


class ScoreBlocks:
    """The (scores, labels) blocks of :func:`stream_scores`, in row order; ``score_columns`` as in
    :class:`ScoresFile` (the columns the scores are read from, for the report)."""

    def __init__(self, blocks, score_columns=None):
        self._blocks = iter(blocks)
        self.score_columns = score_columns

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._blocks)


def stream_scores(
    source: str | os.PathLike,
    *,
    label_col: str,
    score_cols: str | None = None,
    header: bool | None = None,
):
    """(number of rows, whether it is certain, blocks) where ``blocks`` yields SCORES' (scores, labels)
    in row order, block by block (:mod:`calibrate_cli.engine.stream`), or None when this file is read whole
    (any type but CSV and table files, or a CSV file only the full reader handles). A table's N is
    its metadata's; a CSV file's is counted from its lines, a guess that blank or odd lines can miss
    (:class:`~calibrate_cli.engine.stream.RowCountMismatch` then, from an exact-N summary pass).

    Iterating ``blocks`` raises :class:`NotStreamed` or an InputError whose row numbers may count
    from a block: on either, read the file with :func:`read_scores` for the whole-file message."""
    path, key = split_source(source)
    label = os.fspath(source)
    fmt = INPUT_FORMATS.get(path.suffix.lower())
    if fmt is not None and fmt.table:
        _check_readable(path, label)
        classes, n, blocks = _tables().iter_table(path, key, label, score_cols=score_cols, label_col=label_col)
        return n, n is not None, ScoreBlocks(blocks, classes)  # the metadata's count (checked against the rows read)
    if path.suffix.lower() != ".csv":
        return None
    _check_readable(path, label)
    score_cols = _csv_key_columns(key, score_cols, label)
    from . import csvfast

    def decide(cells: list[str], line: int, n_rows: int) -> bool:
        return _first_row_is_header(cells, label, line, n_rows, None)

    chosen: list = []

    def choose(names, width):
        table = _CsvTable(names, [[""] * width], [0])
        col = _column_index(names, label_col, width, label)
        chosen[:] = _score_columns(table, score_cols, col, label, check_index=score_cols is None)
        return list(chosen), col

    found = csvfast.iter_numeric_csv(path, label, header, decide, choose)
    if found is None:
        return None
    names = found[0]
    watch = IndexWatch(label, names, chosen) if score_cols is None else None

    def blocks():
        try:
            for scores, labels in found[1]:
                if watch is not None:
                    watch.block(scores)
                yield (scores[:, 0] if scores.shape[1] == 1 else scores), labels
        except csvfast.Fallback:
            raise NotStreamed(label) from None
        if watch is not None:
            watch.finish()

    shown = tuple(names[c] for c in chosen) if names is not None else tuple(chosen)
    # N as a guess (the lines, less empty ones and the header): the summary pass checks it
    return csvfast.count_data_rows(path, names is not None), False, ScoreBlocks(blocks(), shown)


def load_array(source: str | os.PathLike) -> np.ndarray:
    """Load one array from ``source`` (any suffix of :data:`INPUT_FORMATS`, ``:key`` after keyed ones),
    never unpickling."""
    path, key = split_source(source)
    label = os.fspath(source)
    suffix = path.suffix.lower()
    fmt = INPUT_FORMATS.get(suffix)
    _check_readable(path, label, directory=fmt is not None and fmt.directory)
    if fmt is None:
        raise InputError(f"{label}: unknown file type {suffix or '(none)'!r}; expected one of {', '.join(INPUT_FORMATS)}")
    try:
        return fmt.load(path, key, label)
    except OSError as exc:  # opening or reading it failed for a reason of the machine's (no loader's message)
        if isinstance(exc, CalibError):
            raise
        raise InputError(f"{label}: cannot read ({_os_reason(exc)})") from None
    except MemoryError:
        raise InputError(f"{label}: out of memory reading it") from None


def load_scores(source: str | os.PathLike, *, label_col: str | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Load scores; with ``label_col`` (CSV only: a column name or index) also the labels column."""
    found = read_scores(source, label_col=label_col)
    return found.scores, found.labels


def load_labels(
    source: str | os.PathLike,
    *,
    header: bool | None = None,
    classes: Sequence[str] | None = None,
    expected_rows: int | None = None,
) -> np.ndarray:
    """Load labels: (N,) integers or one-hot (N, K), from any supported file type.

    A one-column CSV may hold class names, mapped to ``classes`` (the score columns' names, see
    :func:`class_names_of`); ``header``/``expected_rows`` as in :func:`read_scores`."""
    path, key = split_source(source)
    label = os.fspath(source)
    fmt = INPUT_FORMATS.get(path.suffix.lower())
    if fmt is not None and fmt.table:
        _check_readable(path, label)
        numbers, names, _ = _tables().read_table(path, key, label, classes=classes, labels_only=True)
        return numbers if numbers is not None else names
    if path.suffix.lower() != ".csv":
        labels = load_array(source)
        if labels.ndim == 0:  # a single number: len() of it would fail
            raise InputError(f"{label}: expected labels of shape (N,) or one-hot (N, K), got shape ()")
        return labels
    _check_readable(path, label)
    if key is not None:  # file.csv:COLUMN: that column holds the labels (numbers or class names)
        if not key.strip():
            raise InputError(f"{label}: no column after ':'; name the labels column, e.g. {label}label")
        table = _read_csv_table(path, label, header, expected_rows)
        col = _column_index(table.names, key, table.width, label)
        cells = [row[col].strip() for row in table.rows]
        return _labels_from_cells(cells, table.lines, label, table.column_name(col), classes)
    fast = _fast_csv(path, label, header, expected_rows)
    if fast is not None:
        values = fast[2]
        return values[:, 0] if values.shape[1] == 1 else values
    table = _read_csv_table(path, label, header, expected_rows)
    if table.width == 1:
        cells = [row[0].strip() for row in table.rows]
        return _labels_from_cells(cells, table.lines, label, table.column_name(0), classes)
    return _numeric(table, list(range(table.width)), label)


# ------------------------------------------------------------------------------------------ shards
_GLOB_CHARS = re.compile(r"[*?\[]")


def list_shards(source: str | os.PathLike) -> list[str] | None:
    """The files of a sharded input, or None when ``source`` is one file.

    A glob pattern (``preds/x_*.npy``; ``*``, ``?``, ``[...]``) gives the regular files it matches, a
    directory its ``.npy`` files, both in natural order (:func:`natural_key`: x_2 before x_10, with or
    without zero-padding). A path that exists as a file is one file, whatever its characters."""
    text = os.fspath(source)
    if not text:
        return None  # Path("") is ".": the loader says "empty file name"
    path = Path(text)
    fmt = INPUT_FORMATS.get(path.suffix.lower())
    try:
        path.exists()  # a name over NAME_MAX, a folder the user may not search: said here, not a traceback
    except OSError as exc:
        raise InputError(f"{text}: cannot read ({_os_reason(exc)})") from None
    if path.is_dir() and not (fmt is not None and fmt.directory):
        files = [os.fspath(p) for p in path.iterdir() if p.suffix.lower() == ".npy" and p.is_file()]
        files.sort(key=natural_key)
        if not files:
            raise InputError(f"{text}: a directory without .npy files (shards are read from its .npy files)")
        return files
    if path.exists() or not _GLOB_CHARS.search(text):
        return None
    base, key = split_source(text)
    if key is not None and base.exists():
        return None  # a key of one file: preds.parquet:logit_*
    import glob

    files = sorted((p for p in glob.glob(text) if Path(p).is_file()), key=natural_key)
    if not files:
        raise InputError(f"{text}: no file matches this pattern")
    return files


_DIGIT_RUNS = re.compile(r"([0-9]+)")


def natural_key(name: str) -> tuple:
    """Sort key comparing the runs of digits in ``name`` as integers: x_2 before x_10, x_02 next to x_2
    (then plain order breaks the tie)."""
    parts = _DIGIT_RUNS.split(name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


def shard_numbers(files: Sequence[str]) -> list[tuple[int, ...]]:
    """The number(s) of each shard: the runs of digits in its path (less its suffix) as integers,
    keeping, when every path holds as many runs, only those that differ between the files
    (``run2/x_1_of_4.npy`` → (1,)); a single file has the number ()."""
    runs = []
    for name in files:
        path = Path(name)
        stem = os.fspath(path.with_suffix("")) if path.suffix.lower() in INPUT_FORMATS else os.fspath(path)
        runs.append(tuple(int(d) for d in _DIGIT_RUNS.findall(stem)))
    if len({len(r) for r in runs}) == 1:
        varying = [i for i in range(len(runs[0])) if len({r[i] for r in runs}) > 1]
        runs = [tuple(r[i] for i in varying) for r in runs]
    return runs


def _shard_number_text(number: tuple[int, ...]) -> str:
    return ".".join(str(n) for n in number) if number else "(none)"


def pair_shards(
    score_files: Sequence[str], label_files: Sequence[str], scores: str, labels: str
) -> list[tuple[str, str]]:
    """Pair score shards with label shards by their numbers (:func:`shard_numbers`: ``x_1 … x_10``
    with ``y_01 … y_10``), in the score shards' order. Refused, naming the files: two shards of one
    side with the same number (or none), a shard whose number the other side lacks. ``scores`` and
    ``labels`` (the patterns or folders given) name the sides."""
    if len(score_files) == 1 and len(label_files) == 1:
        return [(score_files[0], label_files[0])]
    sides = []
    for files, side in ((score_files, scores), (label_files, labels)):
        numbers = shard_numbers(files)
        seen: dict[tuple, str] = {}
        for name, number in zip(files, numbers):
            if number in seen:
                what = f"the same shard number {_shard_number_text(number)}" if number else "no shard number"
                raise InputError(
                    f"{side}: {seen[number]} and {name} have {what}; shards pair by the numbers in their names, "
                    "one file per number on each side"
                )
            seen[number] = name
        sides.append(seen)
    by_score, by_label = sides
    for mine, other, other_side in ((by_score, by_label, labels), (by_label, by_score, scores)):
        lost = [name for number, name in mine.items() if number not in other]
        if lost:
            number = next(n for n, name in mine.items() if name == lost[0])
            more = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
            raise InputError(
                f"{lost[0]}{more}: no shard numbered {_shard_number_text(number)} in {other_side} "
                f"(its shards: {_names([other[n] for n in other], 4)}); shards pair by the numbers in their names"
            )
    return [(name, by_label[number]) for number, name in by_score.items()]


def load_shard(
    scores: str,
    labels: str | None,
    *,
    label_col: str | None = None,
    score_cols: str | None = None,
    header: bool | None = None,
) -> tuple:
    """(scores, labels, scores_name, labels_name) of one shard: SCORES' file and LABELS' file (or
    SCORES' ``label_col`` column), as :func:`read_scores` and :func:`load_labels` read them."""
    found = read_scores(scores, label_col=label_col, score_cols=score_cols, header=header)
    if found.labels is not None:
        return found.scores, found.labels, scores, f"{scores}[{label_col}]"
    n = found.scores.shape[0] if found.scores.ndim >= 1 else None
    return found.scores, load_labels(labels, header=header, classes=found.class_names, expected_rows=n), scores, labels


# ----------------------------------------------------------------------------------------- outputs
#: temporaries are named ``.NAME.calib-tmp-PID`` (see :func:`temporary_name`)
TEMP_MARK = ".calib-tmp-"
#: temporaries of this process not yet placed or removed; the CLI removes them on SIGTERM
_LIVE_TEMPS: set[str] = set()
_KINDS = {
    "S_ISDIR": "a directory",
    "S_ISFIFO": "a FIFO (named pipe)",
    "S_ISCHR": "a character device",
    "S_ISBLK": "a block device",
    "S_ISSOCK": "a socket",
}


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def _not_regular(mode: int) -> str | None:
    """What a file of this ``st_mode`` is, when it is not a regular file."""
    import stat

    for test, what in _KINDS.items():
        if getattr(stat, test)(mode):
            return what
    return None if stat.S_ISREG(mode) else "not a regular file"


def _descriptor_link(path: Path) -> bool:
    """Whether the symbolic link ``path`` is, or leads through, ``/proc`` or ``/dev`` (such as
    /dev/stdout → /proc/self/fd/1): its "target" is whatever the process has open there, which
    calib must not replace."""
    current = os.path.abspath(path)
    for _ in range(40):
        if current.startswith(("/proc/", "/dev/")):
            return True
        if not os.path.islink(current):
            return False
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    return False


def is_sink(path: str | os.PathLike) -> bool:
    """Whether ``path`` itself (not through a symbolic link) is a character device such as
    ``/dev/null``: an output that calib writes straight into (no temporary, no rename, no --force:
    nothing is replaced), so that a script can throw a report away with ``-o /dev/null``."""
    import stat

    try:
        return stat.S_ISCHR(os.lstat(os.fspath(path)).st_mode)
    except (OSError, ValueError):
        return False


def check_output_path(path: str | os.PathLike, *, force: bool = False) -> Path:
    """Check before any work that ``path`` may receive an output; return where it will be written.

    Refused: an empty name; a missing or unwritable folder; a name longer than the file system's
    NAME_MAX; an existing file unless ``force``; and, even with ``force``, anything that is not a
    regular file (a directory, FIFO, device, socket), a symbolic link whose target is not one, and
    a link into /proc or /dev (/dev/stdout). A symbolic link to a regular file is written through:
    its target is replaced, the link stays (the returned path is the target's). Call it before long work so the user learns early;
    :func:`atomic_write` calls it again when it places the file.
    """
    text = os.fspath(path)
    if not text:
        raise OutputError("output file name is empty")
    if text.endswith(("/", os.sep)) or os.path.basename(text) == ".":  # Path("x.json/") is x.json
        trailing = "/" if text.endswith(("/", os.sep)) else "/."
        raise OutputError(f"{text}: names a folder (a trailing '{trailing}'), not a file; give a file name")
    path = Path(text)
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            size = len(os.fsencode(path.name))
            raise OutputError(f"{path}: file name too long ({size} bytes; the file system allows fewer)") from None
        raise OutputError(f"{path}: cannot write ({exc.strerror or _one_line(exc)})") from None
    target = path
    if st is not None:
        import stat

        if stat.S_ISLNK(st.st_mode):
            if _descriptor_link(path):
                raise OutputError(
                    f"{path}: is a link to a process's file descriptor (/dev/stdout, /proc/self/fd/N); "
                    "calib does not write through it (-o - writes the report to stdout)"
                )
            try:
                target = path.resolve(strict=True)
                what = _not_regular(target.stat().st_mode)
            except (OSError, RuntimeError):
                raise OutputError(f"{path}: is a symbolic link to a missing file; calib does not write through it") from None
            if what:
                raise OutputError(f"{path}: is a symbolic link to {what}; calib writes only regular files")
        elif stat.S_ISCHR(st.st_mode):  # /dev/null: written into directly (atomic_write), never replaced
            return path
        else:
            what = _not_regular(st.st_mode)
            if what:
                raise OutputError(f"{path}: is {what}; calib writes only regular files")
        if not force:
            raise OutputError(f"{path}: already exists; use --force to overwrite")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"{path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: cannot write in folder {folder} (permission denied)")
    name_max = _name_max(folder)
    size = len(os.fsencode(target.name))
    if size > name_max:
        raise OutputError(f"{path}: file name too long ({size} bytes; this file system allows {name_max})")
    return target


def check_array_path(path: str | os.PathLike, *, force: bool = False) -> Path:
    """:func:`check_output_path` for :func:`write_array`: the name must end in ``.npy`` (or be a
    sink such as /dev/null, :func:`is_sink`)."""
    if Path(os.fspath(path)).suffix.lower() != ".npy" and not is_sink(path):
        raise OutputError(f"{path}: arrays are written as .npy; give a file name ending in .npy")
    return check_output_path(path, force=force)


def temporary_name(name: str, pid: int | None = None, name_max: int = 255) -> str:
    """The temporary of output ``name`` written by process ``pid``: ``.NAME.calib-tmp-PID``.

    When that exceeds ``name_max`` bytes, NAME is cut (on a character boundary) and followed by
    ``~`` and 12 hex digits of its SHA-1, so a legal 255-byte output name still gets a temporary.
    """
    import hashlib

    pid = os.getpid() if pid is None else pid
    tail = f"{TEMP_MARK}{pid}"
    full = f".{name}{tail}"
    if len(os.fsencode(full)) <= name_max:
        return full
    raw = os.fsencode(name)
    digest = hashlib.sha1(raw).hexdigest()[:12]
    budget = max(name_max - len(tail) - len(digest) - 2, 1)
    short = raw[:budget].decode("utf-8", "ignore")  # never half a character
    return f".{short}~{digest}{tail}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # a process of another user has it (or the number cannot be a process of ours)
    return True


def remove_stale_temporaries(folder: str | os.PathLike, name: str) -> list[Path]:
    """Remove temporaries of output ``name`` in ``folder`` left by calib processes that are gone
    (killed with SIGKILL, power loss): regular files of this user named by
    :func:`temporary_name` whose PID is not a running process. Returns what was removed.
    (A temporary written on another machine into a shared folder could look stale here; the
    other run then reports that its output could not be placed.)"""
    import re
    import stat

    folder = Path(folder)
    name_max = _name_max(folder)
    pattern = re.compile(re.escape(TEMP_MARK) + r"(\d+)$")
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.search(entry.name)
        if not match:
            continue
        pid = int(match.group(1))
        if entry.name != temporary_name(name, pid, name_max) or pid == os.getpid() or _pid_alive(pid):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


def remove_live_temporaries() -> None:
    """Remove this process's unplaced temporaries (the CLI's SIGTERM/SIGINT path)."""
    for tmp in list(_LIVE_TEMPS):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        _LIVE_TEMPS.discard(tmp)


def _place(tmp: str, target: Path, shown: Path, force: bool) -> None:
    """Give the finished temporary its final name without ever replacing a file that appeared
    while calib was working (unless ``force``): a hard link fails when the name exists."""
    if force:
        os.replace(tmp, target)
        return
    exists = OutputError(f"{shown}: appeared while calib was working; not replaced (use --force to overwrite)")
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise exists from None
    except OSError:
        # no hard links here (FAT, some network file systems): claim the name with O_EXCL instead
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            raise exists from None
        os.replace(tmp, target)
        return
    os.unlink(tmp)


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None], *, force: bool = False) -> Path:
    """Write a file atomically: ``write(f)`` fills a temporary ``.NAME.calib-tmp-PID`` in the same
    folder, which then takes the final name (readers never see a half-written file). Without
    ``force`` the final step is a hard link, which fails if a file of that name appeared in the
    meantime (nothing is ever replaced); with ``force`` a rename replaces the file (through a
    symbolic link, its target: see :func:`check_output_path`). Stale temporaries of the same name
    from killed runs are removed first. The file gets the usual permissions (0666 minus the umask).
    """
    target = check_output_path(path, force=force)
    shown = Path(os.fspath(path))
    if is_sink(target):  # /dev/null: nothing to replace atomically, written straight into
        try:
            with open(target, "wb") as f:
                write(f)
        except OSError as exc:
            raise OutputError(f"{shown}: cannot write ({_one_line(exc)})") from None
        return shown
    folder = target.parent if str(target.parent) else Path(".")
    remove_stale_temporaries(folder, target.name)
    tmp = os.fspath(folder / temporary_name(target.name, name_max=_name_max(folder)))
    _LIVE_TEMPS.add(tmp)
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:  # left by a dead process that had our PID
            os.unlink(tmp)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        check_output_path(path, force=True)  # not turned into a FIFO meanwhile (existence: _place)
        _place(tmp, target, shown, force)
    except OutputError:
        Path(tmp).unlink(missing_ok=True)
        raise
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{shown}: cannot write ({_one_line(exc)})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        _LIVE_TEMPS.discard(tmp)
    return shown


def write_text(path: str | os.PathLike, text: str, *, force: bool = False) -> Path:
    """Write ``text`` (UTF-8; file names that were not UTF-8 keep their bytes) to ``path``
    atomically; refuse to overwrite unless ``force``."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8", "surrogateescape")), force=force)


def write_array(path: str | os.PathLike, array: np.ndarray, *, force: bool = False) -> Path:
    """Save ``array`` as ``.npy`` at ``path`` atomically; refuse to overwrite unless ``force``."""
    check_array_path(path, force=force)
    return atomic_write(path, lambda f: np.save(f, np.asarray(array), allow_pickle=False), force=force)


def read_json(source: str | os.PathLike, *, what: str = "a readable JSON file"):
    """The JSON document in file ``source``; a missing or unreadable file, or invalid JSON, is one
    InputError starting with the path (``{source}: not {what} (...)``)."""
    path = Path(source)
    _check_readable(path, str(source))
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:  # [[[[…]]]] deeper than Python's recursion limit
        raise InputError(f"{source}: not {what} (nested too deeply)") from None
    except OSError as exc:
        raise InputError(f"{source}: cannot read ({_os_reason(exc)})") from None
    except ValueError as exc:  # invalid JSON, not UTF-8, an integer of more than 4300 digits
        reason = _one_line(exc)
        if "integer string conversion" in reason:  # Python's advice to raise its limit is not the user's
            digits = re.search(r"value has (\d+) digits", reason)
            reason = f"a number of {digits.group(1) if digits else 'too many'} digits, more than Python reads"
        raise InputError(f"{source}: not {what} ({reason})") from None


def load_temperature(value: str) -> float:
    """A temperature given as a number (``"1.5"``) or as a JSON file of a saved temperature fit
    (what ``calib temperature --output t.json`` writes; an old file with only a ``"temperature"``
    key works too). Any saved calibration, Platt and vector included:
    :func:`calibrate_cli.calibrators.load_calibrator`."""
    from ..calibrators import load_calibrator

    if isinstance(value, str) and lenient_only(value):  # float() reads "1_5" as 15: calib does not
        raise InputError(f"temperature {value!r} is not a number ({PLAIN_NUMBERS})")
    calibrator = load_calibrator(value)
    if calibrator.temperature is None:
        raise InputError(
            f"{value}: holds a {calibrator.name} calibration, not a temperature (load it with load_calibrator)"
        )
    return calibrator.temperature
