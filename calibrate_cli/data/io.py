"""Reading model outputs from files: the loaders and the registry of input formats (docs/conventions.md).

Sources are paths with an optional key: ``logits.npy``, ``outputs.npz:logits``, ``run.pt:logits``,
``preds.csv``, ``preds.parquet:logit_*``, ``run.safetensors:logits``, ``run.h5:/eval/logits``,
``run.zarr:logits``. Each suffix has one entry in :data:`INPUT_FORMATS` (an
:class:`~calibrate_cli.data.formats.InputFormat`); CSV lives in :mod:`.csvfile`, the optional formats in
:mod:`.tables` and :mod:`.arrays`, the column rules they share in :mod:`.columns`. Nothing is ever
unpickled: ``.npy``/``.npz`` load with ``allow_pickle=False``, ``.pt`` with
``torch.load(weights_only=True)`` (torch is optional and imported only for ``.pt``). Large ``.npy``
files are memory-mapped. Every problem is an :class:`InputError` whose one-line message
starts with the file's path. Writing results: :mod:`.outputs`.
"""

from __future__ import annotations

import math
import os
import re
import stat
import warnings
from pathlib import Path
from typing import BinaryIO, Sequence

import numpy as np

from ..errors import CalibError, InputError
from .columns import AmbiguousHeaderError, CsvCellError, IndexColumnError
from .formats import InputFormat, NotStreamed, ScoresFile, names_text, one_line, os_reason, pick_key, resource_problem
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
    "check_readable",
    "split_source",
    "SUFFIXES",
    "INPUT_FORMATS",
    # what the readers return and raise (defined in .formats and .columns)
    "InputFormat",
    "NotStreamed",
    "ScoresFile",
    "AmbiguousHeaderError",
    "CsvCellError",
    "IndexColumnError",
]

#: a .npy file larger than this is memory-mapped, not read: a pass reads it chunk by chunk and gives
#: the pages back (calibrate_cli.data.pages), so neither scores nor labels stay resident whole
MMAP_THRESHOLD_BYTES = 16 << 20
_NPY_MAGIC = b"\x93NUMPY"


def _load_npy_source(path: Path, key, label: str) -> np.ndarray:
    return _load_npy(path, label)


def _columns_of(family):
    """The column capabilities of a family's module (:mod:`.csvfile`, :mod:`.tables`), imported on use."""
    return dict(
        read_columns=lambda *args, **kw: family().read_columns(*args, **kw),
        iter_blocks=lambda *args, **kw: family().iter_blocks(*args, **kw),
        read_labels=lambda *args, **kw: family().read_labels(*args, **kw),
    )


def _csv():
    from . import csvfile

    return csvfile


def _tables():
    from . import tables

    return tables


def _arrays():
    from . import arrays

    return arrays


_CSV, _TABLE = _columns_of(_csv), _columns_of(_tables)

#: suffix → format (lower case). The loaders are defined below; looked up at call time.
INPUT_FORMATS: dict[str, InputFormat] = {
    ".npy": InputFormat(_load_npy_source),
    ".npz": InputFormat(lambda path, key, label: _load_npz(path, key, label), keyed=True),
    ".pt": InputFormat(lambda path, key, label: _load_torch(path, key, label), keyed=True),
    ".pth": InputFormat(lambda path, key, label: _load_torch(path, key, label), keyed=True),
    # file.csv:COLS chooses columns, as for tables
    ".csv": InputFormat(lambda path, key, label: _csv().load_csv(path, key, label), keyed=True, **_CSV),
    ".parquet": InputFormat(lambda path, key, label: _tables().load_table_array(path, key, label), keyed=True, **_TABLE),
    ".arrow": InputFormat(lambda path, key, label: _tables().load_table_array(path, key, label), keyed=True, **_TABLE),
    ".feather": InputFormat(lambda path, key, label: _tables().load_table_array(path, key, label), keyed=True, **_TABLE),
    ".safetensors": InputFormat(lambda path, key, label: _arrays().load_safetensors(path, key, label), keyed=True),
    ".h5": InputFormat(lambda path, key, label: _arrays().load_hdf5(path, key, label), keyed=True, nested_keys=True),
    ".hdf5": InputFormat(lambda path, key, label: _arrays().load_hdf5(path, key, label), keyed=True, nested_keys=True),
    ".zarr": InputFormat(
        lambda path, key, label: _arrays().load_zarr(path, key, label), keyed=True, nested_keys=True, directory=True
    ),
}

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


