"""The input-format registry: a new format is one loader and one entry (docs/contributing.md's example)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import calibrate_cli.data.io as io
from calibrate_cli.cli import cli

ROOT = Path(__file__).resolve().parents[1]


def test_every_suffix_loads_through_the_registry():
    assert io.SUFFIXES == tuple(io.INPUT_FORMATS)
    assert {s for s, f in io.INPUT_FORMATS.items() if f.keyed} == {
        ".npz", ".pt", ".pth", ".csv", ".parquet", ".arrow", ".feather", ".safetensors", ".h5", ".hdf5", ".zarr"
    }  # .csv: file.csv:COLS, as tables (issue #33)


def _walkthrough_code() -> str:
    section = (ROOT / "docs" / "contributing.md").read_text().split("## Adding an input format", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_the_documented_format_works_in_every_command(runner, tmp_path, monkeypatch):
    """Run the docs' loader as written (in io's namespace) and use it through the CLI."""
    monkeypatch.setattr(io, "INPUT_FORMATS", dict(io.INPUT_FORMATS))  # the registry entry is undone after
    exec(_walkthrough_code(), vars(io))
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 60)
    logits = rng.normal(size=(60, 3))
    np.savetxt(tmp_path / "z.tsv", logits, delimiter="\t", fmt="%.17g")
    np.savetxt(tmp_path / "y.tsv", labels, fmt="%d")
    np.save(tmp_path / "z.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    got = runner.invoke(cli, ["eval", str(tmp_path / "z.tsv"), str(tmp_path / "y.tsv"), "-f", "json"])
    want = runner.invoke(cli, ["eval", str(tmp_path / "z.npy"), str(tmp_path / "y.npy"), "-f", "json"])
    assert got.exit_code == 0, got.stderr
    # the TSV's values round-trip exactly (%.17g) and are evaluated whole, as the .npy's: the same path
    assert json.loads(got.stdout)["metrics"] == json.loads(want.stdout)["metrics"]
    fit = runner.invoke(cli, ["temperature", str(tmp_path / "z.tsv"), str(tmp_path / "y.tsv"), "-f", "json"])
    assert fit.exit_code == 0, fit.stderr
    (tmp_path / "bad.tsv").write_text("1\tx\t3\n")
    bad = runner.invoke(cli, ["eval", str(tmp_path / "bad.tsv"), str(tmp_path / "y.tsv")])
    assert bad.exit_code == 2 and "bad.tsv: not a table of numbers" in bad.stderr and "Traceback" not in bad.stderr


def test_an_unknown_suffix_lists_the_registered_ones(runner, tmp_path):
    (tmp_path / "z.tsv").write_text("1\t2\n")
    r = runner.invoke(cli, ["eval", str(tmp_path / "z.tsv"), str(tmp_path / "z.tsv")])
    assert r.exit_code == 2 and ".npy, .npz, .pt, .pth, .csv" in r.stderr
