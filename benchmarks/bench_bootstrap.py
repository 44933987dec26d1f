"""Benchmark (not a test): bootstrap intervals of 10^5 × 10 and 10^6 × 10 logits, 1000 resamples.

Goals on the 2-core development machine (issue 5): under 2 s for 10^5 and under 20 s for
10^6. Reports the time for ECE alone and for every metric of ``calib eval``, separately for the
one-off preparation (the summarize pass, sorting) and the resampling; and, for scale, a naive loop
that resamples the arrays and recomputes the ECE (extrapolated from a few resamples).

    python benchmarks/bench_bootstrap.py              # both sizes
    python benchmarks/bench_bootstrap.py --sizes 100000 --resamples 200
    python benchmarks/bench_bootstrap.py --device torch-cpu      # or cuda / auto (needs torch)
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from calibrate_cli.bootstrap import bootstrap
from calibrate_cli.engine.devices import DEVICES
from calibrate_cli.metrics.functional import equal_width_bins
from calibrate_cli.data.predictions import as_predictions
from calibrate_cli.engine.summary import SummaryRequest, summarize


def data(n: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)).astype(np.float32) * 3
    logits[np.arange(n), labels] += 2.0
    return logits, labels


def naive_ece_seconds(logits, labels, n_resamples: int, sample: int = 20) -> float:
    """A plain loop: resample the confidences/correctness and bin them again (per-sample pass reused)."""
    s = summarize(as_predictions(logits, labels), request=SummaryRequest(sums=frozenset({"samples"})))  # conf, correct
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    for _ in range(sample):
        idx = rng.integers(0, s.n, s.n)
        equal_width_bins(s.confidences[idx], s.correct[idx]).calibration_error()
    return (time.perf_counter() - t) * n_resamples / sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--device", choices=DEVICES, default="cpu", help="where the resampling runs")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive loop")
    args = parser.parse_args()
    device = args.device
    where = f"numpy {np.__version__}"
    if device != "cpu":
        import torch

        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
        where += f", torch {torch.__version__} ({gpu})"
    print(f"{platform.processor() or platform.machine()}, {where}, device {device}, B = {args.resamples}")
    for n in args.sizes:
        logits, labels = data(n, args.classes)
        for metrics, label in ((["ece"], "ECE alone"), (None, "every metric")):
            prep = time.perf_counter()
            bootstrap(logits, labels, n_resamples=1, metrics=metrics, device=device)
            prep = time.perf_counter() - prep
            t = time.perf_counter()
            bootstrap(logits, labels, n_resamples=args.resamples, metrics=metrics, device=device)
            total = time.perf_counter() - t
            print(f"N = {n:>9,} K = {args.classes}: {label:<13} {total:7.2f} s  (of which ~{prep:.2f} s preparation)")
        if args.no_naive:
            continue
        print(f"N = {n:>9,} K = {args.classes}: naive ECE loop {naive_ece_seconds(logits, labels, args.resamples):6.2f} s (extrapolated)")


if __name__ == "__main__":
    main()
