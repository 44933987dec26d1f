"""safetensors, HDF5 and Zarr: one numeric array per source, addressed by key, read block by block.

- ``file.safetensors:key`` (safetensors, extra ``[safetensors]``; numpy API, no torch needed).
  A 2-D float tensor is a read-only memory map of the file; a 2-D BF16 one a row reader widened to
  float32 exactly a chunk at a time (:class:`BFloat16Rows`; numpy has no bfloat16).
- ``file.h5:/group/dataset`` (h5py, extra ``[hdf5]``; ``.h5``, ``.hdf5``).
- ``store.zarr:array`` or ``store.zarr:group/array`` (zarr, extra ``[zarr]``; a directory store).

The key may be left out when the file holds one array. Only numbers are read (float, integer, bool):
object, string, compound and reference dtypes are refused before any data is decoded (a Zarr array
with a pickle codec never reaches its codec), and so is complex data. Data is copied into the result
in blocks of rows (:data:`~calibrate_cli.data.formats.BLOCK_BYTES`), so the library never materialises a
second full copy (2-D float safetensors are not copied at all).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError
from .formats import names_text, one_line, pick_key, require, rows_per_block

__all__ = ["load_safetensors", "load_hdf5", "load_zarr", "check_numeric_dtype", "BFloat16Rows", "widen_bf16"]


def check_numeric_dtype(dtype: np.dtype, label: str, what: str) -> None:
    """Refuse anything but real numbers (and bool) in ``what`` (e.g. "array 'logits'")."""
    dtype = np.dtype(dtype)
    if dtype.kind in "fiub":
        return
    if dtype.kind == "O" or dtype.hasobject:
        raise InputError(f"{label}: {what} holds Python objects, which calib never loads (it reads numbers only)")
    if dtype.kind == "c":
        raise InputError(f"{label}: {what} holds complex numbers ({dtype}); scores must be real")
    if dtype.kind in "SUT":
        raise InputError(f"{label}: {what} holds text ({dtype}), not numbers")
    if dtype.kind == "V":
        raise InputError(f"{label}: {what} holds records or raw bytes ({dtype}), not numbers")
    raise InputError(f"{label}: {what} has dtype {dtype}, not numbers")


def copy_rows(read: Callable[[int, int], np.ndarray], shape: tuple, dtype: np.dtype, label: str) -> np.ndarray:
    """The array of ``shape``/``dtype`` filled by ``read(start, stop)`` (rows) block by block."""
    shape = tuple(int(s) for s in shape)
    out = np.empty(shape, dtype=dtype)
    if not shape:
        out[()] = read(0, 1)
        return out
    n = shape[0]
    step = rows_per_block(math.prod(shape[1:]) * out.dtype.itemsize)
    for start in range(0, n, step):
        stop = min(n, start + step)
        block = np.asarray(read(start, stop))
        if block.shape != (stop - start,) + shape[1:]:
            raise InputError(f"{label}: rows {start}..{stop - 1} read with shape {block.shape}: corrupt file")
        out[start:stop] = block
    return out


# ------------------------------------------------------------------------------------ safetensors
_ST_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
    "BOOL": np.bool_,
}


def _safetensors_header(path: Path, label: str) -> tuple[dict, int]:
    """The JSON header of a safetensors file and where its data starts (checked by the library too)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise InputError(f"{label}: not a safetensors file (shorter than its 8-byte header length)")
        (size,) = struct.unpack("<Q", head)
        if size > os.path.getsize(path) - 8 or size > 100 << 20:
            raise InputError(f"{label}: not a safetensors file (header length {size} beyond the file): truncated or corrupt")
        try:
            header = json.loads(f.read(size).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{label}: not a safetensors file (bad header: {one_line(exc)})") from None
    if not isinstance(header, dict):
        raise InputError(f"{label}: not a safetensors file (the header is not a JSON object)")
    return header, 8 + size


def load_safetensors(path: Path, key: str | None, label: str) -> np.ndarray:
    """One tensor of a ``.safetensors`` file (numpy API; a 2-D float tensor memory-mapped, BF16 widened
    to float32 exactly)."""
    safetensors = require("safetensors", label, ".safetensors files", "safetensors")
    header, data_start = _safetensors_header(path, label)
    keys = [k for k in header if k != "__metadata__"]
    name = pick_key(keys, key, label, path, "tensors")
    entry = header[name]
    if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str):
        raise InputError(f"{label}: tensor {name!r}: bad header entry")
    code = entry["dtype"]
    shape = tuple(entry.get("shape") or ())
    if code == "BF16":
        return _bf16(path, entry, data_start, shape, label, name)
    if code not in _ST_DTYPES:
        raise InputError(f"{label}: tensor {name!r} has dtype {code}, which calib does not read; save float32")
    dtype = np.dtype(_ST_DTYPES[code]).newbyteorder("<")
    try:
        with safetensors.safe_open(os.fspath(path), framework="numpy") as f:
            view = f.get_slice(name)  # the library checks the header and offsets first
            if len(shape) == 2 and dtype.kind == "f" and math.prod(shape) and _aligned(entry, data_start, dtype):
                return _mapped(path, entry, data_start, shape, label, name, dtype)  # (N, K) scores: the file's pages
            return copy_rows(lambda a, b: view[a:b] if shape else f.get_tensor(name), shape, np.dtype(_ST_DTYPES[code]), label)
    except InputError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # SafetensorError: truncated, overlapping or inconsistent offsets, ...
        raise InputError(f"{label}: not a valid safetensors file ({one_line(exc)})") from None


