"""calib on LLM-sized outputs (issue 35): ``calib eval`` as a whole process against a plain numpy float64
pass and torchmetrics' ``MulticlassCalibrationError``, on N × K logits stored as float32 and float16
``.npy`` and bfloat16 ``.safetensors``: wall time and peak resident memory of each process, and the ECE
each gives. Not a test.

    python benchmarks/bench_llm.py                           # 3000 × 128256 (a Llama-3 vocabulary)
    python benchmarks/bench_llm.py --sizes 300x32000 --device cpu
    python benchmarks/bench_llm.py --formats bf16 --tools "calib eval"    # bfloat16 safetensors, calib only
    python benchmarks/bench_llm.py --sizes 3000x128256 --device cuda   # calib and torchmetrics on the GPU

Each measurement is one fresh process (so peak RSS is that run's, imports included), timed from start
to exit; peak anonymous memory (RssAnon) apart from the mapped file's pages; calib's time also as a
multiple of the bare read of the same file (every value summed once from a memory map). torchmetrics, when it is not installed, is reported with its import error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

#: runs ARGV as a child and prints {"seconds", "peak_rss_mb", "peak_anon_mb", "rc", "stdout", "stderr"}: the
#: child's own peak RSS (file pages of a memory-mapped input included) and its peak anonymous memory
#: (RssAnon of /proc/PID/status, polled every 10 ms: the memory calib allocates, not the file's pages)
_RUNNER = textwrap.dedent("""
    import json, resource, subprocess, sys, tempfile, time
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # no pipe to fill
    start = time.perf_counter()
    child = subprocess.Popen(sys.argv[1:], stdout=out, stderr=err, text=True)
    anon = 0
    while child.poll() is None:
        try:
            with open(f"/proc/{child.pid}/status") as status:
                anon = max([anon] + [int(line.split()[1]) for line in status if line.startswith("RssAnon:")])
        except OSError:
            pass
        time.sleep(0.01)
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    out.seek(0), err.seek(0)
    print(json.dumps({"seconds": seconds, "peak_rss_mb": rss, "peak_anon_mb": anon / 1024, "rc": child.returncode,
                      "stdout": out.read(), "stderr": err.read()[-600:]}))
