"""calib and its peers side by side on the same arrays: time, peak memory, deviation from the exact ECE.

For each size N × K, float32 logits and int64 labels are written once as .npy files; then every
peer runs in its own process (fresh memory, so peak RSS is its own), loads the same files, and
times only its computation in process (min and spread over --repeat runs):

- calib (all)    ``calib.evaluate(x, y)``: every metric of `calib eval`, float64
- calib (ECE)    ``calib.ece(x, y)``
- torchmetrics   float32 softmax + ``MulticlassCalibrationError(n_bins=15, norm="l1")`` (CPU)
- netcal         float64 softmax + ``netcal.metrics.ECE(bins=15).measure`` (if installed)
- uncertainty-calibration  float64 softmax + ``calibration.get_ece(num_bins=15)`` (top-label)
- scikit-learn   float64 softmax, ``calibration_curve(correct, conf, n_bins=15)`` weighted by
                 ``np.histogram`` counts (its bins are [b/M, (b+1)/M): conventions differ at the edges)
- numpy ECE      float64 softmax, max, argmax, ``np.bincount`` per row chunk: the lower bound of a
                 plain vectorised implementation
- numpy sum      one read of the memory-mapped file (``x.sum(dtype=float64)``): the read limit

"exact" is the float64 ECE with calib's conventions (validated against naive loops in tests/), from
the calib (all) run; each peer's |value − exact| is reported. Then the whole-process comparison of
issue 15: ``calib eval x.npy y.npy --format json`` vs a bare numpy process that mmaps the file and
sums it, vs a torchmetrics process (load, softmax, ECE), wall time and peak RSS (wait4), repeated.

    python benchmarks/bench_peers.py                       # the sizes of issue 15
    python benchmarks/bench_peers.py --sizes 100000x10 --repeat 3 --dir /tmp/bench

Not a test. The machine's load is printed (os.getloadavg) before and after each size. The peers are
benchmark-only dependencies, not calib's (a peer that is not installed shows its import error):

    pip install torch==2.13.0 torchmetrics==1.9.0 scikit-learn uncertainty-calibration==0.1.4
    pip install --no-deps netcal==1.4.0      # its other dependencies (scipy, matplotlib, ...) as installed
"""

from __future__ import annotations

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

sys.path.insert(0, str(Path(__file__).parent))
from bench_fused import write_data  # noqa: E402

PEER_CODE = r'''
import json, sys, time
import numpy as np
peer, xp, yp, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
x = np.load(xp, mmap_mode="r")
y = np.load(yp)
n, k = x.shape
M = 15

def softmax64(rows):
    z = np.asarray(rows, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z

def probs64():
    out = np.empty((n, k))
    step = max(1, (1 << 20) // k)
    for s in range(0, n, step):
        out[s:s + step] = softmax64(x[s:s + step])
    return out

def run():
    if peer == "calib_all":
        import calibrate_cli as calib
        return calib.evaluate(x, y).metrics["ece"]
    if peer == "calib_ece":
        import calibrate_cli as calib
        return calib.ece(x, y)
    if peer == "torchmetrics":
        import torch
        from torchmetrics.classification import MulticlassCalibrationError
        p = torch.softmax(torch.from_numpy(np.ascontiguousarray(x)), dim=1)
        metric = MulticlassCalibrationError(num_classes=k, n_bins=M, norm="l1")
        return float(metric(p, torch.from_numpy(y)))
    if peer == "netcal":
        from netcal.metrics import ECE
        return float(ECE(bins=M).measure(probs64(), y))
    if peer == "uncertainty_calibration":
        import calibration
        return float(calibration.get_ece(probs64(), y, num_bins=M))
    if peer == "sklearn":
        from sklearn.calibration import calibration_curve
        p = probs64()
        conf, correct = p.max(axis=1), (p.argmax(axis=1) == y)
        del p
        prob_true, prob_pred = calibration_curve(correct, conf, n_bins=M, strategy="uniform")
        counts = np.histogram(conf, bins=np.linspace(0, 1, M + 1))[0]
        counts = counts[counts > 0]
        return float(np.sum(np.abs(prob_true - prob_pred) * counts) / n)
    if peer == "numpy_ece":
        count, s_conf, s_corr = np.zeros(M), np.zeros(M), np.zeros(M)
        step = max(1, (1 << 20) // k)
        for s in range(0, n, step):
            p = softmax64(x[s:s + step])
            conf = p.max(axis=1)
            correct = (p.argmax(axis=1) == y[s:s + step])
            b = np.clip(np.ceil(conf * M).astype(np.int64) - 1, 0, M - 1)
            count += np.bincount(b, minlength=M)
            s_conf += np.bincount(b, weights=conf, minlength=M)
            s_corr += np.bincount(b, weights=correct, minlength=M)
        return float(np.abs(s_conf - s_corr).sum() / n)
    if peer == "numpy_sum":
        return float(x.sum(dtype=np.float64))
    raise SystemExit("unknown peer " + peer)

# imports before the clock starts (torch alone takes seconds)
if peer.startswith("calib"):
    import calibrate_cli
elif peer == "torchmetrics":
    import torch, torchmetrics.classification
elif peer == "netcal":
    import netcal.metrics
elif peer == "uncertainty_calibration":
    import calibration
elif peer == "sklearn":
    import sklearn.calibration
times = []
for _ in range(repeat):
    t = time.perf_counter()
    value = run()
    times.append(time.perf_counter() - t)
peak = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
print(json.dumps({"times": times, "value": value, "peak": peak}))
'''

