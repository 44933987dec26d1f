"""Whole-process `calib eval --format json`: numpy engine vs the fused engine (the C extension) vs a bare numpy pass.

Writes float32 logits and int64 labels as .npy files, then for each size runs, as separate processes,
timed with os.wait4 (wall time and the child's own peak RSS):

- bare:  python -c "np.load(x, mmap_mode='r').sum(dtype=float64)"  (one read of the file)
- numpy: CALIB_ENGINE=numpy calib eval x.npy y.npy --format json
- fused: CALIB_ENGINE=fused calib eval x.npy y.npy --format json

    python benchmarks/bench_fused.py                         # 10^6 × 10, 10^6 × 100, 10^7 × 10
    python benchmarks/bench_fused.py --sizes 1000000x10 --dir /tmp/bench --repeat 3

Not a test.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def in_fresh_process(function, *args):
    """``function(*args)`` run in a new (spawned) Python process: the data a benchmark writes never
    grows this process, whose peak RSS every child it starts would inherit (Linux keeps a process's
    peak across exec, and ``os.wait4`` reports the larger of the two)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)


def write_data(directory: Path, n: int, k: int, seed: int = 0) -> tuple[Path, Path]:
    """(x.npy, y.npy) of N × K float32 logits and their labels, written by a fresh process once."""
    return in_fresh_process(_write_data, directory, n, k, seed)


def _write_data(directory: Path, n: int, k: int, seed: int = 0) -> tuple[Path, Path]:
    x, y = directory / f"x_{n}x{k}.npy", directory / f"y_{n}x{k}.npy"
    if not x.exists():
        rng = np.random.default_rng(seed)
        labels = rng.integers(0, k, n)
        logits = np.lib.format.open_memmap(x, mode="w+", dtype=np.float32, shape=(n, k))
        step = max(1, (1 << 22) // k)
        for start in range(0, n, step):
            rows = slice(start, min(n, start + step))
            block = rng.standard_normal((rows.stop - start, k), dtype=np.float32) * 2
            block[np.arange(rows.stop - start), labels[rows]] += 3
            logits[rows] = block
        logits.flush()
        del logits
        np.save(y, labels)
    return x, y


def run_child(cmd: list[str], env: dict) -> tuple[float, float, str]:
    """(wall seconds, the child's own peak RSS in MiB from wait4, stdout) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    return wall, usage.ru_maxrss / 1024, out.decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["1000000x10", "1000000x100", "10000000x10"])
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs of each process")
    parser.add_argument("--dir", type=Path, default=None, help="where the .npy files go (default: a temp dir)")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="calib-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    calib = shutil.which("calib") or str(Path(sys.executable).with_name("calib"))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}, "
          f"python {platform.python_version()}, CALIB_THREADS={os.environ.get('CALIB_THREADS', 'default')}")
    print("| N × K | file MiB | bare mmap+sum s / MiB | numpy engine s / MiB | fused engine s / MiB | ratio fused/bare |")
    print("|---|---|---|---|---|---|")
    for size in args.sizes:
        n, k = (int(v) for v in size.lower().split("x"))
        x, y = write_data(directory, n, k)
        bare_cmd = [sys.executable, "-c", f"import numpy as np; print(np.load({str(x)!r}, mmap_mode='r').sum(dtype=np.float64))"]
        eval_cmd = [calib, "eval", str(x), str(y), "--format", "json"]
        rows, values = {}, {}
        for name, cmd, engine in (("bare", bare_cmd, None), ("numpy", eval_cmd, "numpy"), ("fused", eval_cmd, "fused")):
            env = dict(os.environ)
            if engine:
                env["CALIB_ENGINE"] = engine
            best = min((run_child(cmd, env) for _ in range(args.repeat)), key=lambda r: r[0])
            rows[name] = best
            if engine:
                values[name] = json.loads(best[2])["metrics"]
        for key in values["numpy"]:
            a, b = values["numpy"][key], values["fused"][key]
            if a != b and not (a is not None and b is not None and abs(a - b) <= 1e-12):
                print(f"  warning: {key} differs: numpy {a!r}, fused {b!r}")
        mib = x.stat().st_size / 2**20
        cells = " | ".join(f"{rows[name][0]:.2f} / {rows[name][1]:.0f}" for name in ("bare", "numpy", "fused"))
        print(f"| {n:.0e} × {k} | {mib:.0f} | {cells} | {rows['fused'][0] / rows['bare'][0]:.1f} |", flush=True)
    if args.dir is None:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
