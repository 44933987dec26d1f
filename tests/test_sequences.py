"""Sequence-level confidence (calibrate_cli.metrics.sequences, `calib eval --sequences`): each rule
against a naive float64 loop, hand-computed values, the binary calibration of answer correctness
against evaluate()'s top-label path, and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from cli_helpers import one_line_error
from libm import assert_agree

from calibrate_cli.cli import cli
from calibrate_cli.errors import InputError
from calibrate_cli.metrics.sequences import evaluate_answers, sequence_confidence


def _naive(token_lps, seq_ids, rule):
    groups = {}
    for lp, s in zip(token_lps, seq_ids):
        groups.setdefault(s, []).append(lp)
    out = {}
    for s, lps in groups.items():
        probs = [math.exp(v) for v in lps]
        if rule == "product":
            value = 1.0
            for p in probs:
                value *= p
        elif rule == "mean":
            value = sum(probs) / len(probs)
        elif rule == "geomean":
            value = math.exp(sum(lps) / len(lps))
        else:
            value = min(probs)
        out[s] = value
    return out


@pytest.mark.parametrize("rule", ["product", "mean", "geomean", "min"])
def test_rules_against_a_naive_loop(rule):
    rng = np.random.default_rng(0)
    seq = rng.integers(0, 40, 500)
    lp = np.log(rng.uniform(0.3, 1.0, 500))
    got = sequence_confidence(lp, seq, rule)
    want = _naive(lp.tolist(), seq.tolist(), rule)
    assert got.ids.tolist() == sorted(want)
    np.testing.assert_allclose(got.confidence, [want[s] for s in got.ids], rtol=1e-12, atol=0)
    assert got.n_tokens.sum() == 500


def test_hand_values_and_string_ids():
    lp = np.log([0.5, 0.8, 0.9, 0.2])
    s = ["a", "a", "b", "a"]
    assert sequence_confidence(lp, s, "product").confidence.tolist() == pytest.approx([0.08, 0.9], rel=1e-14)
    assert sequence_confidence(lp, s, "mean").confidence.tolist() == pytest.approx([0.5, 0.9], rel=1e-14)
    assert sequence_confidence(lp, s, "min").confidence.tolist() == pytest.approx([0.2, 0.9], rel=1e-14)
    assert sequence_confidence(lp, s, "geomean").confidence.tolist() == pytest.approx([0.08 ** (1 / 3), 0.9], rel=1e-14)
    # a token of probability 0 (N = 1 sequence)
    assert sequence_confidence([-np.inf, -0.1], [1, 1]).confidence.tolist() == [0.0]


def test_answer_calibration_is_the_top_label_path():
    # answers 60 % and 90 % confident, the first wrong: one bin each of 10, ECE = (0.6 + 0.1) / 2
    report = evaluate_answers([0.6, 0.9], [0, 1], n_bins=10)
    assert report.metrics["ece"] == pytest.approx(0.35, rel=1e-14)
    assert report.metrics["accuracy"] == 0.5
    # Brier over both outcomes, as calib reports it for any binary problem: Σ_k (p_k − [y = k])² = 2(c − y)²
    assert report.metrics["brier"] == pytest.approx(2 * (0.36 + 0.01) / 2, rel=1e-14)
    assert report.metrics["nll"] == pytest.approx(-(math.log(0.4) + math.log(0.9)) / 2, rel=1e-14)
    # equal to evaluate()'s top-label metrics of a two-class input whose top label is the answer
    import calibrate_cli as calib

    rng = np.random.default_rng(1)
    c = rng.uniform(0.5, 1.0, 200)
    y = rng.uniform(size=200) < c
    report = evaluate_answers(c, y)
    dense = calib.evaluate(np.stack([c, 1 - c], axis=1), np.where(y, 0, 1), input_kind="probs").metrics
    names = ["accuracy", "ece", "adaece", "mce", "rms_ce", "ks_ce", "smooth_ece", "mean_confidence"]
    assert_agree({n: report.metrics[n] for n in names}, {n: dense[n] for n in names})


def test_bad_input():
    with pytest.raises(InputError, match="rule"):
        sequence_confidence([-0.1], [0], "max")
    with pytest.raises(InputError, match="row 2"):
        sequence_confidence([-0.1, 0.5], [0, 0])
    with pytest.raises(InputError, match="sequence 0"):
        sequence_confidence([-0.1, -0.2], [0, 0], correct=[1, 0])
    with pytest.raises(InputError, match="same length"):
        sequence_confidence([-0.1, -0.2], [0])


def test_cli_token_rows_and_answer_rows(tmp_path):
    tokens = tmp_path / "tokens.jsonl"
    rows = [("q1", -0.1, 1), ("q1", -0.2, 1), ("q2", -1.0, 0), ("q3", -0.05, 1), ("q3", -0.5, 1)]
    tokens.write_text("".join(json.dumps({"sequence_id": s, "token_logprob": lp, "correct": c}) + "\n"
                              for s, lp, c in rows))
    result = CliRunner().invoke(cli, ["eval", str(tokens), "--sequences", "--rule", "min", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    want = evaluate_answers(np.exp([-0.2, -1.0, -0.5]), [1, 0, 1], rule="min")
    assert_agree(doc["metrics"], json.loads(json.dumps(want.metrics)))
    assert doc["n"] == 3 and doc["inputs"]["tokens"] == 5
    # one row an answer, its tokens a list, renamed columns, Parquet
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    answers = tmp_path / "answers.parquet"
    pq.write_table(pa.table({"lp": [[-0.1, -0.2], [-1.0], [-0.05, -0.5]], "ok": [True, False, True]}), answers)
    result = CliRunner().invoke(cli, ["eval", str(answers), "--sequences", "--token-logprobs", "lp", "--correct", "ok",
                                      "--rule", "min", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert_agree(json.loads(result.stdout)["metrics"], doc["metrics"])
    result = CliRunner().invoke(cli, ["eval", str(answers), "--sequences", "--token-logprobs", "lp", "--correct", "ok"])
    assert result.exit_code == 0 and "answers" in result.stdout


def test_cli_errors(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"sequence_id": 1, "token_logprob": -0.1, "correct": 1}\n'
                    '{"sequence_id": 1, "token_logprob": -0.3, "correct": 0}\n')
    one_line_error(CliRunner().invoke(cli, ["eval", str(path), "--sequences"]), "a.jsonl", "sequence 1", "disagree")
    result = CliRunner().invoke(cli, ["eval", str(path), "--sequences", "--topk"])
    assert result.exit_code == 2 and "give one of them" in result.stderr
    result = CliRunner().invoke(cli, ["eval", str(path), "--sequences", "--bootstrap", "10"])
    assert result.exit_code == 2 and "does not apply to --sequences" in result.stderr
