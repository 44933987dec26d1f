"""``calib ood``'s FPR95, AUPR-in and AUPR-out through Click's CliRunner: JSON keys against
scikit-learn, the table's and CSV's columns, the values before a temperature, one sample per side."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from calibrate_cli.cli import cli
from naive_reference import softmax_rows

metrics = pytest.importorskip("sklearn.metrics")


def run(runner, *args):
    return runner.invoke(cli, [str(a) for a in args])


def sk(in_conf, out_conf):
    """FPR95, AUPR-in, AUPR-out of the max probability by scikit-learn (in = positive for the first two)."""
    y = np.r_[np.ones(len(in_conf)), np.zeros(len(out_conf))]
    s = np.r_[in_conf, out_conf]
    fpr, tpr, _ = metrics.roc_curve(y, s, drop_intermediate=False)
    return (fpr[np.argmax(tpr >= 0.95)], metrics.average_precision_score(y, s),
            metrics.average_precision_score(1 - y, -s))


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(3)
    inside = rng.normal(0, 1, (90, 4))
    inside[np.arange(90), rng.integers(0, 4, 90)] += 3.0
    outside = np.round(rng.normal(0, 1, (60, 4)), 1)
    np.save(tmp_path / "in.npy", inside)
    np.save(tmp_path / "out.npy", outside)
    return tmp_path, inside, outside


def test_json_keys_equal_sklearn(runner, files):
    folder, inside, outside = files
    r = run(runner, "ood", folder / "in.npy", folder / "out.npy", "-f", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    fpr95, aupr_in, aupr_out = sk(np.max(softmax_rows(inside), axis=1), np.max(softmax_rows(outside), axis=1))
    assert doc["fpr95_confidence"] == pytest.approx(fpr95, abs=1e-15)
    assert doc["aupr_in_confidence"] == pytest.approx(aupr_in, abs=1e-12)
    assert doc["aupr_out_confidence"] == pytest.approx(aupr_out, abs=1e-12)
    for key in ("fpr95_entropy", "aupr_in_entropy", "aupr_out_entropy"):
        assert 0.0 <= doc[key] <= 1.0
    # at a temperature: the reported values at T, and "before" holds them at T = 1
    t = run(runner, "ood", folder / "in.npy", folder / "out.npy", "--temperature", "2", "-f", "json")
    doc_t = json.loads(t.stdout)
    assert doc_t["before"]["aupr_in_confidence"] == doc["aupr_in_confidence"]
    assert doc_t["before"]["fpr95_entropy"] == doc["fpr95_entropy"]
    fpr95, aupr_in, aupr_out = sk(np.max(softmax_rows(inside / 2), axis=1), np.max(softmax_rows(outside / 2), axis=1))
    assert doc_t["aupr_out_confidence"] == pytest.approx(aupr_out, abs=1e-12)
    assert doc_t["fpr95_confidence"] == pytest.approx(fpr95, abs=1e-15)


def test_table_markdown_and_csv_columns(runner, files):
    folder, _, _ = files
    doc = json.loads(run(runner, "ood", folder / "in.npy", folder / "out.npy", "-f", "json").stdout)
    table = run(runner, "ood", folder / "in.npy", folder / "out.npy")
    assert table.exit_code == 0 and "FPR95" in table.stdout and "AUPR" in table.stdout
    assert f"{100 * doc['fpr95_entropy']:.2f} %" in table.stdout
    md = run(runner, "ood", folder / "in.npy", folder / "out.npy", "-f", "markdown").stdout
    assert "| score | AUROC | FPR95 | AUPR in | AUPR out |" in md
    assert f"{100 * doc['aupr_out_confidence']:.2f} %" in md
    rows = list(csv.DictReader(io.StringIO(run(runner, "ood", folder / "in.npy", folder / "out.npy", "-f", "csv").stdout)))
    for row in rows:
        for key in ("fpr95", "aupr_in", "aupr_out"):
            assert float(row[key]) == pytest.approx(doc[f"{key}_{row['score']}"], rel=1e-14)


def test_one_sample_per_side(runner, tmp_path):
    np.save(tmp_path / "a.npy", np.array([[2.0, 0.0, 0.0]]))
    np.save(tmp_path / "b.npy", np.array([[2.0, 0.0, 0.0]]))  # the same scores: a tie
    doc = json.loads(run(runner, "ood", tmp_path / "a.npy", tmp_path / "b.npy", "-f", "json").stdout)
    for name in ("entropy", "confidence"):
        assert doc[f"fpr95_{name}"] == 1.0  # the tie group of the threshold is accepted whole
        assert doc[f"aupr_in_{name}"] == 0.5 and doc[f"aupr_out_{name}"] == 0.5
        assert doc[f"auroc_{name}"] == 0.5
