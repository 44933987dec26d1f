"""Coverage of calib's bootstrap intervals of the *means* (accuracy, NLL, Brier, mean confidence, S99)
on small data sets from binary logistic models whose true values are known.

The basic interval [2θ̂ − q_{1−α/2}, 2θ̂ − q_{α/2}] is the paper's choice for the binned calibration
errors, whose estimates are biased upward by the binning (benchmarks/coverage_bootstrap.py). The
means have no such bias, and near the edge of their range (an accuracy near 1 on few samples) the
basic interval mirrors the long tail of the bootstrap values to the side where no value is
possible (accuracy [95.1 %, 102.3 %]). This script measures, for basic, percentile and BCa, how
often the 90 % interval covers the true value, how often it reaches outside the metric's range,
and its mean width, over R data sets per cell.

A model: x ~ N(0, 1), the true log-odds z = a + b x, the label y ~ Bernoulli(σ(z)); the model's
logits are (0, s·z) (s = 1 calibrated, s > 1 over-confident). True values (integrals over z ~ N(a, b²),
``scipy.integrate.quad``; the prediction is class 1 when z > 0, correct with probability σ(|z|)):

    accuracy        = E[σ(|z|)]
    NLL             = E[−σ(z) log σ(s z) − (1 − σ(z)) log σ(−s z)]
    Brier           = E[2 (σ(z) (1 − σ(s z))² + (1 − σ(z)) σ(s z)²)]
    mean confidence = E[σ(s |z|)]
    S99 share       = P(σ(s |z|) ≥ 0.99),   S99 accuracy = E[σ(|z|) ; σ(s |z|) ≥ 0.99] / S99 share

Clipping an interval to the metric's range never changes whether it covers a true value (which lies
in the range), so the coverage of the clipped basic interval is that of the basic interval.

    python benchmarks/coverage_means.py                 # the table in docs/bootstrap.md (~60 min, shared 2 cores)
    python benchmarks/coverage_means.py --reps 50 --sizes 30 --workers 1   # quick look

Monte-Carlo error of a coverage estimate near 90 %: ±√(0.9·0.1/R) (±1.5 points at R = 400).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

os.environ.setdefault("CALIB_THREADS", "1")

METRICS = ["accuracy", "nll", "brier", "mean_confidence", "s99_share", "s99_accuracy"]
METHODS = ["basic", "percentile", "bca"]
#: name: (a, b, s)
MODELS = {
    "accuracy near 1 (a = 0, b = 30, s = 1)": (0.0, 30.0, 1.0),
    "calibrated (a = 0.5, b = 3, s = 1)": (0.5, 3.0, 1.0),
    "over-confident (a = 0.5, b = 3, s = 2)": (0.5, 3.0, 2.0),
}
LEVEL = 0.90
S99 = 0.99


def _sigmoid(z):
    return 0.5 * (1.0 + math.tanh(0.5 * z))


def _log_sigmoid(z):
    return -math.log1p(math.exp(-z)) if z >= 0 else z - math.log1p(math.exp(z))


def true_values(a: float, b: float, s: float) -> dict[str, float]:
    from scipy import integrate

    density = lambda z: math.exp(-0.5 * ((z - a) / b) ** 2) / (b * math.sqrt(2 * math.pi))  # noqa: E731
    t = math.log(S99 / (1 - S99)) / s  # σ(s|z|) ≥ 0.99  ⇔  |z| ≥ t
    lo, hi = a - 12 * b, a + 12 * b

    def expect(fn, pieces=(lo, -t, 0.0, t, hi)):
        return sum(
            integrate.quad(lambda z: fn(z) * density(z), p, q, epsabs=1e-14, epsrel=1e-12, limit=400)[0]
            for p, q in zip(pieces[:-1], pieces[1:])
        )

    acc = expect(lambda z: _sigmoid(abs(z)))
    nll = expect(lambda z: -_sigmoid(z) * _log_sigmoid(s * z) - _sigmoid(-z) * _log_sigmoid(-s * z))
    brier = expect(lambda z: 2 * (_sigmoid(z) * _sigmoid(-s * z) ** 2 + _sigmoid(-z) * _sigmoid(s * z) ** 2))
    conf = expect(lambda z: _sigmoid(s * abs(z)))
    tails = (lo, -t), (t, hi)
    share = sum(integrate.quad(density, p, q, epsabs=1e-14, limit=400)[0] for p, q in tails)
    s99_correct = sum(
        integrate.quad(lambda z: _sigmoid(abs(z)) * density(z), p, q, epsabs=1e-14, limit=400)[0] for p, q in tails
    )
    return {"accuracy": acc, "nll": nll, "brier": brier, "mean_confidence": conf, "s99_share": share,
            "s99_accuracy": s99_correct / share}


def draw(a: float, b: float, s: float, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    z = a + b * rng.standard_normal(n)
    labels = (rng.random(n) < 1.0 / (1.0 + np.exp(-z))).astype(np.int64)
    logits = np.zeros((n, 2))
    logits[:, 1] = s * z
    return logits, labels


def one_replicate(args) -> dict:
    model, n, rep, n_resamples = args
    from calibrate_cli.bootstrap import (
        METRIC_RANGES,
        bootstrap_values,
        confidence_interval,
        jackknife_acceleration,
        jackknife_values,
    )

    a, b, s = MODELS[model]
    rng = np.random.default_rng([int(1000 * a), int(1000 * b), int(1000 * s), n, rep])
    logits, labels = draw(a, b, s, n, rng)
    point, values = bootstrap_values(logits, labels, input_kind="logits", n_resamples=n_resamples, seed=rep,
                                     metrics=METRICS)
    jack = jackknife_values(logits, labels, input_kind="logits", metrics=METRICS)
    out = {}
    for name in METRICS:
        finite = jack[name][np.isfinite(jack[name])]
        accel = jackknife_acceleration(finite) if finite.size > 2 else 0.0
        for method in METHODS:
            ci = confidence_interval(point[name], values[name], level=LEVEL, method=method,
                                     acceleration=accel if method == "bca" else 0.0, bounds=METRIC_RANGES[name])
            out[name, method] = None if ci is None else (ci.low, ci.high, ci.point)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--sizes", type=int, nargs="+", default=[30, 100, 300])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args(argv)
    from calibrate_cli.bootstrap import METRIC_RANGES

    print(f"# {LEVEL:.0%} intervals, B = {args.resamples}, R = {args.reps} data sets per cell")
    print("# coverage of the true value % | outside the range % | mean width (of the interval clipped to the range)")
    print("# (n/R: the data sets on which the metric and its interval are defined, e.g. S99 accuracy needs one")
    print("#  confidence >= 0.99; an undefined interval counts as not covering)")
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for model in args.models:
            truth = true_values(*MODELS[model])
            for n in args.sizes:
                t0 = time.perf_counter()
                jobs = [(model, n, rep, args.resamples) for rep in range(args.reps)]
                results = list(pool.map(one_replicate, jobs, chunksize=8))
                print(f"\n## {model}, N = {n}  [{time.perf_counter() - t0:.0f} s]")
                print(f"{'metric':<16}{'true':>9}{'defined':>9}  " + "".join(f"{m:>26}" for m in METHODS))
                for name in METRICS:
                    lo_r, hi_r = METRIC_RANGES[name]
                    cells = []
                    for method in METHODS:
                        iv = np.array([r[name, method] for r in results if r[name, method] is not None]).reshape(-1, 3)
                        cover = np.sum((iv[:, 0] <= truth[name]) & (truth[name] <= iv[:, 1])) / len(results)
                        out = np.mean((iv[:, 0] < lo_r) | (iv[:, 1] > hi_r)) if len(iv) else math.nan
                        width = np.mean(np.minimum(iv[:, 1], hi_r) - np.maximum(iv[:, 0], lo_r)) if len(iv) else math.nan
                        cells.append(f"{100 * cover:5.1f} |{100 * out:5.1f} |{width:8.4f}")
                    print(f"{name:<16}{truth[name]:9.5f}{len(iv):>5}/{len(results):<3}  " + "".join(f"{c:>26}" for c in cells))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
