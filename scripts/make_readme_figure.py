"""Regenerate the README's reliability diagram from the bundled sample data.

    python scripts/make_readme_figure.py                       # the defaults below
    python scripts/make_readme_figure.py LOGITS LABELS -o docs/images/reliability_sample.png

Overwrites the output (it is a generated file). Same numbers as
``calib plot sample_data/test_logits.npy sample_data/test_labels.npy -o ... --force``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LOGITS = ROOT / "sample_data" / "test_logits.npy"
DEFAULT_LABELS = ROOT / "sample_data" / "test_labels.npy"
DEFAULT_OUTPUT = ROOT / "docs" / "images" / "reliability_sample.png"


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logits", nargs="?", default=str(DEFAULT_LOGITS))
    parser.add_argument("labels", nargs="?", default=str(DEFAULT_LABELS))
    parser.add_argument("-o", "--output", default=str(DEFAULT_OUTPUT))
    parser.add_argument("--title", default="Sample model (sample_data/test_*.npy)")
    parser.add_argument("--dpi", type=int, default=110, help="110 keeps the PNG small and sharp on GitHub")
    args = parser.parse_args(argv)

    from calibrate_cli.data.io import load_labels, load_scores
    from calibrate_cli.plots.diagram import ReliabilityDiagram, reliability_figure, save_figure

    logits, _ = load_scores(args.logits)
    labels = load_labels(args.labels)
    diagram = ReliabilityDiagram.from_predictions(
        logits, labels, label=args.title, scores_name=args.logits, labels_name=args.labels
    )
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    save_figure(reliability_figure(diagram), output, dpi=args.dpi, force=True)
    print(f"{output}: ECE {100 * diagram.ece:.2f}%, N = {diagram.n}")
    return output


if __name__ == "__main__":
    main()
