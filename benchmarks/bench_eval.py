"""Throughput of `evaluate` (every metric, one pass) on synthetic logits. Not a test.

    python benchmarks/bench_eval.py            # 10^6 × 10 and 10^6 × 100 float32 logits
    python benchmarks/bench_eval.py --n 100000 --k 1000
"""

import argparse
import platform
import time

import numpy as np

import calibrate_cli as calib


def synthetic(n: int, k: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.standard_normal((n, k), dtype=np.float32) * 2
    logits[np.arange(n), labels] += 3
    return logits, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--k", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, numpy {np.__version__}")
    for k in args.k:
        logits, labels = synthetic(args.n, k)
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            report = calib.evaluate(logits, labels)
            best = min(best, time.perf_counter() - start)
        print(f"evaluate N={args.n:,} K={k}: {best:.2f} s (best of {args.repeat}), ECE={report.metrics['ece']:.4f}")


if __name__ == "__main__":
    main()
