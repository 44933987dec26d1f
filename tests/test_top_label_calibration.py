"""Top-label histogram binning (Gupta & Ramdas 2022): a hand case, the fit against an independent
float64 loop (per class: sort, cut equal-mass bins, bin accuracies), the argmax kept, edge cases
(K = 2, 1-D binary scores, N = 1, ties, logits vs probabilities), JSON and `calib fit`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from calibrate_cli import evaluate
from calibrate_cli.calibrators import CALIBRATORS, TopLabelHistogramBinning, fit, load_calibrator
from calibrate_cli.cli import cli
from calibrate_cli.errors import InputError
from cli_helpers import one_line_error


# ------------------------------------------------------------------ the independent reference


def softmax_loop(row):
    m = max(row)
    e = [math.exp(v - m) for v in row]
    s = sum(e)
    return [v / s for v in e]


def argmax_loop(row):
    best = 0
    for j, v in enumerate(row):
        if v > row[best]:
            best = j
    return best


def binning_loop(confs, corrects, n_bins):
    """Sort, cut into n_bins groups (the first n mod m one longer), edges = group maxima (repeats
    merged, an empty last bin dropped), bins (e_{b-1}, e_b], accuracy per bin."""
    order = sorted(confs)
    n = len(order)
    edges, start = [], 0
    for g in range(n_bins):
        size = n // n_bins + (1 if g < n % n_bins else 0)
        if g < n_bins - 1:
            edge = order[start + size - 1]
            if not edges or edge > edges[-1]:
                edges.append(edge)
        start += size
    if edges and edges[-1] >= order[-1]:
        edges.pop()
    count = [0] * (len(edges) + 1)
    hits = [0.0] * (len(edges) + 1)
    for c, ok in zip(confs, corrects):
        b = sum(1 for e in edges if e < c)
        count[b] += 1
        hits[b] += 1.0 if ok else 0.0
    return edges, [h / n for h, n in zip(hits, count)]


def lookup(edges, values, conf):
    return values[sum(1 for e in edges if e < conf)]


def top_label_loop(fit_probs, fit_labels, test_probs, points_per_bin):
    """The whole method by plain loops: per-class binnings, the shared fallback, the output rule."""
    preds = [argmax_loop(r) for r in fit_probs]
    confs = [r[c] for r, c in zip(fit_probs, preds)]
    corrects = [c == y for c, y in zip(preds, fit_labels)]
    k = len(fit_probs[0])
    shared = binning_loop(confs, corrects, len(confs) // points_per_bin)
    classes = []
    for c in range(k):
        idx = [i for i, p in enumerate(preds) if p == c]
        m = len(idx) // points_per_bin
        classes.append(binning_loop([confs[i] for i in idx], [corrects[i] for i in idx], m) if m else None)
    out = []
    for row in test_probs:
        c = argmax_loop(row)
        edges, values = classes[c] or shared
        c_hat = lookup(edges, values, row[c])
        rest = sum(v for j, v in enumerate(row) if j != c)
        shares = [(v / rest if rest > 0 else 1 / (k - 1)) if j != c else 0.0 for j, v in enumerate(row)]
        s = max(shares)
        c_hat = max(c_hat, s / (1 + s))
        q = [c_hat if j == c else (1 - c_hat) * shares[j] for j in range(k)]
        out.append(q)
    return shared, classes, out


def data(n=900, k=4, seed=0, scale=2.0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), labels] += 1.5
    logits[:, 0] += 0.8  # class 0 predicted often, the last class rarely
    return scale * logits, labels


# ------------------------------------------------------------------ by hand


FIT_P = np.array([[0.5, 0.3, 0.2], [0.6, 0.2, 0.2], [0.7, 0.2, 0.1], [0.7, 0.2, 0.1], [0.1, 0.8, 0.1]])
FIT_Y = np.array([0, 1, 0, 0, 2])


def close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_hand_case_per_class_shared_fallback_and_a_tie_at_an_edge():
    cal = TopLabelHistogramBinning(points_per_bin=2).fit(FIT_P, FIT_Y, input_kind="probs")
    # class 0: confidences 0.5 0.6 | 0.7 0.7 → edge 0.6, accuracies 1/2 and 2/2
    close(cal.classes_[0][0], [0.6])
    close(cal.classes_[0][1], [0.5, 1.0])
    # class 1 (1 sample) and class 2 (none): the shared binning of all 5 top-label confidences
    # 0.5 0.6 0.7 | 0.7 0.8 cut 3 + 2 → edge 0.7; the 0.7 of the second group ties the edge: lower bin
    assert cal.classes_[1][1].size == 0 and cal.classes_[2][1].size == 0
    close(cal.shared_[0], [0.7])
    close(cal.shared_[1], [0.75, 0.0])
    assert cal.fit_info_.solver["shared_classes"] == [1, 2]
    assert cal.fit_info_.warnings == ("2 of 3 classes predicted on fewer than 2 fitting samples use the shared "
                                      "top-label binning (classes 1–2)",)
    test = np.array([[0.1, 0.3, 0.6], [0.45, 0.35, 0.2], [0.2, 0.75, 0.05]])
    q = cal.predict_proba(test, input_kind="probs")
    close(q[0], [0.0625, 0.1875, 0.75])  # class 2, shared, 0.6 ≤ 0.7: ĉ = 0.75, then 0.25 · (1/4, 3/4)
    close(q[1], [0.5, 0.5 * 7 / 11, 0.5 * 4 / 11])  # class 0, 0.45 ≤ 0.6: ĉ = 1/2
    # class 1, shared, 0.75 > 0.7: ĉ = 0 is below the floor s/(1 + s), s = 0.2/0.25: 4/9, where class 0
    # ties it (5/9 · 0.8) and would win the tie: class 1 is raised by ulps above it
    close(q[2], [4 / 9, 4 / 9, 1 / 9])
    assert q[2, 1] > q[2, 0] and q.argmax(axis=1).tolist() == [2, 0, 1]


def test_the_floor_keeps_the_argmax_binary_and_one_d():
    # p(class 1) 0.9, 0.8 predicted 1, both wrong: ĉ = 0; 0.3, 0.2 predicted 0, both right: ĉ = 1
    p1 = np.array([0.9, 0.8, 0.3, 0.2])
    cal = TopLabelHistogramBinning(points_per_bin=2).fit(p1, [0, 0, 0, 0], input_kind="probs")
    assert [v.tolist() for _, v in cal.classes_] == [[1.0], [0.0]]
    q = cal.predict_proba(np.array([0.85, 0.3]), input_kind="probs")
    # class 1 with ĉ = 0: raised to the tie 1/2, which argmax gives to class 0, so one ulp above it
    assert q[0, 1] == np.nextafter(0.5, 1.0) and q[0, 0] == 1.0 - np.nextafter(0.5, 1.0)
    assert q[1].tolist() == [1.0, 0.0]
    assert q.argmax(axis=1).tolist() == [1, 0]
    # the same as two columns of probabilities, and as 1-D log-odds / 2-D logits
    two = cal.predict_proba(np.array([[0.15, 0.85], [0.7, 0.3]]), input_kind="probs")
    np.testing.assert_array_equal(two, q)
    log_odds = np.log(np.array([0.85, 0.3]) / (1 - np.array([0.85, 0.3])))
    np.testing.assert_allclose(cal.predict_proba(log_odds, input_kind="logits"), q, rtol=0, atol=1e-15)


def test_a_tie_in_the_scores_keeps_the_lowest_index():
    cal = TopLabelHistogramBinning(points_per_bin=2).fit(FIT_P, FIT_Y, input_kind="probs")
    # pred 0 (tied with class 1): class 0's binning, 0.4 ≤ 0.6 → ĉ = 0.5 > floor 0.4 / (0.6 + 0.4)
    q = cal.predict_proba(np.array([[0.4, 0.4, 0.2]]), input_kind="probs")
    np.testing.assert_allclose(q[0], [0.5, 0.5 * 2 / 3, 0.5 / 3], rtol=0, atol=1e-15)
    assert q.argmax() == 0


# ------------------------------------------------------------------ against the loop


@pytest.mark.parametrize("k, points, seed", [(4, 50, 0), (3, 30, 1), (2, 40, 2), (5, 100, 3)])
def test_fit_and_map_equal_the_independent_loop(k, points, seed):
    logits, labels = data(k=k, seed=seed)
    val, val_y, test = logits[:600], labels[:600], logits[600:]
    cal = fit("top_label", val, val_y, points_per_bin=points)
    val_p = [softmax_loop(r) for r in val.tolist()]
    test_p = [softmax_loop(r) for r in test.tolist()]
    shared, classes, expected = top_label_loop(val_p, val_y.tolist(), test_p, points)
    np.testing.assert_allclose(cal.shared_[0], shared[0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(cal.shared_[1], shared[1], rtol=0, atol=1e-15)
    for c in range(k):
        if classes[c] is None:
            assert cal.classes_[c][1].size == 0
        else:
            np.testing.assert_allclose(cal.classes_[c][0], classes[c][0], rtol=0, atol=1e-15)
            np.testing.assert_allclose(cal.classes_[c][1], classes[c][1], rtol=0, atol=1e-15)
    q = cal.predict_proba(test)
    np.testing.assert_allclose(q, expected, rtol=0, atol=1e-12)
    assert (q.argmax(axis=1) == test.argmax(axis=1)).all()
    np.testing.assert_allclose(q.sum(axis=1), 1.0, rtol=0, atol=1e-14)
    assert (q >= 0).all()


def test_the_argmax_and_accuracy_are_kept_everywhere():
    logits, labels = data(n=3000, k=6, seed=7, scale=0.7)  # unsure: many rows where the floor binds
    cal = fit("top_label", logits[:1500], labels[:1500], points_per_bin=25)
    for scores in (logits[1500:], np.round(logits[1500:], 1)):  # rounded: ties in the scores
        q = cal.predict_proba(scores)
        assert (q.argmax(axis=1) == scores.argmax(axis=1)).all()
        before = evaluate(scores, labels[1500:]).metrics
        after = evaluate(q, labels[1500:], input_kind="probs").metrics
        assert after["accuracy"] == before["accuracy"]


def test_logits_and_probabilities_give_the_same_map():
    logits, labels = data(seed=4)
    probs = np.array([softmax_loop(r) for r in logits.tolist()])
    on_logits = fit("top_label", logits[:600], labels[:600])
    on_probs = fit("top_label", probs[:600], labels[:600], input_kind="probs")
    np.testing.assert_allclose(on_probs.predict_proba(probs[600:]), on_logits.predict_proba(logits[600:]),
                               rtol=0, atol=1e-12)
    shifted = logits[600:] + np.random.default_rng(0).normal(0, 5, (300, 1))  # softmax only: shift-invariant
    np.testing.assert_allclose(on_logits.predict_proba(shifted), on_logits.predict_proba(logits[600:]), atol=1e-12)


# ------------------------------------------------------------------ edge cases


def test_n_equal_one_and_too_few_samples():
    with pytest.raises(InputError, match="needs at least 50 fitting samples, got 1"):
        fit("top_label", np.array([[2.0, 0.0]]), [0])
    cal = fit("top_label", np.array([[2.0, 0.0]]), [1], points_per_bin=1)  # one bin, its sample was wrong
    q = cal.predict_proba(np.array([[3.0, 1.0], [0.0, 1.0]]))
    assert q.argmax(axis=1).tolist() == [0, 1]
    assert q[0, 0] == 0.5  # ĉ = 0 raised to the tie 1/2 (class 0 wins the tie); class 1: the shared bin too
    with pytest.raises(InputError, match="points_per_bin"):
        TopLabelHistogramBinning(points_per_bin=0)
    with pytest.raises(InputError, match="points_per_bin"):
        TopLabelHistogramBinning(points_per_bin=True)


def test_all_ties_merge_the_bins():
    # every confidence equal: the repeated edges merge into one bin
    probs = np.tile([[0.6, 0.4]], (10, 1))
    labels = np.array([0] * 7 + [1] * 3)
    cal = TopLabelHistogramBinning(points_per_bin=2).fit(probs, labels, input_kind="probs")
    assert cal.classes_[0][0].size == 0 and cal.classes_[0][1].tolist() == [0.7]
    assert cal.shared_[1].tolist() == [0.7]


def test_json_round_trip_and_bad_parameters():
    logits, labels = data(seed=5)
    cal = fit("top_label", logits[:600], labels[:600], points_per_bin=40)
    saved = json.loads(json.dumps(cal.to_dict()))
    assert saved["method"] == "top_label" and saved["k"] == 4 and saved["top_label"]["points_per_bin"] == 40
    again = load_calibrator(saved)
    np.testing.assert_array_equal(again.predict_proba(logits[600:]), cal.predict_proba(logits[600:]))
    params = saved["top_label"]
    bad = [
        ({**params, "points_per_bin": "50"}, "must be a number"),
        ({**params, "points_per_bin": 2.5}, "whole number"),
        ({**params, "shared": {"edges": [0.5], "values": [0.2]}}, "need 0 edges"),
        ({**params, "shared": {"edges": [], "values": [1.5]}}, "probabilities in [0, 1]"),
        ({**params, "shared": {"edges": [], "values": []}}, "non-empty list"),
        ({**params, "classes": [{"edges": [0.6, 0.5], "values": [0.1, 0.2, 0.3]}] * 4}, "increasing"),
        ({**params, "classes": params["classes"][:3]}, '"k" is 4'),
        ({**params, "classes": [{"edges": [], "values": [float("nan")]}] * 4}, "finite"),
        ({**params, "classes": None}, "must be an object"),
    ]
    for broken, message in bad:
        with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
            load_calibrator({**saved, "top_label": broken})


def test_registered_once_under_its_name():
    assert CALIBRATORS["top_label"] is TopLabelHistogramBinning


def test_parameter_rows_flatten_the_binnings():
    cal = TopLabelHistogramBinning(points_per_bin=2).fit(FIT_P, FIT_Y, input_kind="probs")
    assert dict(cal.parameter_rows()) == pytest.approx({
        "top_label_points_per_bin": 2.0, "top_label_shared_edges_0": 0.7, "top_label_shared_values_0": 0.75,
        "top_label_shared_values_1": 0.0, "top_label_class_0_edges_0": 0.6, "top_label_class_0_values_0": 0.5,
        "top_label_class_0_values_1": 1.0,
    }, abs=1e-15)


# ------------------------------------------------------------------ calib fit


def _write(tmp_path, n=800, k=3, seed=0):
    logits, labels = data(n=n, k=k, seed=seed)
    paths = {}
    for name, array in {"val": logits[: n // 2], "val_y": labels[: n // 2], "test": logits[n // 2:],
                        "test_y": labels[n // 2:]}.items():
        paths[name] = str(tmp_path / f"{name}.npy")
        np.save(paths[name], array)
    return paths, logits, labels


def test_calib_fit_method_top_label_and_eval_calibrator(runner, tmp_path):
    paths, logits, labels = _write(tmp_path)
    out = tmp_path / "t.json"
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "top_label", "--test", paths["test"],
                            paths["test_y"], "-f", "json", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["method"] == "top_label" and doc["calibration"]["method"] == "top_label"
    # the fit equals the loop, and the test set's after-metrics are those of its probabilities
    val_p = [softmax_loop(row) for row in logits[:400].tolist()]
    test_p = [softmax_loop(row) for row in logits[400:].tolist()]
    _, _, expected = top_label_loop(val_p, labels[:400].tolist(), test_p, 50)
    want = evaluate(np.array(expected), labels[400:], input_kind="probs").metrics
    for metric in ("nll", "brier"):  # not the ECE: bin accuracies such as 60/75 sit on its bin edges b/15
        assert doc["test"]["after"][metric] == pytest.approx(want[metric], abs=1e-12)
    assert doc["test"]["after"]["accuracy"] == doc["test"]["before"]["accuracy"]  # argmax kept
    again = runner.invoke(cli, ["eval", paths["test"], paths["test_y"], "--calibrator", str(out), "-f", "json"])
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["metrics"]["ece"] == pytest.approx(doc["test"]["after"]["ece"], abs=1e-12)
    table = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "top_label"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "top-label histogram binning (50 points per bin)" in table.stdout
    csv_text = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "top_label", "-f", "csv"]).stdout
    assert "top_label_shared_values_0" in csv_text


def test_calib_fit_method_all_includes_top_label(runner, tmp_path):
    paths, _, _ = _write(tmp_path, n=600)
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "all", "--test", paths["test"],
                            paths["test_y"], "--metrics", "ece", "-f", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert "top_label" in doc["methods"] and doc["methods"]["top_label"]["calibration"]["method"] == "top_label"


def test_calib_fit_too_few_samples_is_one_line(runner, tmp_path):
    paths, _, _ = _write(tmp_path, n=60)  # 30 fitting samples < 50 points per bin
    r = runner.invoke(cli, ["fit", paths["val"], paths["val_y"], "--method", "top_label"])
    one_line_error(r, "needs at least 50 fitting samples, got 30")