#: machine epsilon of bfloat16 (8 significant bits): 2⁻⁷
BF16_EPS = 2.0 ** -7


def widen_bf16(bits) -> np.ndarray:
    """bfloat16 values given as their 16-bit patterns (uint16), as float32: each pattern is the high
    half of the float32 of the same value, so the widening is exact (NaN and ±inf included)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


class BFloat16Rows(np.lib.mixins.NDArrayOperatorsMixin):
    """A 2-D array of bfloat16 values (``raw``: their uint16 patterns, e.g. a memory map of the file)
    read as float32, exactly (:func:`widen_bf16`), only as far as it is indexed: ``rows[a:b]`` is the
    float32 array of those rows, and no widened copy of the whole array is made unless one is asked
    for (``np.asarray(rows)``, arithmetic, ``astype``: the float32 array the file holds, as a whole).
    numpy has no bfloat16 dtype; ``dtype`` is the float32 the values are read as, and ``stored_eps``
    bfloat16's machine epsilon, so the probability-sum tolerance follows the stored precision."""

    dtype = np.dtype(np.float32)
    stored_eps = BF16_EPS

    def __init__(self, raw: np.ndarray) -> None:
        if raw.dtype.itemsize != 2 or raw.dtype.kind not in "iu":
            raise ValueError("BFloat16Rows reads 16-bit patterns (uint16)")
        self.raw = raw

    @property
    def shape(self) -> tuple:
        return self.raw.shape

    @property
    def ndim(self) -> int:
        return self.raw.ndim

    @property
    def size(self) -> int:
        return self.raw.size

    @property
    def nbytes(self) -> int:
        """The bytes of the float32 array the values are read as (twice the file's)."""
        return self.raw.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.raw.shape[0]

    def __repr__(self) -> str:
        return f"BFloat16Rows(shape={self.shape})"

    def __getitem__(self, key) -> np.ndarray:
        """``widen_bf16(raw[key])``: any numpy index (row slices, mostly)."""
        out = widen_bf16(self.raw[key])
        return out[()] if out.ndim == 0 else out

    def read_into(self, rows: slice, out: np.ndarray) -> np.ndarray:
        """Rows ``rows`` widened into ``out`` (float32, their shape; no temporary), then their
        pages of a memory-mapped file given back (:func:`~calibrate_cli.data.pages.release_rows`:
        read again, they are mapped again). Returns ``out``."""
        from .pages import release_rows

        np.left_shift(self.raw[rows], 16, out=out.view(np.uint32), dtype=np.uint32)
        release_rows(self.raw, rows)
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if copy is False:
            raise ValueError("bfloat16 values cannot be read as float32 without a copy")
        out = np.empty(self.shape, dtype=np.float32)
        step = max(1, rows_per_block(4 * max(math.prod(self.shape[1:]), 1)))
        for start in range(0, self.shape[0], step):
            rows = slice(start, min(self.shape[0], start + step))
            self.read_into(rows, out[rows])
        return out if dtype is None else out.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(np.asarray(x) if isinstance(x, BFloat16Rows) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def astype(self, dtype, copy: bool = True) -> np.ndarray:
        return np.asarray(self).astype(dtype, copy=False)


def _aligned(entry: dict, data_start: int, dtype: np.dtype) -> bool:
    """Whether the tensor's data start at a multiple of its item size in the file (else it is copied:
    the compiled passes read aligned values)."""
    try:
        return (data_start + int(entry["data_offsets"][0])) % dtype.itemsize == 0
    except (KeyError, TypeError, ValueError, IndexError):
        return False


def _mapped(path: Path, entry: dict, data_start: int, shape: tuple, label: str, name: str, dtype) -> np.ndarray:
    """The tensor's data as a read-only memory map of ``dtype`` and ``shape`` (read a row chunk at a
    time by whoever reads it: no copy in memory), its offsets checked against the file."""
    dtype = np.dtype(dtype)
    try:
        begin, end = (int(v) for v in entry["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{label}: tensor {name!r}: bad data offsets in the header") from None
    count = math.prod(shape)
    if end - begin != dtype.itemsize * count or begin < 0 or data_start + end > os.path.getsize(path):
        raise InputError(f"{label}: tensor {name!r}: its data does not fit the file: truncated or corrupt")
    if not count:
        return np.empty(shape, dtype)
    raw = np.memmap(path, dtype=dtype, mode="r", offset=data_start + begin, shape=(count,))
    from .pages import watch_mapped

    watch_mapped(raw, label)  # truncated while read: one line and exit 2, not SIGBUS
    return raw.reshape(shape)


def _bf16(path: Path, entry: dict, data_start: int, shape: tuple, label: str, name: str) -> np.ndarray:
    from .predictions import with_stored_precision

    raw = _mapped(path, entry, data_start, shape, label, name, "<u2").reshape(-1)
    count = raw.shape[0]
    if len(shape) == 2:  # (N, K) scores: widened a row chunk at a time by whoever reads them
        return BFloat16Rows(raw.reshape(shape))
    out = np.empty(count, dtype=np.float32)
    step = rows_per_block(4) if count else 1
    for start in range(0, count, step):  # bfloat16 is the high half of a float32: exact
        out[start:start + step] = (raw[start:start + step].astype(np.uint32) << 16).view(np.float32)
    return with_stored_precision(out.reshape(shape), eps=2.0 ** -7)


# ----------------------------------------------------------------------------------------- HDF5
def _check_link(f, key: str, label: str, h5py) -> None:
    """Refuse a key that is an external link (to another file: calib reads the file it is given) or a
    soft link to nothing, naming where it points; a soft link to a dataset of the file is followed."""
    try:
        link = f.get(key, getlink=True)
    except (KeyError, ValueError, OSError):  # a path through a missing group: "no array named" below
        return
    if isinstance(link, h5py.ExternalLink):
        raise InputError(
            f"{label}: {key!r} is an external link to {link.filename}:{link.path}; calib reads datasets of the "
            f"file it is given: give {link.filename}:{link.path}"
        )
    if isinstance(link, h5py.SoftLink):
        try:
            f[key]
        except KeyError:  # "in" says True for a dangling link: only opening it tells
            raise InputError(f"{label}: {key!r} is a soft link to {link.path}, which does not exist in the file") from None


def load_hdf5(path: Path, key: str | None, label: str) -> np.ndarray:
    """One dataset of an HDF5 file (``file.h5:/group/dataset``), read in blocks of rows."""
    h5py = require("h5py", label, "HDF5 files", "hdf5")
    try:
        f = h5py.File(path, "r")
    except Exception as exc:
        raise InputError(f"{label}: not a readable HDF5 file ({one_line(exc)})") from None
    try:
        with f:
            datasets: list[str] = []
            f.visititems(lambda name, obj: datasets.append("/" + name) if isinstance(obj, h5py.Dataset) else None)
            if key is not None and key and not key.startswith("/"):
                key = "/" + key
            if key and key not in datasets:  # visititems skips links: a soft link is followed inside the file
                _check_link(f, key, label, h5py)
                if key in f and isinstance(f.get(key), h5py.Dataset):
                    datasets.append(key)
            if key is not None and key in f and not isinstance(f[key], h5py.Dataset):
                raise InputError(f"{label}: {key!r} is a group, not a dataset (datasets: {names_text(datasets)})")
            name = pick_key(datasets, key, label, path, "datasets")
            ds = f[name]
            what = f"dataset {name!r}"
            if h5py.check_string_dtype(ds.dtype) is not None:
                raise InputError(f"{label}: {what} holds text, not numbers")
            if h5py.check_vlen_dtype(ds.dtype) is not None:
                raise InputError(f"{label}: {what} holds variable-length (ragged) rows, not a rectangular array of numbers")
            check_numeric_dtype(ds.dtype, label, what)
            if ds.shape is None:
                raise InputError(f"{label}: {what} is empty (no dataspace)")
            shape = ds.shape
            return copy_rows(lambda a, b: ds[a:b] if shape else ds[()], shape, ds.dtype, label)
    except InputError:
        raise
    except MemoryError:
        raise
    except Exception as exc:  # OSError from a truncated file or a corrupt chunk, ...
        raise InputError(f"{label}: truncated or corrupt HDF5 file ({one_line(exc)})") from None


# ----------------------------------------------------------------------------------------- Zarr
def _codec_names(meta) -> list[str]:
    """Every codec id/name in an array's metadata (v2 compressor/filters, v3 codecs), nested."""
    found: list[str] = []

    def walk(obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k in ("id", "name") and isinstance(v, str):
                    found.append(v.lower())
                walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)

    walk(meta)
    return found


def _zarr_arrays(group, prefix: str = "") -> list[str]:
    names = []
    for name, node in group.members():
        full = f"{prefix}{name}"
        if hasattr(node, "members"):
            names += _zarr_arrays(node, full + "/")
        else:
            names.append(full)
    return sorted(names)


def _stored_files(folder: Path) -> set[str]:
    """The files under ``folder``, as '/'-separated paths relative to it."""
    found = set()
    for root, _, files in os.walk(folder):
        rel = os.path.relpath(root, folder)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        found.update(prefix + name for name in files)
    return found


def check_zarr_chunks(path: Path, array, label: str, what: str) -> None:
    """Refuse an array of a directory store with a chunk file missing: zarr reads a missing chunk as
    the fill value (zeros, for most arrays), a silent wrong number. Every key of the array's chunk
    grid (the shards, for a sharded array) must be a file, named by the array's chunk key encoding
    (``c/0/1`` by default in zarr v3, ``0.1`` in v2, ...)."""
    meta = array.metadata
    grid = getattr(getattr(meta, "chunk_grid", None), "chunk_shape", None)
    if grid is None:  # pragma: no cover - an irregular grid: nothing to enumerate
        return
    shape = tuple(int(s) for s in array.shape)
    counts = [-(-s // max(int(c), 1)) for s, c in zip(shape, grid)]
    folder = Path(path) / array.path if array.path else Path(path)
    present = _stored_files(folder)
    missing = []
    for coords in itertools.product(*(range(n) for n in counts)):
        key = meta.encode_chunk_key(coords)
        if key not in present:
            missing.append((coords, key))
    if not missing:
        return
    coords, key = missing[0]
    rows = ""
    if coords:
        first = coords[0] * int(grid[0])
        rows = f" (rows {first}..{min(shape[0], first + int(grid[0])) - 1})"
    more = f", and {len(missing) - 1} more of its {math.prod(counts)} chunks" if len(missing) > 1 else ""
    fill = array.fill_value.item() if hasattr(array.fill_value, "item") else array.fill_value
    raise InputError(
        f"{label}: {what}: chunk {key!r}{rows} is missing ({folder / key}{more}); zarr would read it as the "
        f"fill value {fill!r}: copy the store whole, or save it with write_empty_chunks=True "
        "(zarr leaves out chunks that equal the fill value)"
    )


def load_zarr(path: Path, key: str | None, label: str) -> np.ndarray:
    """One array of a Zarr directory store (``store.zarr:array``), read in blocks of rows."""
    zarr = require("zarr", label, "Zarr stores", "zarr")
    try:
        node = zarr.open(store=os.fspath(path), mode="r")
    except Exception as exc:
        raise InputError(f"{label}: not a readable Zarr store ({one_line(exc)})") from None
    try:
        if hasattr(node, "members"):  # a group
            names = _zarr_arrays(node)
            name = pick_key(names, key.strip("/") if key else key, label, path)
            array = node[name]
        else:
            if key is not None:
                raise InputError(f"{label}: holds a single array, not a group; drop ':{key}'")
            array, name = node, ""
        what = f"array {name!r}" if name else "the array"
        try:
            meta = array.metadata.to_dict()
        except Exception:  # pragma: no cover - older zarr
            meta = {}
        if any("pickle" in codec for codec in _codec_names(meta)):
            raise InputError(f"{label}: {what} uses a pickle codec, which calib never runs (it would unpickle)")
        check_numeric_dtype(array.dtype, label, what)
        shape = tuple(array.shape)
        check_zarr_chunks(path, array, label, what)
        return copy_rows(lambda a, b: array[a:b] if shape else array[()], shape, np.dtype(array.dtype), label)
    except InputError:
        raise
    except MemoryError:
        raise
    except Exception as exc:
        _settle_zarr_reads()
        raise InputError(f"{label}: truncated or corrupt Zarr store ({one_line(exc)})") from None


#: seconds to wait for zarr's pending chunk reads to end once cancelled (:func:`_settle_zarr_reads`)
ZARR_SETTLE_S = 5


def _settle_zarr_reads(timeout: float = ZARR_SETTLE_S) -> None:
    """After a chunk failed a read: cancel the tasks still pending on zarr's event loop (the reads of
    the other chunks; zarr's gather does not stop them) and wait until they have ended. A process that
    exits first destroys them pending, and asyncio printed "Task was destroyed but it is pending!"
    and "Event loop is closed" tracebacks, thousands of lines for a large store, after calib's
    one-line error. calib reads its inputs one at a time, so these are the failed read's own chunks;
    a program reading other Zarr arrays in other threads at that moment would see those reads
    cancelled too."""
    import asyncio

    try:
        from zarr.core import sync
    except ImportError:  # pragma: no cover - another zarr
        return
    loop = (getattr(sync, "loop", None) or [None])[0]
    if loop is None or loop.is_closed() or not loop.is_running():
        return

    async def settle():
        while True:
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
            if not others:
                return
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

    try:
        asyncio.run_coroutine_threadsafe(settle(), loop).result(timeout)
    except Exception:  # noqa: BLE001 - still running after the timeout: the error is said all the same
        pass
