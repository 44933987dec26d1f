"""Whole-process `calib eval` of a large Parquet file: peak memory against the table's decoded size.

Writes (in a child process, so that this process stays small: a child's peak RSS starts from its
parent's) a Parquet file of N × K float64 logits plus an int64 label column, in row groups of 2^17
rows, then runs `calib eval big.parquet --scores 'logit_*' --labels label --format json`, timed with
os.wait4 (wall time and the child's own peak RSS), and prints the decoded size N·(8K + 8).

    python benchmarks/bench_tables.py                       # 10^7 × 10 (~0.9 GB decoded)
    python benchmarks/bench_tables.py --rows 1000000 --dir /tmp/bench

Not a test.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fused import run_child  # noqa: E402

WRITE = """
import sys, numpy as np, pyarrow as pa, pyarrow.parquet as pq
path, n, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
schema = pa.schema([("label", pa.int64())] + [(f"logit_{j}", pa.float64()) for j in range(k)])
with pq.ParquetWriter(path, schema) as writer:
    for start in range(0, n, 1 << 17):
        rows = min(n, start + (1 << 17)) - start
        y = rng.integers(0, k, rows)
        x = rng.standard_normal((rows, k)) * 2
        x[np.arange(rows), y] += 3
        writer.write_table(pa.table({"label": y, **{f"logit_{j}": x[:, j] for j in range(k)}}, schema=schema))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="calib-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"big_{args.rows}x{args.classes}.parquet"
    if not path.exists():
        subprocess.run([sys.executable, "-c", WRITE, str(path), str(args.rows), str(args.classes)], check=True)
    calib = shutil.which("calib") or str(Path(sys.executable).with_name("calib"))
    decoded = args.rows * (8 * args.classes + 8) / 2**20
    wall, peak, _ = run_child([calib, "eval", str(path), "--scores", "logit_*", "--labels", "label", "--format", "json"], None)
    print(f"| {args.rows} × {args.classes} Parquet | file {path.stat().st_size / 2**20:.0f} MiB | decoded {decoded:.0f} MiB "
          f"| calib eval {wall:.1f} s, peak {peak:.0f} MiB |")


if __name__ == "__main__":
    main()
