#!/usr/bin/env python
"""Differential fuzz of the numeric contract: every path against the numpy definition on hostile data.

    python scripts/fuzz_paths.py --seconds 300                # every path, 5 minutes
    python scripts/fuzz_paths.py --cases 200 --paths fused,order --seed 3 --out /tmp/fuzz

Each case is drawn to sit where paths part: ties and near-ties of the maximum, small integer logits
(confidences that tie in exact arithmetic), huge and tiny scales, log-probabilities of 0, peaked
Dirichlet rows, probabilities on a grid, 1-D binary scores, float16, K around the compiled loops'
widths, N = 1. Then
``evaluate(..., metrics="all")`` of each path is compared with the numpy engine's within
docs/conventions.md's contract (1e-12 relative, or 1e-15 absolute):

- ``fused``: the C engine (``CALIB_ENGINE=fused``), where it is built;
- ``torch-cpu``: the device code on the CPU (``device="torch-cpu"``), where torch is installed;
- ``shards``: two shards merged (:func:`calibrate_cli.engine.shards.evaluate_shards`);
- ``mmap``: the scores memory-mapped from a .npy file;
- ``meter``: :class:`~calibrate_cli.metrics.meter.Meter` fed a few batches;
- ``order``: the classes' columns reversed (rows with one maximum only: the prediction must not move;
  top-5 accuracy left out, whose ties go to the lower index too, and ACE, whose bins are its authors'
  with their exact ties: docs/metrics.md).

``shards`` and ``meter`` are compared on the default metrics, the others on every metric.

A disagreement prints the metric and both values and saves the case (``--out``); the exit code is
1 when any case disagreed. It found AdaECE and KS-CE moving with ties split by rounding
(docs/changelog.md); tests/test_fuzz_paths.py runs a few cases of every path.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

import calibrate_cli as calib
from calibrate_cli.engine import kernels
from calibrate_cli.engine.shards import evaluate_shards
from calibrate_cli.errors import InputError
from calibrate_cli.metrics.meter import Meter

PATHS = ("fused", "torch-cpu", "shards", "mmap", "meter", "order")
REL, ABS = 1e-12, 1e-15


def hostile_case(rng: np.random.Generator):
    """(scores, labels, input kind) drawn where paths part (see the module docstring)."""
    n = int(rng.choice([1, 2, 3, 17, 64, 65, 200, 1000]))
    k = int(rng.choice([2, 3, 5, 10, 31, 32, 33, 63, 64, 65, 100, 130]))
    dtype = rng.choice([np.float16, np.float32, np.float32, np.float64, np.float64])
    mode = int(rng.integers(0, 6))
    if mode == 0:
        x = rng.standard_normal((n, k)) * rng.choice([0.01, 1, 10, 100])
    elif mode == 1:  # small integers: ties of the maximum and of the confidences
        x = rng.integers(-3, 4, (n, k)).astype(np.float64)
    elif mode == 2:  # a runner-up one ulp below the maximum
        x = rng.standard_normal((n, k))
        x[:, 0] = x.max(axis=1)
        x[:, 1] = np.nextafter(x[:, 0], -np.inf)
    elif mode == 3:
        x = rng.standard_normal((n, k)) * 1e30
    elif mode == 4:  # logits of (nearly) impossible classes
        x = rng.standard_normal((n, k))
        x[rng.random((n, k)) < 0.3] = -1e300
    else:  # peaked log-probabilities
        x = np.log(rng.dirichlet(np.ones(k) * rng.choice([0.01, 0.1, 1]), n) + 1e-300)
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    x[~np.isfinite(x)] = np.finfo(dtype).min
    y = rng.integers(0, k, n)
    if rng.random() < 0.1:  # binary scores as a 1-D vector: log-odds, or p(class 1)
        s = x[:, 0].astype(np.float64) - x[:, 1 % k]
        if rng.random() < 0.5:
            return s.astype(dtype), rng.integers(0, 2, n), "logits"
        return (1.0 / (1.0 + np.exp(-np.clip(s, -700, 700)))).astype(dtype), rng.integers(0, 2, n), "probs"
    if rng.random() < 0.3:  # probabilities, some on a grid of 1/15
        z = x.astype(np.float64)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        if rng.random() < 0.3:
            p = np.abs(np.round(p * 15) / 15)
            p[:, 0] += p.sum(axis=1) == 0
            p /= p.sum(axis=1, keepdims=True)
        return p.astype(dtype), y, "probs"
    return x, y, "logits"


def disagreement(got: dict, want: dict) -> str | None:
    """The first metric of ``want`` that ``got`` misses or holds outside the contract, as a line."""
    for name, w in want.items():
        g = got.get(name)
        if (g is None) != (w is None):
            return f"{name}: {g} against {w}"
        if g is None or (isinstance(g, float) and math.isnan(g) and math.isnan(w)):
            continue
        if not math.isclose(g, w, rel_tol=REL, abs_tol=ABS):
            return f"{name}: {g!r} against {w!r} (Δ {abs(g - w):.3g})"
    return None


#: the paths that compute the default metrics only (``evaluate``'s without ``metrics=``)
DEFAULT_ONLY = ("shards", "meter")


def _metrics(scores, labels, kind, n_bins, metrics="all", **kw) -> dict:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dict(calib.evaluate(scores, labels, metrics=metrics, input_kind=kind, n_bins=n_bins, **kw).metrics)


def run_path(path: str, x, y, kind: str, n_bins: int, rng, tmp: Path) -> dict:
    """``evaluate``'s metrics by ``path`` (with the numpy engine where the path is not an engine)."""
    if path == "fused":
        os.environ[kernels.ENGINE_ENV] = "fused"
        return _metrics(x, y, kind, n_bins)
    if path == "torch-cpu":
        return _metrics(x, y, kind, n_bins, device="torch-cpu")
    if path == "mmap":
        np.save(tmp / "scores.npy", x)
        return _metrics(np.load(tmp / "scores.npy", mmap_mode="r"), y, kind, n_bins)
    if path == "shards":
        cut = int(rng.integers(1, x.shape[0])) if x.shape[0] > 1 else 1
        parts = [(x[:cut], y[:cut]), (x[cut:], y[cut:])] if cut < x.shape[0] else [(x, y)]
        with np.errstate(all="ignore"):
            return dict(evaluate_shards(parts, input_kind=kind, n_bins=n_bins).metrics)
    if path == "meter":
        meter = Meter(n_bins=n_bins, input_kind=kind)
        bounds = [0, *np.sort(rng.integers(0, x.shape[0] + 1, int(rng.integers(0, 4)))).tolist(), x.shape[0]]
        for a, b in zip(bounds[:-1], bounds[1:]):
            if b > a:
                meter.update(x[a:b], y[a:b])
        with np.errstate(all="ignore"):
            return dict(meter.compute().metrics)
    if path == "order":
        order = np.arange(x.shape[1])[::-1]
        return _metrics(x[:, order], np.argsort(order)[y], kind, n_bins)
    raise ValueError(path)


