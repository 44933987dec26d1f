"""Evaluate predictions stored as shards (files written by a distributed inference job) by merging
each shard's one-pass summary: the result is that of the concatenated arrays (docs/conventions.md,
"Shards").

Merge rule (:func:`merge_summaries`), for shards s = 1..S in order, N = Σ_s N_s:

- per-sample arrays (labels, confidences, correctness, NLL, Brier, top-5 hits) concatenate in shard
  order, so they hold the very values a single pass over the concatenation computes; every total
  (Σ NLL, Σ Brier, …) is then ``np.sum`` over the same array, and the equal-width and equal-mass
  bins are computed from the merged confidences (sorted once): equal-mass edges stay exact;
- the classwise statistics (per class and bin: count, Σ p_ik, Σ [y_i = k]) add. Counts and Σ [y = k]
  are whole numbers, exact in float64 below 2⁵³; Σ p_ik is the same sum as a single pass up to its
  order (a single pass adds its row chunks in order, here each shard's total is added), so it differs
  by float64 rounding only: |Δ| ≤ (n_kb − 1) · 2⁻⁵³ · Σ p (a few ulps in practice).

The core takes arrays or a loader callback (``load(shard) -> (scores, labels)``);
:mod:`calibrate_cli.data.io` reads the files. With a ``distributed.Client``, each shard's summary is a Dask
task (loading its own shard where it runs) and the summaries merge here, on the client.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import warnings
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..errors import InputError
from ..evaluate import EvalReport, SummarizedData, report_from_summary, summarize_data
from ..metrics.functional import DEFAULT_N_BINS
from ..data.predictions import InputKind, Predictions
from .summary import PredictionSummary, check_compat, merge_classwise

__all__ = ["ShardedData", "merge_summaries", "summarize_shard", "summarize_shards", "evaluate_shards", "report_from_shards", "dask_client"]

#: ``load(shard) -> (scores, labels)`` or ``(scores, labels, scores_name, labels_name)``
Loader = Callable[[Any], tuple]


@dataclass(frozen=True)
class ShardedData:
    """The merged summary of S shards; ``predictions`` (the concatenated validated arrays) only
    when they were kept (the bootstrap resamples them)."""

    summary: PredictionSummary
    n_shards: int
    predictions: Predictions | None = None
    input_kind: str = "logits"


def merge_summaries(summaries: Sequence[PredictionSummary], *, names: Sequence[str] | None = None) -> PredictionSummary:
    """The summary of the concatenation of the shards whose summaries are ``summaries`` (in order).

    Per-sample arrays concatenate; classwise statistics add (module docstring); N = Σ_s N_s. The
    shards must agree on K, the compat mode and the bins (``names`` name them in errors)."""
    if not summaries:
        raise InputError("no shards to merge")
    names = list(names) if names is not None else [f"shard {i + 1}" for i in range(len(summaries))]
    first = summaries[0]
    for name, s in zip(names, summaries):
        if s.k != first.k:
            raise InputError(f"{name}: K = {s.k} classes, but {names[0]} has K = {first.k}")
        if s.compat != first.compat:
            raise InputError(f"{name}: compat mode {s.compat!r}, but {names[0]} was summarised with {first.compat!r}")
        if (s.classwise is None) != (first.classwise is None):
            raise InputError(f"{name}: classwise statistics present in some shards only")
        if s.classwise is not None and not np.array_equal(s.classwise.edges, first.classwise.edges):
            raise InputError(f"{name}: binned with other edges ({s.classwise.n_bins} bins) than {names[0]}")
    if len(summaries) == 1:
        return first
    n = sum(s.n for s in summaries)
    # every per-sample array field (those that are arrays in the first shard; None stays None)
    per_sample = {
        f.name: np.concatenate([getattr(s, f.name) for s in summaries])
        for f in fields(PredictionSummary)
        if isinstance(getattr(first, f.name), np.ndarray)
    }
    classwise = None if first.classwise is None else merge_classwise([s.classwise for s in summaries], n, first.k)
    # what was made from the first shard's columns alone (bins, in-order sums, sort keys) is not the union's
    return replace(first, n=n, classwise=classwise, width=None, in_order=None, sort_keys=None, **per_sample)


def _file_of(shard) -> str:
    """`` (x_2.npy)``: the scores file of a shard given as (scores file, labels file), for messages
    that compare two shards; "" for a shard of arrays."""
    first = shard[0] if isinstance(shard, (tuple, list)) and shard else None
    return f" ({os.fspath(first)})" if isinstance(first, (str, os.PathLike)) else ""


def _loaded(shard, load: Loader | None) -> tuple:
    """(scores, labels, scores_name, labels_name) of one shard."""
    got = tuple(load(shard) if load is not None else shard)
    if len(got) == 2:
        return got[0], got[1], "scores", "labels"
    if len(got) == 4:
        return got
    raise InputError(f"a shard is (scores, labels) or (scores, labels, scores_name, labels_name), got {len(got)} items")


def summarize_shard(
    shard,
    load: Loader | None = None,
    *,
    input_kind: InputKind = "logits",
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    where: str = "",
    keep_predictions: bool = False,
    device: str | None = None,
) -> tuple[PredictionSummary, Predictions | None]:
    """Load (``load(shard)``, or ``shard`` itself as a pair of arrays), validate and summarise one
    shard: what each Dask task runs. ``where`` ("shard 3 of 8: ") prefixes its errors."""
    try:
        scores, labels, scores_name, labels_name = _loaded(shard, load)
        data: SummarizedData = summarize_data(
            scores, labels, input_kind=input_kind, n_bins=n_bins, compat=compat, scores_name=scores_name,
            labels_name=labels_name, device=device,
        )
    except InputError as exc:
        raise InputError(f"{where}{exc}") from None
    return data.summary, (data.predictions if keep_predictions else None)


def summarize_shards(
    shards: Iterable,
    *,
    load: Loader | None = None,
    input_kind: InputKind = "logits",
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    keep_predictions: bool = False,
    client=None,
    progress: Callable[[int, int], None] | None = None,
    device: str | None = None,
) -> ShardedData:
    """Summarise every shard and merge (:func:`merge_summaries`). ``shards``: pairs of arrays, or
    items ``load`` turns into (scores, labels[, scores_name, labels_name]). ``client``: a
    ``distributed.Client``: one Dask task per shard (each loads its own shard), merged here.
    ``keep_predictions`` also concatenates the validated arrays (for the bootstrap; not with a
    client, as it would bring every sample back). ``progress(done, total)`` after each shard.
    ``device``: where each shard's summary pass runs locally (:func:`~calibrate_cli.engine.summary.summarize`)."""
    compat = check_compat(compat)
    shards = list(shards)
    total = len(shards)
    if total == 0:
        raise InputError("no shards")
    kwargs = dict(input_kind=input_kind, n_bins=n_bins, compat=compat)
    wheres = [f"shard {i + 1} of {total}: " for i in range(total)]
    if client is not None:
        if keep_predictions:
            raise InputError("the bootstrap resamples every sample on one machine: evaluate the shards locally")
        results = _dask_summaries(client, shards, load, wheres, kwargs, progress)
    else:
        results = []
        for i, shard in enumerate(shards):
            results.append(summarize_shard(shard, load, where=wheres[i], keep_predictions=keep_predictions,
                                           device=device, **kwargs))
            if progress is not None:
                progress(i + 1, total)
    names = [w.rstrip(": ") + _file_of(shard) for w, shard in zip(wheres, shards)]  # "shard 2 of 4 (x_2.npy)"
    summary = merge_summaries([r[0] for r in results], names=names)
    predictions = None
    if keep_predictions:
        parts = [r[1] for r in results]
        predictions = Predictions(
            scores=np.concatenate([p.scores for p in parts]) if len(parts) > 1 else parts[0].scores,
            labels=np.concatenate([p.labels for p in parts]) if len(parts) > 1 else parts[0].labels,
            input_kind=input_kind,
        )
    return ShardedData(summary=summary, n_shards=total, predictions=predictions, input_kind=input_kind)


