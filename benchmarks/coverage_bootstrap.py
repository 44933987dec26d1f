"""Coverage of calib's bootstrap intervals on simulated models whose true metric values are known.

A simulated binary model: the predicted class k is 0 or 1 with probability 1/2, its confidence is
x = 0.5 + 0.5 t with t ~ Beta(4, 1) (mean confidence 0.9), p_k = x, and the prediction is correct
with probability c(x) = 0.5 + 0.5 t^γ (γ = 1: calibrated; γ > 1: over-confident; γ < 1: under-
confident). The population ("true") value of every metric is an integral over x, computed with
scipy.integrate.quad (M = 15 bins):

    ECE      = Σ_b |∫_{x ∈ B_b} (c(x) − x) f(x) dx|                 (B_b = (b/M, (b+1)/M])
    AdaECE   = the same over equal-mass bins (the quantiles of x)
    MCE      = max_b |∫_{B_b} (c − x) f| / ∫_{B_b} f
    classwise-ECE (K = 2, p_1 = x or 1 − x with prob. 1/2 each)
             = Σ_b |½ ∫_{x ∈ B_b} (c − x) f − ½ ∫_{1 − x ∈ B_b} (c − x) f|
    accuracy = ∫ c f,  Brier = 2 ∫ [c (1 − x)² + (1 − c) x²] f,  NLL = −∫ [c log x + (1 − c) log(1 − x)] f

For each model and N, R data sets are drawn; on each, calib's bootstrap (B resamples, seed r) gives
the basic, percentile, bias-corrected (BCa with a = 0) and BCa (delete-a-group jackknife
acceleration) intervals at 90 %, and the script counts how often each covers the true value, how
often it excludes its own point estimate, and how often it reaches outside the metric's range.

    python benchmarks/coverage_bootstrap.py                      # the table in docs/bootstrap.md
    python benchmarks/coverage_bootstrap.py --reps 50 --sizes 1000 --workers 1   # quick look

Monte-Carlo error of a coverage estimate: ±√(0.9·0.1/R) (±2.1 % at R = 200).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

os.environ.setdefault("CALIB_THREADS", "1")

METRICS = ["ece", "adaece", "classwise_ece", "mce", "accuracy", "brier", "nll"]
METHODS = ["basic", "percentile", "bc", "bca"]
MODELS = {"calibrated": 1.0, "slightly over-confident": 1.1, "over-confident": 1.5, "under-confident": 0.7}
A_T, B_T = 4.0, 1.0
M = 15
LEVEL = 0.90


def _calibration(x, gamma):
    return 0.5 + 0.5 * (2 * x - 1) ** gamma


def true_values(gamma: float) -> dict[str, float]:
    from scipy import integrate, stats

    dist = stats.beta(A_T, B_T)
    f = lambda x: 2 * dist.pdf(2 * x - 1)  # noqa: E731  density of x on [0.5, 1]
    gap = lambda x: (_calibration(x, gamma) - x) * f(x)  # noqa: E731

    def integral(fn, lo, hi):
        lo, hi = max(lo, 0.5), min(hi, 1.0)
        return integrate.quad(fn, lo, hi, epsabs=1e-13, epsrel=1e-12, limit=200)[0] if hi > lo else 0.0

    edges = np.arange(M + 1) / M
    width = [(edges[b], edges[b + 1]) for b in range(M)]
    ece = sum(abs(integral(gap, lo, hi)) for lo, hi in width)
    mass_edges = 0.5 + 0.5 * dist.ppf(np.arange(M + 1) / M)
    adaece = sum(abs(integral(gap, mass_edges[b], mass_edges[b + 1])) for b in range(M))
    mce = max(abs(integral(gap, lo, hi)) / integral(f, lo, hi) for lo, hi in width if integral(f, lo, hi) > 0)
    # classwise: class 1 has p_1 = x (predicted 1) or 1 − x (predicted 0), each with probability 1/2
    cw = sum(abs(0.5 * integral(gap, lo, hi) - 0.5 * integral(gap, 1 - hi, 1 - lo)) for lo, hi in width)
    c = lambda x: _calibration(x, gamma)  # noqa: E731
    acc = integral(lambda x: c(x) * f(x), 0.5, 1)
    brier = integral(lambda x: 2 * (c(x) * (1 - x) ** 2 + (1 - c(x)) * x**2) * f(x), 0.5, 1)
    nll = integral(lambda x: -(c(x) * np.log(x) + (1 - c(x)) * np.log1p(-x)) * f(x), 0.5, 1)
    return {"ece": ece, "adaece": adaece, "classwise_ece": cw, "mce": mce, "accuracy": acc, "brier": brier, "nll": nll}


def draw(gamma: float, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    x = 0.5 + 0.5 * rng.beta(A_T, B_T, n)
    correct = rng.random(n) < _calibration(x, gamma)
    k = rng.integers(0, 2, n)
    probs = np.empty((n, 2))
    probs[np.arange(n), k] = x
    probs[np.arange(n), 1 - k] = 1 - x
    labels = np.where(correct, k, 1 - k)
    return probs, labels


def one_replicate(args) -> dict:
    gamma, n, rep, n_resamples = args
    from calibrate_cli.bootstrap import (
        METRIC_RANGES,
        bootstrap_values,
        confidence_interval,
        jackknife_acceleration,
        jackknife_values,
    )

    rng = np.random.default_rng([int(gamma * 1000), n, rep])
    probs, labels = draw(gamma, n, rng)
    point, values = bootstrap_values(probs, labels, input_kind="probs", n_resamples=n_resamples, seed=rep, metrics=METRICS)
    jack = jackknife_values(probs, labels, input_kind="probs", metrics=METRICS)
    out = {}
    for name in METRICS:
        accel = jackknife_acceleration(jack[name])
        for method in METHODS:
            ci = confidence_interval(
                point[name], values[name], level=LEVEL, method="bca" if method.startswith("bc") else method,
                acceleration=accel if method == "bca" else 0.0, bounds=METRIC_RANGES[name],
            )
            out[name, method] = (ci.low, ci.high, ci.point)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args(argv)
    print(f"# {LEVEL:.0%} intervals, B = {args.resamples}, R = {args.reps} data sets per cell, M = {M}")
    print("# coverage of the true value % | excludes own estimate % | outside range %")
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for model in args.models:
            gamma = MODELS[model]
            truth = true_values(gamma)
            for n in args.sizes:
                t0 = time.perf_counter()
                jobs = [(gamma, n, rep, args.resamples) for rep in range(args.reps)]
                results = list(pool.map(one_replicate, jobs, chunksize=4))
                print(f"\n## {model} (γ = {gamma}), N = {n}  [{time.perf_counter() - t0:.0f} s]")
                print(f"{'metric':<14}{'true':>9}{'mean est':>10}  " + "".join(f"{m:>22}" for m in METHODS))
                for name in METRICS:
                    est = np.mean([r[name, "basic"][2] for r in results])
                    cells = []
                    for method in METHODS:
                        iv = np.array([r[name, method] for r in results])
                        lo_r, hi_r = _range(name)
                        cover = np.mean((iv[:, 0] <= truth[name]) & (truth[name] <= iv[:, 1]))
                        excl = np.mean((iv[:, 2] < iv[:, 0]) | (iv[:, 2] > iv[:, 1]))
                        out = np.mean((iv[:, 0] < lo_r) | (iv[:, 1] > hi_r))
                        cells.append(f"{100 * cover:5.1f} |{100 * excl:5.1f} |{100 * out:5.1f}")
                    print(f"{name:<14}{truth[name]:9.5f}{est:10.5f}  " + "".join(f"{c:>22}" for c in cells))
                sys.stdout.flush()


def _range(name):
    from calibrate_cli.bootstrap import METRIC_RANGES

    return METRIC_RANGES[name]


if __name__ == "__main__":
    main()
