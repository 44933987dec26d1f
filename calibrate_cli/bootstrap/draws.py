"""The resamples: one random stream per resample, drawn and counted in a thread pool, measured in batches."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from ..errors import InputError
from ..metrics.functional import METRIC_NAMES
from ..engine.parallel import cpu_threads
from .intervals import check_settings
from .selection import custom_value

DEFAULT_SEED = 0
#: default batch: about this many multiplicities (batch_size × N) at a time
BATCH_ENTRIES = 1 << 23

Progress = Callable[[int, int], None]


def _batch_size(n: int, n_resamples: int, batch_size) -> int:
    if batch_size is None:
        return max(1, min(n_resamples, BATCH_ENTRIES // max(n, 1)))
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise InputError(f"Expected `batch_size` to be an integer larger than 0, but got {batch_size!r}")
    return int(batch_size)


def _check_indices(indices, n: int) -> np.ndarray:
    indices = np.asarray(indices)
    if indices.ndim != 2 or indices.shape[1] != n or not np.issubdtype(indices.dtype, np.integer):
        raise InputError(f"Expected `indices` to be an integer array of shape (B, {n}), but got {indices.shape}")
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        raise InputError(f"`indices` must lie in [0, {n})")
    return indices


def resample_streams(seed, n_resamples: int) -> list[np.random.SeedSequence]:
    """One independent seed sequence per resample: ``SeedSequence(seed).spawn(n_resamples)``.

    Resample r draws ``np.random.default_rng(streams[r]).integers(0, N, N)``, so each resample is
    fixed by (seed, r) alone: results depend neither on the batch size nor on how many threads draw.
    ``seed``: an int, None (fresh entropy) or a :class:`numpy.random.SeedSequence`.
    """
    if isinstance(seed, np.random.SeedSequence):
        root = seed
    elif seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0):
        root = np.random.SeedSequence(None if seed is None else int(seed))
    else:
        raise InputError(f"Expected `seed` to be a non-negative integer, None or a SeedSequence, but got {seed!r}")
    return root.spawn(n_resamples)


def run_resamples(
    engines, n, n_resamples, seed, indices, progress, batch_size, custom=None, data=None
) -> list[dict[str, np.ndarray]]:
    """Bootstrap values of every engine on the same resamples (the same drawn samples for all).

    Drawing and counting a resample (``integers`` + ``bincount``) costs about as
    much as its metrics, so the draws of the next batch run in a thread pool while the metrics of
    the current batch are computed (double buffering; numpy releases the GIL in both). ``custom``
    ({name: fn}, one engine only): functions called in this thread on ``data`` = (scores, labels)
    indexed by each resample's sample indices.
    """
    custom = custom or {}
    if indices is not None:
        indices = _check_indices(indices, n)
        n_resamples = indices.shape[0]
    check_settings(n_resamples, 0.5, "basic")
    streams = resample_streams(seed, n_resamples) if indices is None else None
    size = _batch_size(n, n_resamples, batch_size)
    results = [{name: np.empty(n_resamples) for name in METRIC_NAMES} for _ in engines]
    results[0].update({name: np.empty(n_resamples) for name in custom})
    alone = indices is None and len(engines) == 1
    # two sets of reused buffers (multiplicities, side sums): one being filled while the other is measured
    buffers = [[(np.empty((size, e.n_padded)), np.empty((size, e.n_side))) for e in engines] for _ in range(2)]
    drawn_samples = [np.empty((size, n), dtype=np.int64) for _ in range(2)] if custom else None

    def draw(r: int, slot: int, row: int) -> None:
        drawn = indices[r] if indices is not None else np.random.default_rng(streams[r]).integers(0, n, n)
        for engine, (w, side) in zip(engines, buffers[slot]):
            # one model alone: the draws are positions in its confidence order; else sample indices
            engine.count(drawn if alone else engine.rank[drawn], w[row], side[row])
        if custom:
            drawn_samples[slot][row] = engines[0].order[drawn] if alone else drawn

    def submit(pool, start: int, slot: int) -> list:
        stop = min(n_resamples, start + size)
        return [pool.submit(draw, r, slot, r - start) for r in range(start, stop)]

    if progress is not None:
        progress(0, n_resamples)
    starts = list(range(0, n_resamples, size))
    with ThreadPoolExecutor(max_workers=cpu_threads(), thread_name_prefix="calib-draw") as pool:
        pending = submit(pool, 0, 0)
        for i, start in enumerate(starts):
            stop = min(n_resamples, start + size)
            for future in pending:
                future.result()  # re-raises a failed draw
            pending = submit(pool, starts[i + 1], (i + 1) % 2) if i + 1 < len(starts) else []
            for engine, (w, side), res in zip(engines, buffers[i % 2], results):
                batch = engine.metrics(w[: stop - start], side[: stop - start])
                for name in METRIC_NAMES:
                    res[name][start:stop] = batch[name]
            for row in range(stop - start):
                sample = drawn_samples[i % 2][row] if custom else None
                for name, fn in custom.items():
                    results[0][name][start + row] = custom_value(name, fn, data[0][sample], data[1][sample])
            if progress is not None:
                progress(stop, n_resamples)
    return results


