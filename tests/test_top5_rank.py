"""Top-5 accuracy ranks the logits themselves (issue 32, item 6): one logit that dwarfs the others
(3e17 in float32, ±1e308, a CSV cell 1e308), or tiny logits beside a large maximum, must not make the
others tie, as they do after the rounding subtraction z = x − max. Every engine (numpy, the C
extension, torch) against a plain Python loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrate_cli.engine import kernels
from calibrate_cli.cli import cli
from calibrate_cli.data.predictions import as_predictions
from calibrate_cli.engine.summary import summarize


def loop_top5(logits, labels):
    """Share of rows whose label is among the 5 largest logits (ties: the lower index first), by Python
    float comparisons of the logits as given."""
    hits = 0
    for row, y in zip(logits.tolist(), labels.tolist()):
        rank = sum(1 for j, v in enumerate(row) if v > row[y] or (v == row[y] and j < y))
        hits += rank < 5
    return hits / len(labels)


def dwarfed(k, dtype, kind, seed=0):
    rng = np.random.default_rng(seed + k)
    n = 203  # not a multiple of 4: the rows-in-lanes loop's last rows go to the scalar loop
    labels = rng.integers(0, k, n)
    if kind == "dwarf":  # one column far above: x − max rounds the others to one value
        logits = rng.normal(size=(n, k))
        logits[:, 3] = 3e17 if dtype == np.float32 else 1e300
    else:  # tiny logits beside a moderate maximum: x − max rounds them together
        logits = rng.normal(size=(n, k)) * 1e-20
        logits[:, 1] = 5.0
    return np.ascontiguousarray(logits.astype(dtype)), labels


CASES = [(k, dtype, kind) for k in (7, 10, 130) for dtype in (np.float32, np.float64) for kind in ("dwarf", "tiny")]


@pytest.mark.parametrize("k,dtype,kind", CASES, ids=[f"K{k}-{np.dtype(d).name}-{w}" for k, d, w in CASES])
@pytest.mark.parametrize("engine", ["numpy", "fused"])
def test_every_engine_ranks_the_logits_themselves(k, dtype, kind, engine):
    if engine == "fused" and not kernels.HAVE_CKERNEL:
        pytest.skip("the C extension (the fused engine) is not built")
    logits, labels = dwarfed(k, dtype, kind)
    want = loop_top5(logits, labels)
    summary = summarize(as_predictions(logits, labels, "logits"), engine=engine)
    assert summary.top5.mean() == want
    # the z-rounding would have given another answer: the test can fail
    z = logits.astype(np.float64) - logits.astype(np.float64).max(axis=1, keepdims=True)
    assert loop_top5(z, labels) != want


def test_torch_engine_ranks_the_logits_themselves():
    torch = pytest.importorskip("torch")
    from calibrate_cli.engine.devices import array_ops
    from calibrate_cli.engine.rows import row_stats

    logits, labels = dwarfed(10, np.float32, "dwarf")
    hit5 = row_stats(array_ops("torch-cpu"), torch.from_numpy(logits), torch.from_numpy(labels).to(torch.int64),
                     is_logits=True, top5=True).top5
    assert hit5.double().mean().item() == loop_top5(logits, labels)


def test_cli_eval_of_a_csv_with_a_1e308_cell(runner, tmp_path):
    logits, labels = dwarfed(8, np.float64, "dwarf", seed=4)
    logits[:, 3] = 1e308
    header = ",".join(f"logit_{j}" for j in range(8)) + ",label"
    rows = [",".join(repr(float(v)) for v in row) + f",{y}" for row, y in zip(logits, labels)]
    (tmp_path / "preds.csv").write_text(header + "\n" + "\n".join(rows) + "\n")
    result = runner.invoke(cli, ["eval", str(tmp_path / "preds.csv"), "--labels", "label", "-f", "json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["metrics"]["top5_accuracy"] == loop_top5(logits, labels)
