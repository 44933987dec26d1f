"""Give back the memory pages of a memory-mapped input once a pass has read them.

A large ``.npy`` is memory-mapped (io.py): its pages enter the process's resident memory as they
are read and stay there, so a pass over a 400 MB file ends with 400 MB resident (and a file larger
than RAM leans on the kernel's reclaim). :func:`release_rows` tells the kernel, with
``madvise(MADV_DONTNEED)``, that the pages under rows already computed are no longer needed: they
leave the process (they stay in the page cache, a later read maps them again, from memory), and the
peak resident memory of a pass is its own arrays plus the chunks in flight. The mapping is
read-only and file-backed, so dropping pages never loses data; a page shared with a neighbouring
chunk that another thread still reads is simply mapped again. Nothing happens for arrays in memory,
or where ``madvise`` is not available.

:func:`read_rows` reads the rows of a memory-mapped ``.npy`` without mapping them at all: ``pread``
copies them from the page cache into a buffer that each thread reuses, which costs a fraction of
the page faults of a first read through the mapping (each 4 KiB page mapped into the process and
taken out again).
"""

from __future__ import annotations

import mmap
import os
import threading

import numpy as np

__all__ = ["release_rows", "mapped_file", "read_rows"]

_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


def mapped_file(array) -> tuple[mmap.mmap, int] | None:
    """(the mmap under ``array``, the byte offset of ``array[0]`` in it), or None when ``array`` is
    not a C-contiguous view of a memory-mapped file."""
    if _DONTNEED is None or not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
        return None
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    if not isinstance(base, mmap.mmap) or base.closed:
        return None
    try:
        start = np.frombuffer(base, dtype=np.uint8, count=1).ctypes.data
    except (ValueError, TypeError, BufferError):
        return None
    offset = array.ctypes.data - start
    if offset < 0 or offset + array.nbytes > len(base):
        return None
    return base, offset


def release_rows(array, rows: slice) -> None:
    """Drop from memory the whole pages under ``array[rows]`` (no-op unless memory-mapped)."""
    found = mapped_file(array)
    if found is None:
        return
    mm, offset = found
    row_bytes = array.nbytes // max(array.shape[0], 1)
    first = offset + rows.start * row_bytes
    last = offset + rows.stop * row_bytes
    page = mmap.PAGESIZE
    begin = -(-first // page) * page  # whole pages inside the rows only
    end = last // page * page
    if rows.stop >= array.shape[0]:  # the last rows: the tail page too
        end = -(-last // page) * page
        end = min(end, -(-len(mm) // page) * page)
    if rows.start == 0:
        begin = first // page * page
    if end > begin:
        try:
            mm.madvise(_DONTNEED, begin, min(end, len(mm)) - begin)
        except (OSError, ValueError):  # pragma: no cover - refused by the kernel: keep the pages
            pass


_thread_buffers = threading.local()


def read_rows(array, rows: slice) -> np.ndarray:
    """``array[rows]`` (a slice of rows with step 1). For a C-contiguous memory-mapped file
    (``np.load(..., mmap_mode="r")``, a ``np.memmap`` that knows its file) the rows are read with
    ``os.preadv`` into this thread's reusable buffer: the result is valid until this thread's next
    call, so the caller must not keep it (or any view of it). Otherwise the slice itself."""
    region = _file_region(array)
    start, stop, _ = rows.indices(array.shape[0])
    if region is None or stop <= start or not hasattr(os, "preadv"):
        return array[rows]
    path, first_byte = region
    row_bytes = array.strides[0]
    size = (stop - start) * row_bytes
    buffer = getattr(_thread_buffers, "buffer", None)
    if buffer is None or buffer.nbytes < size:
        buffer = _thread_buffers.buffer = np.empty(size, dtype=np.uint8)
    view = memoryview(buffer)[:size]
    fd = os.open(path, os.O_RDONLY)
    try:
        done = 0
        while done < size:
            got = os.preadv(fd, [view[done:]], first_byte + start * row_bytes + done)
            if got <= 0:  # the file shrank under the map: read through the mapping (which then fails)
                return array[rows]
            done += got
    finally:
        os.close(fd)
    return buffer[:size].view(array.dtype).reshape((stop - start, *array.shape[1:]))


def _file_region(array) -> tuple[str | bytes, int] | None:
    """(the file, the byte offset of ``array[0]`` in it) of a C-contiguous ``np.memmap`` with at least
    one row, else None."""
    if not isinstance(array, np.memmap) or not isinstance(getattr(array, "filename", None), (str, os.PathLike)):
        return None
    if array.ndim == 0 or array.shape[0] == 0 or not array.flags.c_contiguous or array.dtype.hasobject:
        return None
    found = mapped_file(array)
    if found is None:
        return None
    _, in_map = found
    map_start = array.offset - array.offset % mmap.ALLOCATIONGRANULARITY  # where np.memmap's mmap begins
    return os.fspath(array.filename), map_start + in_map
