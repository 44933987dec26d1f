"""Timing of temperature fitting (not a test): grid search over 100 temperatures and the exact NLL fit.

    python benchmarks/bench_temperature.py                 # N = 10^6, K = 100 float32 logits (~2-3 min)
    python benchmarks/bench_temperature.py --n 100000 --baseline
    python benchmarks/bench_temperature.py --whole-process   # issue 15's ratios: `calib temperature` vs a softmax pass

The logits are synthetic and seeded. ``--baseline`` also times the obvious implementation (a Python
loop over the 100 temperatures, each a full ``calib.ece`` of ``logits / T``) to show what the
vectorised grid saves. Results are recorded in docs/temperature.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from calibrate_cli import ece, fit_temperature
from calibrate_cli.calibrators.temperature_fit import apply_temperature, temperature_grid


def synthetic(n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.standard_normal((n, k), dtype=np.float32) * np.float32(2.0)
    hit = rng.random(n) < 0.7  # 70% of samples get a boosted true class
    logits[np.flatnonzero(hit), labels[hit]] += np.float32(6.0)
    return logits, labels


def timed(label: str, func):
    start = time.perf_counter()
    result = func()
    elapsed = time.perf_counter() - start
    print(f"{label:<44} {elapsed:8.2f} s", flush=True)
    return result, elapsed


def softmax_pass(logits: np.ndarray) -> float:
    """Seconds of one numpy float64 softmax pass over ``logits`` (the unit of issue 15's ratios)."""
    start = time.perf_counter()
    z = logits.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return time.perf_counter() - start


def whole_process(cases, repeat: int = 3) -> None:
    """For each (label, N, K, calib arguments): the whole `calib temperature` process and one numpy
    float64 softmax pass over the same array, measured alternately ``repeat`` times in the same run,
    and their ratio (best against best, and median against median: both vary with the machine's load).

    The package's bytecode is compiled first, as an installed package has it (with
    PYTHONDONTWRITEBYTECODE set, an editable checkout would otherwise recompile its sources in every
    process, ~0.2 s here)."""
    import compileall
    import statistics

    import calibrate_cli

    compileall.compile_dir(Path(calibrate_cli.__file__).parent, quiet=1)
    # the unit without numpy's huge-page advice, as calib runs (calibrate_cli.cli._no_hugepage_advice):
    # first-touching the pass's 8·N·K-byte array is then cheapest, so the unit is smallest and the
    # ratio the least flattering (with the advice, 800 MB cost 1.0-3.9 s here instead of ~1.0 s)
    core = getattr(np, "_core", None) or getattr(np, "core", None)
    getattr(core.multiarray, "_set_madvise_hugepage", lambda flag: None)(False)
    calib = [sys.executable, "-c", "from calibrate_cli.cli import main; main()"]
    for label, n, k, extra in cases:
        logits, labels = synthetic(n, k)
        with tempfile.TemporaryDirectory() as tmp:
            x, y = Path(tmp) / "x.npy", Path(tmp) / "y.npy"
            np.save(x, logits)
            np.save(y, labels)
            units, wholes = [], []
            for _ in range(repeat):
                units.append(softmax_pass(logits))
                start = time.perf_counter()
                done = subprocess.run([*calib, "temperature", str(x), str(y), "--format", "json", *extra],
                                      capture_output=True, text=True)
                wholes.append(time.perf_counter() - start)
                if done.returncode:
                    raise SystemExit(done.stderr)
            in_process = time.perf_counter()
            fit_temperature(logits, labels, **({"search": "nll"} if "nll" in extra else {}))
            fit_only = time.perf_counter() - in_process
        unit, whole = min(units), min(wholes)
        median = statistics.median(wholes) / statistics.median(units)
        print(f"{label:<34} N = {n:.0e}, K = {k}: calib temperature {whole:6.2f} s (of {repeat}: "
              f"{', '.join(f'{w:.2f}' for w in wholes)}; fit alone in process {fit_only:5.2f} s); softmax pass "
              f"{unit:5.3f} s ({', '.join(f'{u:.3f}' for u in units)}); ratio {whole / unit:5.1f} best/best, "
              f"{median:5.1f} median/median (fit alone {fit_only / unit:4.1f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--baseline", action="store_true", help="also time a Python loop over T")
    parser.add_argument("--skip-grid", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="alternated runs of each (--whole-process)")
    parser.add_argument("--whole-process", action="store_true",
                        help="issue 15's ratios: grid by ECE on N x 100, exact NLL fit on N x 10 (whole process)")
    args = parser.parse_args()
    if args.whole_process:
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}")
        whole_process([("grid of 100 T by ECE", args.n, 100, []), ("exact NLL fit", args.n, 10, ["--search", "nll"])],
                      args.repeat)
        return

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}")
    logits, labels = synthetic(args.n, args.k)
    print(f"logits: N = {args.n}, K = {args.k}, float32 ({logits.nbytes / 2**20:.0f} MiB); grid: 100 temperatures")

    if not args.skip_grid:
        for objective in ("ece", "nll"):
            fit, _ = timed(f"grid search, objective {objective}", lambda: fit_temperature(logits, labels, objective=objective))
            print(f"  T = {fit.temperature:g}, {objective} {fit.objective_at_one:.6f} at T = 1 → {fit.objective_value:.6f}")
    fit, _ = timed("exact NLL fit (safeguarded Newton on log β)", lambda: fit_temperature(logits, labels, search="nll"))
    print(f"  T = {fit.temperature:.6f} after {fit.parameters['passes']} passes over the data")

    if args.baseline:
        grid = temperature_grid()

        def loop():
            return [ece(apply_temperature(logits, t), labels) for t in grid]

        values, _ = timed("baseline: Python loop of 100 × calib.ece", loop)
        best = float(grid[int(np.argmin(values))])
        print(f"  T = {best:g} (must equal the grid search's)")


if __name__ == "__main__":
    main()