""")

#: the bare read of the scores: every value of the file summed once, in row chunks from a memory map
#: (bfloat16 and float16 as their 16-bit patterns: the read alone, no float arithmetic); argv: path, format
_BARE_READ = textwrap.dedent("""
    import json, sys
    import numpy as np
    path, fmt = sys.argv[1:3]
    if fmt == "bf16":
        header_len = int.from_bytes(open(path, "rb").read(8), "little")
        header = json.loads(open(path, "rb").read(8 + header_len)[8:])
        start, stop = header["logits"]["data_offsets"]
        n, k = header["logits"]["shape"]
        x = np.memmap(path, dtype=np.uint16, mode="r", offset=8 + header_len + start, shape=(n, k))
    else:
        x = np.load(path, mmap_mode="r")
        x = x.view(np.uint16) if x.dtype == np.float16 else x
    step = max(1, (1 << 22) // x.shape[1])
    total = sum(float(x[a:a + step].sum(dtype=np.float64 if x.dtype.kind == "f" else np.uint64))
                for a in range(0, x.shape[0], step))
    print(json.dumps({"sum": total}))
""")

#: a plain float64 numpy pass over row chunks: softmax max, argmax (lowest index on ties), ECE over 15
#: equal-width bins (b/M, (b+1)/M]; argv: scores path, labels path, format
_NUMPY_PASS = textwrap.dedent("""
    import json, sys
    import numpy as np
    path, labels_path, fmt = sys.argv[1:4]
    labels = np.load(labels_path)
    if fmt == "bf16":
        header_len = int.from_bytes(open(path, "rb").read(8), "little")
        header = json.loads(open(path, "rb").read(8 + header_len)[8:])
        start, stop = header["logits"]["data_offsets"]
        n, k = header["logits"]["shape"]
        raw = np.memmap(path, dtype=np.uint16, mode="r", offset=8 + header_len + start, shape=(n, k))
        rows = lambda a, b: (raw[a:b].astype(np.uint32) << 16).view(np.float32)
    else:
        x = np.load(path, mmap_mode="r")
        n, k = x.shape
        rows = lambda a, b: x[a:b]
    m = 15
    count, s_conf, s_corr = np.zeros(m), np.zeros(m), np.zeros(m)
    step = max(1, (1 << 22) // k)
    for a in range(0, n, step):
        z = rows(a, min(n, a + step)).astype(np.float64)
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        conf = 1.0 / e.sum(axis=1)            # max softmax = e^0 / sum
        pred = z.argmax(axis=1)
        b = np.clip(np.ceil(conf * m).astype(int) - 1, 0, m - 1)
        np.add.at(count, b, 1)
        np.add.at(s_conf, b, conf)
        np.add.at(s_corr, b, pred == labels[a:a + z.shape[0]])
    print(json.dumps({"ece": float(np.abs(s_corr - s_conf).sum() / n)}))
""")

#: torchmetrics' top-label ECE (15 bins, l1) over the whole tensor; argv: scores, labels, format, device
_TORCHMETRICS = textwrap.dedent("""
    import json, sys
    import numpy as np
    import torch
    from torchmetrics.functional.classification import multiclass_calibration_error
    path, labels_path, fmt, device = sys.argv[1:5]
    if fmt == "bf16":
        from safetensors.torch import load_file
        x = load_file(path)["logits"]
    else:
        x = torch.from_numpy(np.load(path))
    y = torch.from_numpy(np.load(labels_path)).to(device)
    x = x.to(device)
    probs = torch.softmax(x.float(), dim=1)
    ece = multiclass_calibration_error(probs, y, num_classes=x.shape[1], n_bins=15, norm="l1")
    print(json.dumps({"ece": float(ece)}))
""")


def write_inputs(folder: Path, n: int, k: int, seed: int = 0) -> dict[str, tuple[str, str]]:
    """float32 / float16 .npy and bfloat16 .safetensors logits (and int64 labels) of an N × K model
    that is right ~60 % of the time; {format: (scores argument, labels path)}."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = np.empty((n, k), dtype=np.float32)
    for a in range(0, n, 256):  # in row blocks: bounded float64 temporaries
        b = min(n, a + 256)
        block = rng.standard_normal((b - a, k), dtype=np.float32) * 2.0
        hit = rng.uniform(size=b - a) < 0.6
        block[np.arange(b - a), np.where(hit, labels[a:b], rng.integers(0, k, b - a))] += 12.0
        logits[a:b] = block
    labels_path = folder / "labels.npy"
    np.save(labels_path, labels)
    np.save(folder / "logits_f32.npy", logits)
    np.save(folder / "logits_f16.npy", logits.astype(np.float16))
    bf16 = (logits.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bfloat16 (the high half)
    header = {"logits": {"dtype": "BF16", "shape": [n, k], "data_offsets": [0, bf16.nbytes]},
              "labels": {"dtype": "I64", "shape": [n], "data_offsets": [bf16.nbytes, bf16.nbytes + labels.nbytes]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path = folder / "logits_bf16.safetensors"
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        f.write(bf16.tobytes())
        f.write(labels.astype(np.int64).tobytes())
    return {"float32": (str(folder / "logits_f32.npy"), str(labels_path)),
            "float16": (str(folder / "logits_f16.npy"), str(labels_path)),
            "bf16": (f"{path}:logits", str(labels_path))}


def measure(argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-c", _RUNNER, *argv], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def calib_argv(scores: str, labels: str, device: str) -> list[str]:
    calib = [sys.executable, "-c", "import sys; from calibrate_cli.cli import cli; sys.exit(cli())"]
    return [*calib, "eval", scores, labels, "--format", "json", *(["--device", device] if device != "cpu" else [])]


def run_size(n: int, k: int, device: str, folder: Path, formats=None, tools=None) -> list[dict]:
    inputs = write_inputs(folder, n, k)
    rows = []
    for fmt, (scores, labels) in inputs.items():
        if formats and fmt not in formats:
            continue
        path = scores.split(":")[0] if fmt == "bf16" else scores
        bare = None
        for tool, argv in (
            ("bare read", [sys.executable, "-c", _BARE_READ, path, fmt]),
            ("calib eval", calib_argv(scores, labels, device)),
            ("numpy float64 pass", [sys.executable, "-c", _NUMPY_PASS, path, labels, fmt]),
            ("torchmetrics", [sys.executable, "-c", _TORCHMETRICS, path, labels, fmt,
                              "cuda" if device in ("cuda", "auto") and _has_cuda() else "cpu"]),
        ):
            if tools and tool not in tools and tool != "bare read":  # the bare read: calib's yardstick
                continue
            got = measure(argv)
            row = {"n": n, "k": k, "format": fmt, "tool": tool, "seconds": round(got["seconds"], 3),
                   "peak_rss_mb": round(got["peak_rss_mb"], 1), "peak_anon_mb": round(got["peak_anon_mb"], 1),
                   "rc": got["rc"]}
            if got["rc"] == 0:
                doc = json.loads(got["stdout"])
                if tool == "bare read":
                    bare = row["seconds"]
                else:
                    row["ece"] = doc["metrics"]["ece"] if "metrics" in doc else doc["ece"]
                    row["x_bare"] = round(row["seconds"] / bare, 2) if bare else None
            else:  # a failed run's time and memory measure nothing worth comparing
                lines = [line for line in got["stderr"].splitlines() if line.strip()]
                row.update(seconds=None, peak_rss_mb=None, error=lines[-1] if lines else f"exit {got['rc']}")
            rows.append(row)
            print(_line(row), flush=True)
    return rows


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _line(row: dict) -> str:
    if row["rc"] != 0:
        return f"{row['n']:>6} × {row['k']:<7} {row['format']:<8} {row['tool']:<20} {'—':>10} {'—':>12}   {row['error']}"
    line = (f"{row['n']:>6} × {row['k']:<7} {row['format']:<8} {row['tool']:<20} {row['seconds']:>8.2f} s "
            f"{row['peak_rss_mb']:>9.0f} MB {row['peak_anon_mb']:>9.0f} MB")
    if "ece" in row:
        line += f"   ECE {row['ece']:.6f}" + (f"   {row['x_bare']:.1f}× the bare read" if row.get("x_bare") else "")
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="3000x128256", help="comma-separated NxK (default 3000x128256)")
    parser.add_argument("--device", default="auto", choices=["cpu", "cuda", "auto"],
                        help="where calib's pass and torchmetrics run (auto: cuda when there is one)")
    parser.add_argument("--dir", default=None, help="folder for the input files (default: a temporary one)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    parser.add_argument("--formats", default=None, help="comma-separated formats to run (float32,float16,bf16; default all)")
    parser.add_argument("--tools", default=None,
                        help="comma-separated tools besides the bare read ('calib eval', 'numpy float64 pass', "
                             "torchmetrics; default all)")
    args = parser.parse_args()
    device = args.device if args.device != "auto" else ("cuda" if _has_cuda() else "cpu")
    print(f"# {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}, device {device}")
    print(f"{'N':>6}   {'K':<7} {'format':<8} {'tool':<20} {'wall':>10} {'peak RSS':>12} {'peak anon':>12}")
    rows = []
    for size in args.sizes.split(","):
        n, k = (int(v) for v in size.lower().split("x"))
        with tempfile.TemporaryDirectory(dir=args.dir) as folder:
            rows += run_size(n, k, device, Path(folder), formats=args.formats and args.formats.split(","),
                             tools=args.tools and args.tools.split(","))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