def _dask_summaries(client, shards, load, wheres, kwargs, progress) -> list:
    """One ``dask.delayed`` task per shard on ``client``'s cluster; results in shard order."""
    import dask
    from distributed import as_completed

    task = dask.delayed(summarize_shard, pure=False)
    futures = client.compute([task(shard, load, where=wheres[i], **kwargs) for i, shard in enumerate(shards)])
    index = {future.key: i for i, future in enumerate(futures)}
    results = [None] * len(futures)
    # a failed task raises its own error here (an InputError names the shard)
    for done, (future, result) in enumerate(as_completed(futures, with_results=True), start=1):
        results[index[future.key]] = result
        if progress is not None:
            progress(done, len(futures))
    return results


#: seconds to wait for a scheduler given by address: to connect, and then for its first answer (the
#: handshake); a server that accepts the connection and never answers is given up after this too
CONNECT_TIMEOUT_S = 10

#: the schemes of a scheduler's address (distributed's, less inproc://, a scheduler inside this process)
SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")


def check_scheduler_address(address: str) -> str:
    """``address`` of a Dask scheduler (``tcp://host:port``; ``host:port`` is tcp), checked before any
    connection: InputError saying what is wrong for anything distributed could not connect to (no
    port, a port that is not a number, an unknown scheme, tls:// without certificates, ucx://
    without UCX). Returns the address with the scheme written out."""
    from distributed.comm.addressing import parse_address, parse_host_port

    text = address.strip()
    scheme, location = parse_address(text, strict=False)
    scheme = scheme.lower()
    usage = "give tcp://HOST:PORT (a scheduler listens on port 8786 by default)"
    if scheme == "inproc":
        raise InputError(f"inproc:// names a scheduler inside this very process; {usage}")
    if scheme not in SCHEDULER_SCHEMES:
        raise InputError(f"unknown scheme {scheme + '://'!r} (known: {', '.join(s + '://' for s in SCHEDULER_SCHEMES)}); {usage}")
    if scheme == "ucx":
        import importlib.util

        if importlib.util.find_spec("distributed_ucxx") is None:
            raise InputError("ucx:// needs UCX support (the distributed-ucxx package), which is not installed")
        return f"{scheme}://{location}"
    try:
        host, port = parse_host_port(location)
    except ValueError as exc:
        raise InputError(f"not HOST:PORT ({exc}); {usage}") from None
    if not host or not 0 < int(port) < 65536:
        raise InputError(f"not HOST:PORT (host {host!r}, port {port}); {usage}")
    if scheme in ("tls", "wss"):
        from distributed.security import Security

        if Security().get_connection_args("client").get("ssl_context") is None:
            raise InputError(
                f"{scheme}:// needs TLS certificates in Dask's configuration (distributed.comm.tls: ca-file, "
                "client.cert, client.key), and none are set"
            )
    return f"{scheme}://{location}"