PEERS = ["calib_all", "calib_ece", "torchmetrics", "netcal", "uncertainty_calibration", "sklearn", "numpy_ece",
         "numpy_sum"]
LABELS = {"calib_all": "calib (all metrics)", "calib_ece": "calib (ECE)", "torchmetrics": "torchmetrics",
          "netcal": "netcal", "uncertainty_calibration": "uncertainty-calibration", "sklearn": "scikit-learn",
          "numpy_ece": "numpy ECE", "numpy_sum": "numpy sum (read)"}


def run_peer(peer: str, x: Path, y: Path, repeat: int, timeout: float) -> dict | None:
    try:
        out = subprocess.run([sys.executable, "-c", PEER_CODE, peer, str(x), str(y), str(repeat)],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["failed"])[-1]
        return {"error": last[:80]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_child(cmd: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB from wait4, stdout) of one process (the driver holds no data, so
    the RSS it passes on at fork is small)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, out.decode()


def spread(times: list[float]) -> str:
    return f"{min(times):.3g} (+{max(times) - min(times):.2g})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["10000x10", "100000x10", "1000000x10", "10000000x10",
                                                        "1000000x100", "100000x1000"])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each peer (min and spread reported)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a peer may take (all its runs)")
    parser.add_argument("--peers", nargs="+", default=PEERS, choices=PEERS)
    parser.add_argument("--whole-process", nargs="*", default=["10000000x10"], help="sizes for the process table")
    parser.add_argument("--dir", type=Path, default=None, help="where the .npy files go (default: a temp dir)")
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="calib-peers-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, numpy {np.__version__}, "
          f"python {platform.python_version()}, load {os.getloadavg()[0]:.1f}")
    print("\nIn process (compute only, after loading), seconds: min (+spread) over runs; peak RSS MiB; |ECE − exact|\n")
    print("| N × K | " + " | ".join(LABELS[p] for p in args.peers) + " |")
    print("|---|" + "---|" * len(args.peers))
    for size in args.sizes:
        n, k = (int(v) for v in size.lower().split("x"))
        x, y = write_data(directory, n, k)
        results = {p: run_peer(p, x, y, args.repeat, args.timeout) for p in args.peers}
        exact = (results.get("calib_all") or {}).get("value")
        cells = []
        for p in args.peers:
            r = results[p]
            if "error" in r:
                cells.append(f"— ({r['error']})")
                continue
            dev = "" if exact is None or p == "numpy_sum" else f", Δ {abs(r['value'] - exact):.1e}"
            cells.append(f"{spread(r['times'])} s, {r['peak'] / 2**20:.0f} MiB{dev}")
        print(f"| {n:.0e} × {k} | " + " | ".join(cells) + f" |  (load {os.getloadavg()[0]:.1f})", flush=True)
    calib = shutil.which("calib") or str(Path(sys.executable).with_name("calib"))
    if args.whole_process:
        # the package's bytecode compiled first, as an installed package has it (with
        # PYTHONDONTWRITEBYTECODE set, an editable checkout recompiles its changed sources in every process)
        import compileall

        import calibrate_cli

        compileall.compile_dir(Path(calibrate_cli.__file__).parent, quiet=1)
        print("\nWhole process (wall s min (+spread) / peak RSS MiB max over runs):\n")
        print("| N × K | file MiB | numpy mmap+sum | calib eval --format json | torchmetrics process | calib / numpy |"
              " torchmetrics / calib |")
        print("|---|---|---|---|---|---|---|")
    for size in args.whole_process:
        n, k = (int(v) for v in size.lower().split("x"))
        x, y = write_data(directory, n, k)
        bare = [sys.executable, "-c", f"import numpy as np; print(np.load({str(x)!r}, mmap_mode='r').sum(dtype=np.float64))"]
        tm = [sys.executable, "-c", "import sys, numpy as np, torch; from torchmetrics.classification import "
              "MulticlassCalibrationError as E; x = torch.from_numpy(np.load(sys.argv[1])); "
              "y = torch.from_numpy(np.load(sys.argv[2])); "
              "print(float(E(num_classes=x.shape[1], n_bins=15)(torch.softmax(x, 1), y)))", str(x), str(y)]
        ev = [calib, "eval", str(x), str(y), "--format", "json"]
        runs = {"bare": [], "calib": [], "tm": []}
        for _ in range(args.repeat):  # interleaved, so load changes hit every command alike
            for name, cmd in (("bare", bare), ("calib", ev), ("tm", tm)):
                runs[name].append(run_child(cmd))
        ece = json.loads(runs["calib"][0][2])["metrics"]["ece"]
        best = {name: min(r[0] for r in rs) for name, rs in runs.items()}
        cell = {name: f"{spread([r[0] for r in rs])} / {max(r[1] for r in rs):.0f}" for name, rs in runs.items()}
        print(f"| {n:.0e} × {k} | {x.stat().st_size / 2**20:.0f} | {cell['bare']} | {cell['calib']} | {cell['tm']} | "
              f"{best['calib'] / best['bare']:.1f} | {best['tm'] / best['calib']:.1f} |  (ECE {ece!r}, "
              f"load {os.getloadavg()[0]:.1f})", flush=True)
    if args.dir is None:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
