"""Whole-process `calib eval` of a CSV (and of the same values as .npy and Parquet) vs numpy.loadtxt.

Writes a 10^6 × 10 CSV of logits with a label column (~94 MB; ``--rows``/``--classes`` change it),
then runs, as separate processes timed with os.wait4 (wall time and the child's own peak RSS),
measured in one run on the same file:

- loadtxt: python -c "np.loadtxt(file, delimiter=',', skiprows=1)"  (the bar: ≤ 2× its time, ≤ its memory)
- csv:     calib eval big.csv --label-col label --format json
- npy:     calib eval x.npy y.npy --format json   (the same float64 values; the summary pass alone)
- parquet: calib eval big.parquet --scores 'logit_*' --labels label --format json (with pyarrow)

    python benchmarks/bench_csv.py                           # 10^6 × 10
    python benchmarks/bench_csv.py --rows 200000 --dir /tmp/bench --repeat 3

Not a test.
"""

import argparse
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fused import in_fresh_process, run_child  # noqa: E402


def write_data(directory: Path, n: int, k: int, seed: int = 0) -> dict:
    """The files (CSV, .npy, Parquet), written by a fresh process once (:func:`in_fresh_process`)."""
    return in_fresh_process(_write_data, directory, n, k, seed)


def _write_data(directory: Path, n: int, k: int, seed: int = 0) -> dict:
    paths = {"csv": directory / f"big_{n}x{k}.csv", "x": directory / f"x_{n}x{k}.npy", "y": directory / f"y_{n}x{k}.npy"}
    if not paths["csv"].exists():
        rng = np.random.default_rng(seed)
        labels = rng.integers(0, k, n)
        logits = np.round(rng.standard_normal((n, k)) * 2, 6)
        logits[np.arange(n), labels] += 3
        with open(paths["csv"], "w") as f:
            f.write("label," + ",".join(f"logit_{j}" for j in range(k)) + "\n")
            step = 100_000
            for start in range(0, n, step):
                block = np.column_stack([labels[start:start + step], logits[start:start + step]])
                np.savetxt(f, block, delimiter=",", fmt=["%d"] + ["%.6f"] * k)
        np.save(paths["x"], np.loadtxt(paths["csv"], delimiter=",", skiprows=1, usecols=range(1, k + 1)))
        np.save(paths["y"], labels)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        paths["parquet"] = directory / f"big_{n}x{k}.parquet"
        if not paths["parquet"].exists():
            x, y = np.load(paths["x"]), np.load(paths["y"])
            table = pa.table({"label": y, **{f"logit_{j}": x[:, j] for j in range(k)}})
            pq.write_table(table, paths["parquet"], row_group_size=1 << 17)
    except ImportError:
        pass
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs of each process")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="calib-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    paths = write_data(directory, args.rows, args.classes)
    calib = shutil.which("calib") or str(Path(sys.executable).with_name("calib"))
    env = dict(os.environ)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}, "
          f"python {platform.python_version()}; CSV {paths['csv'].stat().st_size / 1e6:.0f} MB, "
          f"{args.rows} × {args.classes} + label")
    runs = {
        "numpy.loadtxt": [sys.executable, "-c", f"import numpy as np; np.loadtxt({str(paths['csv'])!r}, delimiter=',', skiprows=1)"],
        "calib eval CSV": [calib, "eval", str(paths["csv"]), "--label-col", "label", "--format", "json"],
        "calib eval .npy (same values)": [calib, "eval", str(paths["x"]), str(paths["y"]), "--format", "json"],
    }
    if "parquet" in paths:
        runs["calib eval Parquet"] = [calib, "eval", str(paths["parquet"]), "--scores", "logit_*", "--labels", "label",
                                      "--format", "json"]
    print("| process | wall s | peak RSS MiB |")
    print("|---|---|---|")
    for name, cmd in runs.items():
        best = min((run_child(cmd, env)[:2] for _ in range(args.repeat)), key=lambda r: r[0])
        print(f"| {name} | {best[0]:.2f} | {best[1]:.0f} |", flush=True)


if __name__ == "__main__":
    main()
