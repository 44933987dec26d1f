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
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["release_rows", "mapped_file", "watch_mapped"]

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


# ------------------------------------------------------------------ a mapped file truncated mid-read
try:
    from . import _sigbus  # the C extension (setup.py; optional: without a compiler, no watch)
except ImportError:  # pragma: no cover - not built
    _sigbus = None


def watch_mapped(array, label: str) -> bool:
    """Exit with code 2 and one line naming ``label`` on stderr if ``array``'s file is truncated by
    another process while it is mapped (a read beyond the new end raises SIGBUS, which killed calib
    with 135 and no message). The C handler (``calibrate_cli/data/_sigbus.c``) knows the mapping's address
    range and its line, formatted here; a SIGBUS elsewhere goes to the handler before it. The range is
    forgotten when the mapping is. Returns whether the mapping is watched (False: not memory-mapped,
    or the extension is not built: the process then still ends with 135)."""
    if _sigbus is None or not hasattr(_sigbus, "watch") or not isinstance(array, np.ndarray):
        return False
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    if not isinstance(base, mmap.mmap) or base.closed or len(base) == 0:
        return False
    import sys
    import weakref

    try:
        start = np.frombuffer(base, dtype=np.uint8, count=1).ctypes.data
    except (ValueError, TypeError, BufferError):
        return False
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    line = (
        f"Error: {label}: the file got shorter while calib read it (another process truncated or rewrote it); "
        "run calib again once the file is complete\n"
    ).encode(encoding, "replace")
    if not _sigbus.watch(start, len(base), line):
        return False
    weakref.finalize(base, _sigbus.unwatch, start)
    return True