def probe_scheduler(address: str, timeout: float) -> None:
    """Connect to ``address`` and complete distributed's handshake within ``timeout`` seconds (plus
    one), then close: a server that accepts the connection but never answers would otherwise keep
    ``Client`` waiting for ever. Raises TimeoutError when it
    does not answer in time, OSError when it cannot be reached or answers in another protocol."""
    import asyncio
    import threading

    from distributed.comm import connect
    from distributed.security import Security

    args = Security().get_connection_args("client")
    outcome: list = []

    async def handshake():
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout + 1)
        await comm.close()

    def run():  # a loop of its own, in a thread of its own: the caller may be inside an event loop
        try:
            asyncio.run(handshake())
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported below, in the caller's thread
            outcome.append(exc)

    with _quiet_dask_logs():
        thread = threading.Thread(target=run, name="calib-scheduler-probe", daemon=True)
        thread.start()
        thread.join(timeout + 5)
    error = outcome[0] if outcome else TimeoutError()
    if error is None:
        return
    if isinstance(error, TimeoutError):
        raise TimeoutError(f"no answer within {timeout:g} s: is it a Dask scheduler? (a slow network: a longer timeout)")
    if isinstance(error, OSError):
        raise error
    raise ConnectionError(f"it answered, but not as a Dask scheduler ({type(error).__name__}: "
                          f"{str(error).strip().splitlines()[0][:200] if str(error).strip() else 'no message'})")

#: the loggers a cluster writes to while it runs and shuts down
DASK_LOGGER_PREFIXES = ("distributed", "tornado", "asyncio")


def dask_loggers() -> list[logging.Logger]:
    """The loggers of distributed, tornado and asyncio (:data:`DASK_LOGGER_PREFIXES` and their children)."""
    names = set(DASK_LOGGER_PREFIXES) | {
        n for n in logging.root.manager.loggerDict if n.startswith(DASK_LOGGER_PREFIXES)
    }
    return [logging.getLogger(name) for name in sorted(names)]