#: the input files checked by :func:`check_readable` in this process (label → size in bytes): an
#: "out of memory" that no loader caught names them (the CLI clears it when a command starts)
INPUTS_READ: dict[str, int] = {}


def inputs_read_text(prefix: str = "") -> str:
    """``prefix`` + ``x.npy (160 MB), y.npy (16 MB)``, the largest first; "" when none was read."""
    if not INPUTS_READ:
        return ""
    largest = sorted(INPUTS_READ.items(), key=lambda item: -item[1])
    return prefix + names_text([f"{label} ({_size(size)})" for label, size in largest], limit=4)


def check_readable(path: Path, label: str, directory: bool = False) -> None:
    """A regular, readable file (a FIFO or a device would block or never end: refused); with
    ``directory``, a readable directory (a Zarr store)."""
    if not os.fspath(label).strip():
        raise InputError("'': empty file name")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{label}: no such file") from None
    except OSError as exc:
        raise InputError(f"{label}: cannot read ({os_reason(exc)})") from None
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
        raise InputError(f"{label}: not a valid .npy {what} (bad header: {type(exc).__name__}: {one_line(exc)})") from None
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
        raise InputError(f"{label}: truncated or corrupt .npy file ({one_line(exc)})") from None
    except (OSError, EOFError) as exc:
        if resource_problem(exc):  # ENOMEM from mmap under ulimit -v, EMFILE: the machine, not the file
            raise InputError(f"{label}: cannot read ({resource_problem(exc)})") from None
        raise InputError(f"{label}: truncated or corrupt .npy file ({one_line(exc)})") from None
    except MemoryError:
        raise
    except Exception as exc:  # a mangled header: numpy's parser raises TokenError, SyntaxError, ...
        raise InputError(f"{label}: corrupt .npy header ({type(exc).__name__}: {one_line(exc)})") from None


def _load_npz(path: Path, key: str | None, label: str) -> np.ndarray:
    import zipfile  # here: only .npz files need it (not every command's start)

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
        raise InputError(f"{label}: corrupt .npz file ({one_line(exc)})") from None
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise InputError(f"{label}: truncated or corrupt .npz file ({one_line(exc)})") from None
    except NotImplementedError as exc:  # zipfile: a compression method Python cannot read (e.g. AES)
        raise InputError(f"{label}: a member uses a compression calib cannot read ({one_line(exc)}); "
                         "save it with np.savez or np.savez_compressed") from None
    except RuntimeError as exc:  # zipfile: an encrypted member
        raise InputError(f"{label}: {one_line(exc)}; calib reads unencrypted .npz files only") from None


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


def _torch_load(torch, path: Path):
    """``torch.load`` (weights only, on the CPU), memory-mapped for files above
    :data:`MMAP_THRESHOLD_BYTES` saved in the zip format (torch's default), so that their tensors
    (float16, float32: handed on as numpy views) are pages of the file, not a copy in anonymous
    memory; the legacy format, which torch cannot map, is read whole."""
    if path.stat().st_size > MMAP_THRESHOLD_BYTES:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
    return torch.load(path, map_location="cpu", weights_only=True)


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
            obj = _torch_load(torch, path)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        text = one_line(exc)
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
    if tensor.dtype == torch.bfloat16 and tensor.dim() == 2:
        # numpy has no bfloat16: (N, K) scores are read as their 16-bit patterns (the file's pages when
        # torch.load mapped it) and widened to float32 exactly a row chunk at a time by whoever reads them
        return _arrays().BFloat16Rows(tensor.view(torch.int16).numpy().view(np.uint16))
    if tensor.dtype == torch.bfloat16:
        # numpy has no bfloat16: widen to float32 exactly, remembering the stored precision
        return with_stored_precision(tensor.float().numpy(), eps=float(torch.finfo(torch.bfloat16).eps))
    if tensor.dtype.is_complex:
        raise InputError(f"{label}: holds complex numbers ({tensor.dtype}); scores must be real")
    try:
        return tensor.numpy()
    except (TypeError, RuntimeError) as exc:  # e.g. float8 dtypes numpy cannot hold
        raise InputError(f"{label}: tensor dtype {tensor.dtype} cannot be read ({one_line(exc)}); save float32") from None




