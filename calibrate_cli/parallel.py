"""Row chunks in a thread pool: numpy releases the GIL in its array loops, so independent chunks of
one pass run on every CPU. Results come back in chunk order, so whatever is summed over chunks is
summed in the same order as a serial loop would: the numbers do not depend on the thread count."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


def cpu_threads() -> int:
    """The CPUs this process may run on (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def map_chunks(fn: Callable[[slice], T], chunks: Iterable[slice], threads: int | None = None) -> Iterator[T]:
    """``fn(chunk)`` for every chunk, run on ``threads`` threads (default: every CPU), in chunk order.

    At most ``2 × threads`` chunks are in flight, so memory stays bounded by a few chunks.
    """
    threads = cpu_threads() if threads is None else threads
    chunks = iter(chunks)
    if threads <= 1:
        yield from map(fn, chunks)
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="calib-chunk") as pool:
        pending = []
        for chunk in chunks:
            pending.append(pool.submit(fn, chunk))
            if len(pending) >= 2 * threads:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()