def available(paths) -> list[str]:
    """The paths this machine can run (fused: the C extension built; torch-cpu: torch installed)."""
    out = []
    for path in paths:
        if path == "fused" and not kernels.HAVE_CKERNEL:
            continue
        if path == "torch-cpu" and importlib.util.find_spec("torch") is None:
            continue
        out.append(path)
    return out


def _one_case(rng, path: str, tmp: Path):
    """(path, scores, labels, kind, bins, disagreement | None) of one drawn case, or None when it is not run."""
    x, y, kind = hostile_case(rng)
    n_bins = int(rng.choice([1, 5, 10, 15, 30]))
    if path == "order":
        if x.ndim == 1:
            return None
        rows, top = np.arange(x.shape[0]), x.argmax(axis=1)  # one maximum a row: a tie of the maximum goes
        with np.errstate(over="ignore"):  # to the lowest index, an order (float's largest becomes inf: refused)
            x[rows, top] += np.maximum(np.abs(x[rows, top]), 1).astype(x.dtype) * (4 * np.finfo(x.dtype).eps)
    os.environ[kernels.ENGINE_ENV] = "numpy"
    try:
        want = _metrics(x, y, kind, n_bins, metrics=None if path in DEFAULT_ONLY else "all")
    except InputError:  # a case the definition refuses (e.g. rows not summing to 1)
        return None
    got = run_path(path, x, y, kind, n_bins, rng, tmp)
    os.environ[kernels.ENGINE_ENV] = "numpy"
    if path == "order":  # a tie within the top five goes to the lower index: an order too; ACE keeps its
        want.pop("top5_accuracy", None)  # authors' exact ties (docs/metrics.md)
        want.pop("ace", None)
    return path, x, y, kind, n_bins, disagreement(got, want)


def fuzz(*, seed: int, cases: int | None, seconds: float | None, paths, out: Path | None, echo=print) -> tuple[int, int]:
    """(cases run, disagreements)."""
    rng = np.random.default_rng(seed)
    start, done, bad = time.monotonic(), 0, 0
    engine_before = os.environ.get(kernels.ENGINE_ENV)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            while (cases is None or done < cases) and (seconds is None or time.monotonic() - start < seconds):
                result = _one_case(rng, paths[done % len(paths)], Path(tmp))
                if result is None:  # a case the definition refuses, or a 1-D case for the class order
                    continue
                done += 1
                path, x, y, kind, n_bins, problem = result
                if problem:
                    bad += 1
                    echo(f"case {done} ({path}, {'×'.join(map(str, x.shape))} {x.dtype} {kind}, {n_bins} bins): {problem}")
                    if out is not None:
                        out.mkdir(parents=True, exist_ok=True)
                        np.save(out / f"case{done}_scores.npy", x)
                        np.save(out / f"case{done}_labels.npy", y)
    finally:  # the caller's choice of engine, as it was
        if engine_before is None:
            os.environ.pop(kernels.ENGINE_ENV, None)
        else:
            os.environ[kernels.ENGINE_ENV] = engine_before
    return done, bad


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long (default 60 without --cases)")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    parser.add_argument("--out", type=Path, default=None, help="folder for the cases that disagree")
    args = parser.parse_args(argv)
    wanted = [p for p in args.paths.split(",") if p]
    unknown = [p for p in wanted if p not in PATHS]
    if unknown:
        parser.error(f"unknown path(s) {', '.join(unknown)}; expected {', '.join(PATHS)}")
    paths = available(wanted)
    if not paths:
        parser.error("none of these paths runs here")
    seconds = args.seconds if args.seconds is not None or args.cases is not None else 60.0
    done, bad = fuzz(seed=args.seed, cases=args.cases, seconds=seconds, paths=paths, out=args.out)
    print(f"{done} cases over {', '.join(paths)}: {bad} disagreed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
