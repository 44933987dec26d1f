"""Issue 32, item 7: shards pair by the numbers in their names, not by plain sorted order.

`x_1 … x_10` with `y_01 … y_10` paired x_10 with y_02 by string order (accuracy 0.150 against 0.425
for the single file, exit 0). Shards now sort naturally (digit runs compared as integers) and pair
score shard and label shard of the same number; a shard whose number the other side lacks, or two
shards of one side with the same number, are refused with one line naming the files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrate_cli.cli import cli
from calibrate_cli.errors import InputError
from calibrate_cli.data.io import list_shards, natural_key, pair_shards, shard_numbers
from cli_helpers import one_line_error  # noqa: E402

N, K, S = 300, 5, 10


@pytest.fixture()
def parts(tmp_path):
    """x_1 … x_10 (scores) and y_01 … y_10 (labels), and the whole arrays."""
    rng = np.random.default_rng(7)
    labels = rng.integers(0, K, N)
    logits = rng.normal(scale=2.0, size=(N, K))
    logits[np.arange(N), labels] += 1.5
    bounds = np.linspace(0, N, S + 1).astype(int)  # equal sizes: a wrong pairing reads wrong labels, exit 0
    (tmp_path / "preds").mkdir()
    (tmp_path / "labels").mkdir()
    for i in range(S):
        a, b = bounds[i], bounds[i + 1]
        np.save(tmp_path / "preds" / f"x_{i + 1}.npy", logits[a:b])
        np.save(tmp_path / "labels" / f"y_{i + 1:02d}.npy", labels[a:b])
    np.save(tmp_path / "x.npy", logits)
    np.save(tmp_path / "y.npy", labels)
    return tmp_path


def run(runner, *args):
    return runner.invoke(cli, ["eval", *(str(a) for a in args)])


def as_json(result) -> dict:
    assert result.exit_code == 0, (result.output, result.stderr)
    return json.loads(result.stdout)


def test_shards_pair_by_number_whatever_the_zero_padding(runner, parts):
    want = as_json(run(runner, parts / "x.npy", parts / "y.npy", "-f", "json"))
    for scores, labels in [(parts / "preds" / "x_*.npy", parts / "labels" / "y_*.npy"),
                           (parts / "preds", parts / "labels")]:  # patterns and folders
        got = as_json(run(runner, scores, labels, "-f", "json"))
        assert got["n"] == N
        assert got["metrics"]["accuracy"] == want["metrics"]["accuracy"]
        assert got["metrics"]["nll"] == pytest.approx(want["metrics"]["nll"], rel=1e-12)
        assert got["metrics"]["ece"] == pytest.approx(want["metrics"]["ece"], rel=1e-12, abs=1e-15)


def test_shards_are_listed_in_natural_order(parts):
    files = list_shards(str(parts / "preds" / "x_*.npy"))
    assert [f.rsplit("/", 1)[1] for f in files] == [f"x_{i}.npy" for i in range(1, S + 1)]
    assert list_shards(str(parts / "preds")) == files
    assert sorted(["x_10", "x_9", "x_02", "x_1"], key=natural_key) == ["x_1", "x_02", "x_9", "x_10"]


def test_shard_numbers_keep_the_numbers_that_vary():
    assert shard_numbers(["run2/x_1_of_3.npy", "run2/x_2_of_3.npy", "run2/x_3_of_3.npy"]) == [(1,), (2,), (3,)]
    assert shard_numbers(["a/x.h5", "b/x.h5"]) == [(), ()]  # the suffix's 5 is not a number of the shard
    assert shard_numbers(["p/r0/x.npy", "p/r1/x.npy"]) == [(0,), (1,)]
    assert pair_shards(["s_2.npy", "s_10.npy"], ["l_010.npy", "l_02.npy"], "s", "l") == [
        ("s_2.npy", "l_02.npy"), ("s_10.npy", "l_010.npy")]


def test_a_shard_without_a_partner_is_refused_naming_it(runner, parts):
    (parts / "labels" / "y_07.npy").rename(parts / "labels" / "y_11.npy")  # as many files, one number off
    one_line_error(run(runner, parts / "preds" / "x_*.npy", parts / "labels" / "y_*.npy"),
                   "x_7.npy", "no shard numbered 7", "y_*.npy", "numbers in their names")


def test_two_shards_with_one_number_are_refused_naming_both(runner, parts):
    (parts / "preds" / "x_5.npy").rename(parts / "preds" / "x_05.npy")
    np.save(parts / "preds" / "x_5.npy", np.load(parts / "preds" / "x_05.npy"))
    np.save(parts / "labels" / "y_11.npy", np.load(parts / "labels" / "y_01.npy"))
    one_line_error(run(runner, parts / "preds" / "x_*.npy", parts / "labels" / "y_*.npy"),
                   "x_05.npy", "x_5.npy", "same shard number 5")


def test_shards_without_numbers_are_refused(parts):
    with pytest.raises(InputError, match="no shard number"):
        pair_shards(["a/cat.npy", "a/dog.npy"], ["b/cat.npy", "b/dog.npy"], "a/*.npy", "b/*.npy")
