"""Time ``calib plot`` on 10^6 × 10 logits (the issue's goal: seconds, not minutes).

    python benchmarks/bench_plot.py [--n 1000000] [--k 10] [--repeat 3]

Reports the wall time of each stage (load, compute the diagram, draw + save the PNG) and of the
whole command run through Click, for the uniform and quantile strategies.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from click.testing import CliRunner

    from calibrate_cli.cli import cli
    from calibrate_cli.data.io import load_labels, load_scores
    from calibrate_cli.plots.diagram import ReliabilityDiagram, reliability_figure, save_figure

    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(args.n, args.k)) * 3).astype(np.float32)
    labels = rng.integers(0, args.k, args.n)
    logits[np.arange(args.n), labels] += 2.0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        np.save(tmp / "logits.npy", logits)
        np.save(tmp / "labels.npy", labels)
        print(f"N = {args.n:,}, K = {args.k}, float32 logits; best of {args.repeat}")

        t_load = best_of(args.repeat, lambda: (load_scores(tmp / "logits.npy"), load_labels(tmp / "labels.npy")))
        print(f"  load .npy                      {t_load:7.3f} s")
        for strategy in ("uniform", "quantile"):
            t_compute = best_of(
                args.repeat, lambda: ReliabilityDiagram.from_predictions(logits, labels, strategy=strategy)
            )
            d = ReliabilityDiagram.from_predictions(logits, labels, strategy=strategy)
            t_draw = best_of(
                args.repeat, lambda: save_figure(reliability_figure(d), tmp / "fig.png", force=True)
            )
            print(f"  {strategy:8s} compute diagram        {t_compute:7.3f} s")
            print(f"  {strategy:8s} draw + save PNG        {t_draw:7.3f} s")

        runner = CliRunner()
        args_cli = ["plot", str(tmp / "logits.npy"), str(tmp / "labels.npy"), "-o", str(tmp / "cli.png"), "--force"]

        def run_cli():
            result = runner.invoke(cli, args_cli)
            assert result.exit_code == 0, result.output

        t_cli = best_of(args.repeat, run_cli)
        print(f"  calib plot (whole command)     {t_cli:7.3f} s")
        args_cli[-1:] = ["--temperature", "1.5", "--force"]
        print(f"  calib plot --temperature 1.5   {best_of(args.repeat, run_cli):7.3f} s")
        args_cli[-3:] = ["--classwise", "--force"]
        print(f"  calib plot --classwise         {best_of(args.repeat, run_cli):7.3f} s")


if __name__ == "__main__":
    main()
