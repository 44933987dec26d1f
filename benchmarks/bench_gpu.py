"""calib on a CUDA GPU: the issue-15 figure (10^8 × 10 top-label metrics against one read pass over the
device array) and the agreement with the float64 CPU result. Not a test; needs torch and a GPU.

    python benchmarks/bench_gpu.py                      # 10^8 × 10 float32 logits
    python benchmarks/bench_gpu.py --n 10000000 --k 100 --no-cpu
    python benchmarks/bench_gpu.py --file /tmp/figures   # also `calib eval FILE --device cuda` on a saved .npy

"One read pass" is ``x.sum()`` over the float32 device array (every byte read once, nothing written):
the floor for anything that looks at every logit. Timings are CUDA-event medians after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

import calibrate_cli as calib


def cuda_median(fn, repeat: int) -> float:
    """Median seconds of ``fn()`` over ``repeat`` runs after one warm-up (CUDA events)."""
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return float(np.median(times))


def wall_median(fn, repeat: int) -> float:
    import torch

    fn()
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def file_route(logits, labels, folder: str, figures: dict, repeat: int) -> dict:
    """Save the logits as .npy, then time the bare host-to-device copy of the memory-mapped file (page
    cache warm), evaluate(file, device='cuda') in this process (the first call compiles), and the whole
    `calib eval FILE --device cuda` process, with the compiled pass and with the eager one."""
    import os
    import subprocess
    import sys
    import torch

    os.makedirs(folder, exist_ok=True)
    x_path, y_path = os.path.join(folder, "logits.npy"), os.path.join(folder, "labels.npy")
    start = time.perf_counter()
    np.save(x_path, logits.cpu().numpy())
    np.save(y_path, labels.cpu().numpy())
    figures["file_gib"] = os.path.getsize(x_path) / 2**30
    print(f"saved {figures['file_gib']:.2f} GiB in {time.perf_counter() - start:.1f} s", flush=True)
    mapped = np.load(x_path, mmap_mode="r")
    np.asarray(mapped).sum(dtype=np.float32)  # the pages in the page cache, as after any earlier read

    def bare_copy():
        torch.from_numpy(np.asarray(mapped)).to("cuda")  # pageable: the driver stages it

    figures["file_h2d_copy_s"] = wall_median(bare_copy, repeat)
    print(f"bare host-to-device copy of the memory-mapped file: {figures['file_h2d_copy_s']:.3f} s "
          f"({figures['file_gib'] / figures['file_h2d_copy_s']:.1f} GiB/s)", flush=True)
    y_host = np.load(y_path)
    result = {}
    for compiled in ("1", "0"):
        os.environ["CALIB_TORCH_COMPILE"] = compiled
        times = []
        for _ in range(3):
            start = time.perf_counter()
            report = calib.evaluate(np.load(x_path, mmap_mode="r"), y_host, device="cuda")
            times.append(time.perf_counter() - start)
        key = "compiled" if compiled == "1" else "eager"
        figures[f"file_evaluate_{key}_s"] = times
        if compiled == "1":
            from calibrate_cli.engine import device_eval

            figures["compile_failure"] = device_eval.compile_failure()
        result = result or dict(report.metrics)
        print(f"evaluate(memory-mapped file, device='cuda'), {key}, default report: "
              f"{', '.join(f'{t:.3f}' for t in times)} s = {min(times) / figures['file_h2d_copy_s']:.2f}x the copy "
              f"(report.device {report.device})", flush=True)
    os.environ.pop("CALIB_TORCH_COMPILE", None)
    import shutil

    entry = [shutil.which("calib")] if shutil.which("calib") else [sys.executable, "-c",
                                                                  "from calibrate_cli.cli import main; main()"]
    calib_cmd = [*entry, "eval", x_path, y_path, "--device", "cuda", "--format", "json"]
    for label, compiled in (("compiled", "1"), ("eager", "0")):
        start = time.perf_counter()
        done = subprocess.run(calib_cmd, capture_output=True, text=True, env={**os.environ, "CALIB_TORCH_COMPILE": compiled})
        figures[f"file_cli_{label}_s"] = time.perf_counter() - start
        print(f"calib eval FILE --device cuda, whole process ({label} pass): {figures[f'file_cli_{label}_s']:.2f} s, "
              f"exit {done.returncode} {done.stderr.strip()[-300:]}", flush=True)
    return result


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-cpu", action="store_true", help="skip the float64 CPU reference")
    parser.add_argument("--host-path", action="store_true", help="also time evaluate(host arrays, device='cuda')")
    parser.add_argument("--selection", action="store_true", help="time AdaECE's order statistics alone")
    parser.add_argument("--file", metavar="DIR", help="save the logits there as .npy and time the file route: the "
                        "bare host-to-device copy, evaluate(memory-mapped file, device='cuda'), the whole calib eval")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    print(f"GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB; torch {torch.__version__}; "
          f"CPU: {platform.processor() or platform.machine()}, numpy {np.__version__}", flush=True)

    gen = torch.Generator(device="cuda").manual_seed(0)
    n, k = args.n, args.k
    labels = torch.randint(0, k, (n,), device="cuda", generator=gen)
    logits = torch.randn((n, k), device="cuda", generator=gen, dtype=torch.float32) * 2
    logits[torch.arange(n, device="cuda"), labels] += 3
    gib = logits.numel() * 4 / 2**30
    figures: dict = {"n": n, "k": k, "gpu": props.name, "torch": torch.__version__}

    read = cuda_median(lambda: logits.sum(), args.repeat)
    figures["read_pass_s"] = read
    print(f"one read pass (x.sum(), {gib:.2f} GiB float32): {read * 1e3:.2f} ms = {gib / read:.0f} GiB/s", flush=True)

    from calibrate_cli.engine.device_eval import DEVICE_METRICS
    from calibrate_cli.engine.sorting import order_statistics

    top_label = DEVICE_METRICS
    device_metrics = {}

    def on_device():
        device_metrics.update(calib.device_metrics(logits, labels, metrics=top_label))

    if hasattr(calib, "device_metrics"):
        t = wall_median(on_device, args.repeat)
        figures["device_top_label_s"] = t
        print(f"calib.device_metrics (top-label, on the device array): {t * 1e3:.2f} ms = {t / read:.1f}x the read "
              "pass", flush=True)

        t_ece = wall_median(lambda: calib.device_metrics(logits, labels, metrics=["ece", "nll", "brier", "accuracy"]),
                            args.repeat)
        figures["device_without_adaece_s"] = t_ece
        print(f"  of which without AdaECE (ECE, NLL, Brier, accuracy: the pass alone): {t_ece * 1e3:.2f} ms = "
              f"{t_ece / read:.1f}x", flush=True)

        if args.selection:
            from calibrate_cli.engine import device_eval, sorting

            conf = torch.softmax(logits.double(), dim=1).amax(dim=1)
            ranks = np.unique(np.linspace(0, n - 1, 32).astype(np.int64))
            default = sorting.SELECT_BUCKETS
            for bits in (16, 13, 11, 9):
                sorting.SELECT_BUCKETS = 1 << bits
                t_sel = wall_median(lambda: order_statistics(conf, ranks), args.repeat)
                figures[f"select_{bits}_bits_s"] = t_sel
                print(f"  order statistics of {n:,} confidences, 2^{bits} buckets: {t_sel * 1e3:.2f} ms", flush=True)
            sorting.SELECT_BUCKETS = default
            t_sort = wall_median(lambda: torch.sort(conf), args.repeat)
            print(f"  torch.sort of the same: {t_sort * 1e3:.2f} ms", flush=True)
            del conf

    if args.host_path:
        x_host = logits.cpu().numpy()
        y_host = labels.cpu().numpy()
        start = time.perf_counter()
        host_cuda = calib.evaluate(x_host, y_host, device="cuda", metrics=list(top_label)).metrics
        figures["evaluate_host_cuda_s"] = time.perf_counter() - start
        print(f"calib.evaluate(host arrays, device='cuda'), top-label: {figures['evaluate_host_cuda_s']:.2f} s",
              flush=True)
        if not device_metrics:
            device_metrics.update(host_cuda)

    file_metrics = {}
    if args.file:
        file_metrics = file_route(logits, labels, args.file, figures, args.repeat)

    if not args.no_cpu:
        x_host = logits.cpu().numpy()
        y_host = labels.cpu().numpy()
        start = time.perf_counter()
        cpu = calib.evaluate(x_host, y_host, metrics=list(top_label)).metrics
        figures["cpu_s"] = time.perf_counter() - start
        diffs = {m: abs(device_metrics[m] - cpu[m]) if cpu[m] is not None else 0.0 for m in top_label}
        figures["max_abs_diff"] = max(diffs.values())
        figures["cpu_metrics"] = {m: cpu[m] for m in top_label}
        print(f"CPU float64 evaluate (top-label): {figures['cpu_s']:.1f} s", flush=True)
        for m in top_label:
            print(f"  {m:15s} device {device_metrics[m]!r:24}  cpu {cpu[m]!r:24}  |diff| {diffs[m]:.2e}")
        print(f"largest difference: {figures['max_abs_diff']:.2e} (goal: 1e-9)")
        if file_metrics:
            start = time.perf_counter()
            cpu_all = calib.evaluate(x_host, y_host).metrics
            figures["cpu_default_report_s"] = time.perf_counter() - start
            rel = {m: abs(file_metrics[m] - v) / max(abs(v), 1e-300) for m, v in cpu_all.items()
                   if v is not None and file_metrics.get(m) is not None}
            figures["file_route_max_rel_diff"] = max(rel.values())
            figures["file_route_rel_diff"] = rel
            print(f"calib eval --device cuda (file) against the CPU's default report: largest relative difference "
                  f"{max(rel.values()):.2e} over {len(rel)} metrics (contract: 1e-12)", flush=True)
    figures["device_metrics"] = device_metrics
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