def _columns_format(path: Path) -> InputFormat | None:
    """The format of ``path`` when its columns can be chosen by name (``read_columns``), else None."""
    fmt = INPUT_FORMATS.get(path.suffix.lower())
    return fmt if fmt is not None and fmt.read_columns is not None else None


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
    score columns' order (see :func:`~calibrate_cli.data.columns.class_names_of`). Formats without
    columns give their one array (:func:`load_array`).
    """
    path, key = split_source(source)
    label = os.fspath(source)
    fmt = _columns_format(path)
    if fmt is None:
        if label_col is not None:
            raise InputError(f"{label}: --label-col works with .csv and table files only (.parquet, .arrow, .feather)")
        if score_cols is not None:
            raise InputError(f"{label}: score columns can be chosen in CSV and table files only (.csv, .parquet, .arrow, .feather)")
        return ScoresFile(load_array(source))
    check_readable(path, label)
    return fmt.read_columns(
        path, key, label, score_cols=score_cols, label_col=label_col, header=header, expected_rows=expected_rows
    )


def stream_scores(
    source: str | os.PathLike,
    *,
    label_col: str,
    score_cols: str | None = None,
    header: bool | None = None,
):
    """(number of rows, whether it is certain, blocks) where ``blocks`` yields SCORES' (scores, labels)
    in row order, block by block (:mod:`calibrate_cli.engine.stream`), or None when this file is read whole
    (a format without ``iter_blocks``: any type but CSV and table files, or a CSV file only the full reader
    handles). A table's N is its metadata's; a CSV file's is counted from its lines, a guess that blank or
    odd lines can miss (:class:`~calibrate_cli.engine.stream.RowCountMismatch` then, from an exact-N
    summary pass).

    Iterating ``blocks`` raises :class:`NotStreamed` or an InputError whose row numbers may count
    from a block: on either, read the file with :func:`read_scores` for the whole-file message."""
    path, key = split_source(source)
    label = os.fspath(source)
    fmt = INPUT_FORMATS.get(path.suffix.lower())
    if fmt is None or fmt.iter_blocks is None:
        return None
    check_readable(path, label)
    return fmt.iter_blocks(path, key, label, score_cols=score_cols, label_col=label_col, header=header)


def load_array(source: str | os.PathLike) -> np.ndarray:
    """Load one array from ``source`` (any suffix of :data:`INPUT_FORMATS`, ``:key`` after keyed ones),
    never unpickling."""
    path, key = split_source(source)
    label = os.fspath(source)
    suffix = path.suffix.lower()
    fmt = INPUT_FORMATS.get(suffix)
    check_readable(path, label, directory=fmt is not None and fmt.directory)
    if fmt is None:
        raise InputError(f"{label}: unknown file type {suffix or '(none)'!r}; expected one of {', '.join(INPUT_FORMATS)}")
    try:
        return fmt.load(path, key, label)
    except OSError as exc:  # opening or reading it failed for a reason of the machine's (no loader's message)
        if isinstance(exc, CalibError):
            raise
        raise InputError(f"{label}: cannot read ({os_reason(exc)})") from None
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

    A one-column CSV or table may hold class names, mapped to ``classes`` (the score columns' names,
    see :func:`~calibrate_cli.data.columns.class_names_of`); ``header``/``expected_rows`` as in
    :func:`read_scores`."""
    path, key = split_source(source)
    label = os.fspath(source)
    fmt = INPUT_FORMATS.get(path.suffix.lower())
    if fmt is None or fmt.read_labels is None:
        labels = load_array(source)
        if labels.ndim == 0:  # a single number: len() of it would fail
            raise InputError(f"{label}: expected labels of shape (N,) or one-hot (N, K), got shape ()")
        return labels
    check_readable(path, label)
    return fmt.read_labels(path, key, label, header=header, classes=classes, expected_rows=expected_rows)


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
        raise InputError(f"{text}: cannot read ({os_reason(exc)})") from None
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
                f"(its shards: {names_text([other[n] for n in other], 4)}); shards pair by the numbers in their names"
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