@contextlib.contextmanager
def _quiet_dask_logs():
    """Disable the loggers of distributed, tornado and asyncio while a cluster lives and shuts down: a
    shard's error reaches the caller as its own exception, and a closing comm's INFO record (with a
    traceback) must not reach stderr after calib's one-line error. Before they are enabled again the
    garbage is collected, so that a future the shutdown left with an unread exception (a worker's
    close that timed out on a loaded machine) is finalised, and its "Future exception was never
    retrieved" record dropped, while they are still off."""
    loggers = dask_loggers()
    saved = [(logger, logger.disabled) for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        with warnings.catch_warnings():  # e.g. "Port 8787 is already in use" when clusters run side by side
            warnings.simplefilter("ignore")
            yield
    finally:
        gc.collect()
        for logger, disabled in saved:
            logger.disabled = disabled


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, *, n_workers: int = 2, timeout: float | None = None):
    """A ``distributed.Client`` (context manager) connected to ``scheduler`` (an address such as
    tcp://host:8786), or to a new LocalCluster of ``n_workers`` single-thread workers in this process
    (closed on exit). Raises ImportError when dask[distributed] is not installed, InputError for an
    address that is not one (:func:`check_scheduler_address`), OSError or TimeoutError when the
    scheduler cannot be reached, or does not answer, within ``timeout`` seconds (default
    :data:`CONNECT_TIMEOUT_S`; :func:`probe_scheduler`)."""
    from distributed import Client, LocalCluster

    if scheduler:
        timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
        address = check_scheduler_address(scheduler)
        probe_scheduler(address, timeout)
        with _quiet_dask_logs(), Client(address, timeout=timeout) as client:
            yield client
        return
    with _quiet_dask_logs(), LocalCluster(
        n_workers=n_workers, threads_per_worker=1, processes=False, dashboard_address=":0",  # any free port
        silence_logs=logging.CRITICAL,
    ) as cluster, Client(cluster) as client:
        yield client


def evaluate_shards(
    shards: Iterable,
    *,
    load: Loader | None = None,
    input_kind: InputKind = "logits",
    n_bins: int = DEFAULT_N_BINS,
    compat: str | None = None,
    scores_name: str = "scores",
    bootstrap: int = 0,
    ci_level: float | None = None,
    ci_method: str | None = None,
    seed=None,
    device: str | None = None,
    progress=None,
    shard_progress: Callable[[int, int], None] | None = None,
    client=None,
) -> EvalReport:
    """:func:`~calibrate_cli.evaluate.evaluate` of the concatenation of ``shards``, from the merged
    per-shard summaries (:func:`summarize_shards`; same arguments). Every metric equals that of the
    concatenated arrays (classwise-ECE up to the order of its sums, see the module docstring).

    >>> import numpy as np
    >>> report = evaluate_shards([(np.array([[2.0, 0.0]]), np.array([0])), (np.array([[0.0, 1.0]]), np.array([0]))])
    >>> report.metrics["accuracy"], report.n, report.k
    (0.5, 2, 2)
    """
    data = summarize_shards(
        shards, load=load, input_kind=input_kind, n_bins=n_bins, compat=compat, keep_predictions=bool(bootstrap),
        client=client, progress=shard_progress,
    )
    return report_from_shards(
        data, n_bins=n_bins, scores_name=scores_name, bootstrap=bootstrap, ci_level=ci_level, ci_method=ci_method,
        seed=seed, device=device, progress=progress,
    )


def report_from_shards(
    data: ShardedData,
    *,
    n_bins: int = DEFAULT_N_BINS,
    scores_name: str = "scores",
    bootstrap: int = 0,
    ci_level: float | None = None,
    ci_method: str | None = None,
    seed=None,
    device: str | None = None,
    progress=None,
    bootstrap_metrics=None,
    summary_device: str | None = None,
) -> EvalReport:
    """The :class:`~calibrate_cli.evaluate.EvalReport` of merged shards (:func:`summarize_shards`),
    as :func:`~calibrate_cli.evaluate.evaluate` makes it from one summary; ``bootstrap=B`` needs
    the kept predictions. ``summary_device``: where the shards were summarised (recorded)."""
    if bootstrap and data.predictions is None:
        raise InputError("the bootstrap needs the shards' samples: summarise them with keep_predictions=True")
    return report_from_summary(
        data.summary, input_kind=data.input_kind, n_bins=n_bins, scores_name=scores_name,
        predictions=data.predictions, bootstrap=bootstrap, ci_level=ci_level, ci_method=ci_method, seed=seed,
        device=device, progress=progress, bootstrap_metrics=bootstrap_metrics, summary_device=summary_device,
    )
