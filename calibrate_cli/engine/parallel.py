"""Row chunks in a thread pool: numpy releases the GIL in its array loops, so independent chunks of
one pass run on every CPU. Results come back in chunk order, so whatever is summed over chunks is
summed in the same order as a serial loop would: the numbers do not depend on the thread count.
``CALIB_THREADS`` sets the thread count (default: the CPUs, at most 8; at most 64 when set, since
every thread holds a chunk in flight: memory grows with the count).

Each chunk runs in a copy of the caller's context (:mod:`contextvars`), so numpy's ``np.errstate``
(a context variable since numpy 2) holds in the worker threads as in the caller: a fit that silences
the overflow of logits near ±1e308 is not undone by a raw RuntimeWarning from a worker."""

from __future__ import annotations

import contextvars
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

from ..errors import InputError

T = TypeVar("T")


#: at most this many threads by default (memory grows with the chunks in flight)
MAX_DEFAULT_THREADS = 8
#: environment variable that sets the thread count (e.g. 1 on a shared CI runner)
THREADS_ENV = "CALIB_THREADS"
#: the most threads CALIB_THREADS may ask for (each holds a chunk of ~50 MB of temporaries)
MAX_THREADS = 64


def cpu_threads() -> int:
    """Threads for calib's parallel passes: ``$CALIB_THREADS`` when set, else the CPUs this
    process may run on, at most :data:`MAX_DEFAULT_THREADS`."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if value:
        # ASCII digits only: int() would also take "１２", "٣" or "1_000"
        if not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise InputError(f"{THREADS_ENV}={value!r}: expected a whole number ≥ 1 in ASCII digits")
        if len(value) > 6 or int(value) > MAX_THREADS:
            raise InputError(
                f"{THREADS_ENV}={value}: at most {MAX_THREADS} threads (each holds a chunk of data in memory; "
                f"this machine has {_cpus()} CPUs)"
            )
        return int(value)
    return max(1, min(_cpus(), MAX_DEFAULT_THREADS))


#: the fewest rows a chunk of the compiled (C extension) summary pass holds at vocabulary-scale K
#: (:func:`chunk_rows`): each chunk has a fixed cost (a call, its column sums, and when asked its
#: (K, M) classwise cells, which at K = 128256 and 8 rows outweigh the rows themselves)
MIN_CHUNK_ROWS = 32
#: ... as long as the chunk holds at most this many values (a float16 chunk widened to float32: 16 MB
#: per thread; the C loops themselves keep two rows of K, whatever the chunk's size)
MAX_CHUNK_ELEMENTS = 1 << 22
#: the number of classes from which :data:`MIN_CHUNK_ROWS` applies
WIDE_K = 1 << 14


def chunk_rows(k: int, elements: int, *, compiled: bool = False) -> int:
    """Rows per chunk of a pass over (N, K) scores: ``elements`` // K (at least one), raised for the
    compiled pass (``compiled``: its memory per chunk does not grow with the rows as numpy's float64
    temporaries do) at K ≥ :data:`WIDE_K` to :data:`MIN_CHUNK_ROWS`, within :data:`MAX_CHUNK_ELEMENTS`
    values. A function of K (and the path) alone: never of the thread count, so whatever is summed
    over chunks in chunk order has the same bits on any number of threads."""
    k = max(int(k), 1)
    rows = max(1, elements // k)
    if compiled and k >= WIDE_K and rows < MIN_CHUNK_ROWS:
        rows = max(rows, min(MIN_CHUNK_ROWS, MAX_CHUNK_ELEMENTS // k))
    return rows


def _cpus() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cpus = os.cpu_count() or 1
    return max(1, cpus)


def map_chunks(fn: Callable[[slice], T], chunks: Iterable[slice], threads: int | None = None) -> Iterator[T]:
    """``fn(chunk)`` for every chunk, run on ``threads`` threads (default :func:`cpu_threads`), in
    chunk order. At most ``threads + 1`` chunks are in flight, so memory stays bounded: chunk
    i + threads + 1 is submitted only after the caller has taken chunk i's result and asked for the
    next, so ``threads + 1`` buffers used in turn (chunk i's: i mod (threads + 1)) are never written
    while the caller reads them (:func:`~calibrate_cli.engine.summary.summarize`'s ``width_only``)."""
    threads = cpu_threads() if threads is None else threads
    chunks = iter(chunks)
    if threads <= 1:
        yield from map(fn, chunks)
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="calib-chunk") as pool:
        pending: deque = deque()
        for chunk in chunks:
            pending.append(pool.submit(contextvars.copy_context().run, fn, chunk))
            if len(pending) > threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


#: samples from which the independent steps after the summary pass (the sort, the binnings, KS-CE,
#: SmoothECE) run at once (:func:`run_together`): below, a thread pool costs more than it saves
TOGETHER_SAMPLES = 1 << 18


def together(n: int) -> bool:
    """Whether the steps after the summary pass of ``n`` samples run at once (:func:`run_together`):
    from :data:`TOGETHER_SAMPLES` samples, on more than one thread."""
    return n >= TOGETHER_SAMPLES and cpu_threads() > 1


def run_together(*tasks: Callable[[], T], threads: int | None = None) -> list[T]:
    """``[task() for task in tasks]``, the tasks run at once on up to ``threads`` threads (default
    :func:`cpu_threads`; the first on the calling thread): for independent work whose array loops
    release the GIL (the steps after the summary pass). Each task computes what it would alone, so
    the results do not depend on the thread count; an exception is raised once every task ended."""
    threads = cpu_threads() if threads is None else threads
    if threads <= 1 or len(tasks) <= 1:
        return [task() for task in tasks]
    with ThreadPoolExecutor(max_workers=min(threads, len(tasks)) - 1 or 1, thread_name_prefix="calib-task") as pool:
        others = [pool.submit(contextvars.copy_context().run, task) for task in tasks[1:]]
        try:
            first = tasks[0]()
        finally:
            done = [future.exception() for future in others]  # waits for each
        failed = next((error for error in done if error is not None), None)
        if failed is not None:
            raise failed
        return [first, *(future.result() for future in others)]
