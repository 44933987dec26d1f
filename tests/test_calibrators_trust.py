"""Issue #32: a fitted calibrator is never a silent wrong number.

- a fit with parameters that are not finite, or a degenerate map (NaN probabilities, the same
  probabilities for every sample), is a FitError naming the method, and leaves the calibrator unfitted;
  no numpy RuntimeWarning reaches the caller;
- a calibrator knows the kind of scores (and K) it was fitted on, saves it, and applies itself to
  that kind by default; another kind is refused where the map differs between logits and log p.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from calibrate_cli import FitError, InputError, evaluate
from calibrate_cli.calibrators import CALIBRATORS, fit, load_calibrator
from calibrate_cli.calibrators.base import Calibrator, FitInfo
from calibrate_cli.calibrators.selection import choose, cross_validate, stratified_folds


def softmax_rows(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def synthetic(n=400, k=3, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1.5, (n, k))
    logits[np.arange(n), labels] += 2.0
    return logits, labels


# ---------------------------------------------------------------------------------------------
# The guard in Calibrator.fit


class _Toy(Calibrator):
    """A map q = softmax(z · scale) + whatever the test makes ``_fit`` set."""

    name = "toy"
    searches = {}

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.scale_ = None

    def _fit(self, data, progress):
        if self.behaviour == "nan":
            self.scale_ = float(np.log(np.float64(-1.0)))  # NaN, with numpy's "invalid value" warning
        elif self.behaviour == "inf":
            self.scale_ = float(np.float64(1.0) / np.float64(0.0))  # +inf, "divide by zero"
        elif self.behaviour == "constant":
            self.scale_ = 0.0  # softmax(0 · z): 1/K for every sample
        else:
            self.scale_ = 1.0
        return FitInfo("nll", 0.0, 0.0, data.n, data.k, {})

    def _transform(self, z):
        if self.behaviour == "nan_rows":
            out = z.copy()
            out[1] = np.nan  # one row's map is not a number, the parameters are fine
            return out
        return z * self.scale_

    def get_params(self):
        return self.scale_

    @classmethod
    def _from_params(cls, params, k):
        out = cls("ok")
        out.scale_ = params
        return out


@pytest.mark.parametrize("behaviour, message", [
    ("nan", r"the toy fit failed: its parameter toy is nan"),
    ("inf", r"the toy fit failed: its parameter toy is inf"),
    ("nan_rows", r"the toy fit failed: its probabilities on the fitting set are not finite \(row 1"),
    ("constant", r"the toy fit is degenerate: it gives every sample the same probabilities \(\[0.3333 0.3333 0.3333\]\) "
                 r"where the scores differ; the fitting set's accuracy would go from {before} to {after}"),
])
def test_a_broken_fit_is_a_fit_error_and_leaves_the_calibrator_unfitted(behaviour, message):
    logits, labels = synthetic()
    # a constant map: every sample predicts class 0 (the lowest index of the tie), right for the class-0 samples
    before, after = np.mean(logits.argmax(axis=1) == labels), np.mean(labels == 0)
    message = message.format(before=f"{100 * before:.2f} %", after=f"{100 * after:.2f} %")
    toy = _Toy(behaviour)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's RuntimeWarnings stay inside the fit
        with pytest.raises(FitError, match=message) as caught:
            toy.fit(logits, labels, scores_name="val.npy")
    assert str(caught.value).startswith("val.npy: ")
    assert isinstance(caught.value, InputError)  # a CalibError: one line, exit 2 in the CLI
    assert not toy.is_fitted and toy.k is None and toy.input_kind is None and toy.fit_info_ is None
    assert _Toy("ok").fit(logits, labels).is_fitted


def test_a_constant_map_of_constant_scores_is_not_degenerate():
    logits = np.tile([[2.0, 0.0, -1.0]], (30, 1))
    labels = np.array([0, 1, 2] * 10)
    assert _Toy("constant").fit(logits, labels).is_fitted  # nothing to destroy: every row was the same


def test_histogram_with_one_bin_is_degenerate():
    # one bin: the class frequencies for every sample, whatever the scores
    logits, labels = synthetic()
    with pytest.raises(FitError, match="histogram fit is degenerate"):
        fit("histogram", logits, labels, n_bins=1)


def test_every_method_passes_the_guard_on_ordinary_data():
    logits, labels = synthetic(k=2)
    for name in CALIBRATORS:
        cal = fit(name, logits, labels)
        assert cal.is_fitted and cal.input_kind == "logits" and cal.k == 2


# ---------------------------------------------------------------------------------------------
# The input kind


def _val_test(k=3):
    logits, labels = synthetic(n=900, k=k, seed=5)
    return logits[:500], labels[:500], logits[500:], labels[500:]


METHODS_K3 = [m for m in CALIBRATORS if m not in ("platt", "beta")]


@pytest.mark.parametrize("method", METHODS_K3)
def test_a_calibrator_fitted_on_probabilities_applies_to_probabilities(method):
    val, val_y, test, _ = _val_test()
    val_p, test_p = softmax_rows(val), softmax_rows(test)
    cal = fit(method, val_p, val_y, input_kind="probs")
    assert cal.input_kind == "probs" and cal.k == 3
    # the same map fitted on log p given as logits (the path that never involved the kind): its
    # probabilities of log test_p are what predict_proba(test_p) must give
    reference = fit(method, np.log(val_p), val_y)
    expected = reference.predict_proba(np.log(test_p))
    np.testing.assert_allclose(cal.predict_proba(test_p), expected, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(cal.predict_proba(test_p, input_kind="probs"), expected, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(softmax_rows(cal.transform(test_p)), expected, rtol=1e-7, atol=1e-9)


def test_the_issue_numbers_isotonic_and_temperature_on_probabilities():
    val, val_y, test, test_y = _val_test()
    val_p, test_p = softmax_rows(val), softmax_rows(test)
    for method in ("isotonic", "temperature"):
        cal = fit(method, val_p, val_y, input_kind="probs")
        ece = evaluate(cal.predict_proba(test_p), test_y, input_kind="probs").metrics["ece"]
        by_apply = evaluate(cal.apply(test_p, "probs"), test_y, input_kind=cal.result_kind("probs")).metrics["ece"]
        assert ece == pytest.approx(by_apply, abs=1e-12)
        # log p as logits: the same (these maps see the scores only through softmax)
        of_log = evaluate(cal.predict_proba(np.log(test_p), input_kind="logits"), test_y, input_kind="probs")
        assert of_log.metrics["ece"] == pytest.approx(ece, abs=1e-9)
        # the probabilities taken as logits (the bug, now only when asked for): a far worse ECE
        wrong = evaluate(cal.predict_proba(test_p, input_kind="logits"), test_y, input_kind="probs")
        assert wrong.metrics["ece"] > ece + 0.05


@pytest.mark.parametrize("method", ["vector", "matrix"])
def test_another_kind_is_refused_where_the_map_differs(method):
    val, val_y, test, _ = _val_test()
    on_probs = fit(method, softmax_rows(val), val_y, input_kind="probs")
    with pytest.raises(InputError, match=rf"logits given, but the {method} calibration was fitted on probabilities"):
        on_probs.predict_proba(test, input_kind="logits")
    with pytest.raises(InputError, match="input_kind='probs'"):
        on_probs.apply(test, "logits")
    on_logits = fit(method, val, val_y)
    with pytest.raises(InputError, match=r"probabilities given, but .* fitted on logits.*input_kind='logits'"):
        on_logits.predict_proba(softmax_rows(test), input_kind="probs")
    # and logits where probabilities are expected: the rows do not sum to 1
    with pytest.raises(InputError, match="probabilities outside"):
        on_probs.predict_proba(test)


@pytest.mark.parametrize("method", list(CALIBRATORS))
def test_shift_invariant_says_whether_the_map_sees_only_softmax(method):
    """The flag is checked against the maps themselves: z and z + c (a constant per row) give the
    same probabilities exactly when ``shift_invariant``."""
    k = 2 if method in ("platt", "beta") else 3
    logits, labels = synthetic(n=600, k=k, seed=9)
    cal = fit(method, logits, labels)
    test = synthetic(n=300, k=k, seed=10)[0]  # not the fitting scores: those sit on the edges of the binnings
    shifted = test + np.random.default_rng(1).normal(0, 3, (300, 1))
    same = np.allclose(cal.predict_proba(test), cal.predict_proba(shifted), rtol=0, atol=1e-9)
    assert same == type(cal).shift_invariant


def test_another_k_is_refused():
    val, val_y, test, _ = _val_test()
    cal = fit("isotonic", softmax_rows(val), val_y, input_kind="probs")
    with pytest.raises(InputError, match="K = 3"):
        cal.predict_proba(softmax_rows(test[:, :2]))


def test_the_kind_is_saved_and_read_back():
    val, val_y, test, _ = _val_test()
    cal = fit("vector", softmax_rows(val), val_y, input_kind="probs")
    saved = json.loads(json.dumps(cal.to_dict()))
    assert saved["input_kind"] == "probs" and saved["k"] == 3
    again = load_calibrator(saved)
    assert again.input_kind == "probs"
    np.testing.assert_array_equal(again.predict_proba(softmax_rows(test)), cal.predict_proba(softmax_rows(test)))
    # a file written before the key: logits, as such files were always read
    old = {key: value for key, value in saved.items() if key != "input_kind"}
    assert load_calibrator(old).input_kind == "logits"
    # a report of calib fit / temperature without it: the report's inputs say
    assert load_calibrator({"inputs": {"input_kind": "probs"}, "calibration": old}).input_kind == "probs"
    with pytest.raises(InputError, match='"input_kind" must be one of'):
        load_calibrator({**saved, "input_kind": "log-probs"})
    # a bare temperature has no kind: any
    assert load_calibrator(1.5).input_kind is None


# ---------------------------------------------------------------------------------------------
# Cross-validated selection (the core of `calib fit --method all`)


def test_stratified_folds_by_hand():
    labels = np.array([0, 0, 0, 1, 1, 1, 1, 2])
    folds = stratified_folds(labels, 3, seed=0)
    # the rule, recomputed: permute, group by label (stable), deal 0, 1, 2, 0, …
    order = np.random.default_rng(0).permutation(8)
    order = order[np.argsort(labels[order], kind="stable")]
    expected = np.empty(8, dtype=int)
    expected[order] = [0, 1, 2, 0, 1, 2, 0, 1]
    assert folds.tolist() == expected.tolist()
    assert sorted(np.bincount(folds).tolist()) == [2, 3, 3]
    for c in range(3):  # each class spread over the folds, ±1
        counts = np.bincount(folds[labels == c], minlength=3)
        assert counts.max() - counts.min() <= 1
    with pytest.raises(InputError, match="at least 9"):
        stratified_folds(labels, 9)
    with pytest.raises(InputError, match="≥ 2"):
        stratified_folds(labels, 1)


def test_cross_validate_is_the_metric_of_the_out_of_fold_predictions():
    logits, labels = synthetic(n=300, seed=3)
    folds = stratified_folds(labels, 4, seed=2)
    out = np.empty((300, 3))
    for f in range(4):  # by hand: fit without fold f, predict fold f
        held = folds == f
        out[held] = fit("isotonic", logits[~held], labels[~held]).predict_proba(logits[held])
    expected = evaluate(out, labels, input_kind="probs").metrics["ece"]
    got = cross_validate("isotonic", logits, labels, metric="ece", folds=folds)
    assert got.failure is None and got.value == pytest.approx(expected, abs=1e-15)


def test_a_fold_that_fails_is_an_error_never_a_value():
    logits, labels = synthetic(n=300, seed=3)
    got = cross_validate("histogram", logits, labels, metric="ece", folds=stratified_folds(labels, 3), options={"n_bins": 1})
    assert got.value is None and got.failure.startswith("fold 1 of 3: ") and "degenerate" in got.failure


def test_choose():
    assert choose({"a": 0.2, "b": 0.1, "c": 0.1}, "ece") == "b"  # ties: the first
    assert choose({"a": 0.9, "b": None, "c": 0.95}, "accuracy") == "c"  # higher is better
    assert choose({"a": None}, "ece") is None
    with pytest.raises(InputError):
        choose({"a": 0.5}, "mean_confidence")  # no better direction
