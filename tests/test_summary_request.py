"""summarize(request=...): the pass computes what the requested metrics need, against float64 loops
(tests/naive_reference.py); and the devices a report records and refuses."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import naive_reference as naive
from cases import logits_with_ties
from calibrate_cli import evaluate
from calibrate_cli.data.predictions import as_predictions
from calibrate_cli.engine.binning import S99_THRESHOLD
from calibrate_cli.engine.summary import SummaryRequest, summarize
from calibrate_cli.errors import InputError
from calibrate_cli.metrics.registry import S99_THRESHOLD as REGISTRY_S99
from calibrate_cli.metrics.registry import sums_needed


@pytest.mark.parametrize("names,columns", [(["ece", "accuracy"], False), (["adaece", "mce"], False),
                                           (["nll", "ece", "s99_share"], False), (None, True)])
def test_a_request_computes_what_its_metrics_need(names, columns):
    """summarize(request=...): the top label alone when only its sums are asked, the classwise sums only
    when asked, and the equal-width bins and in-order sums always when asked (float64 loops)."""
    x, y = logits_with_ties(500, 7, 5)
    sums = sums_needed(names)
    s = summarize(as_predictions(x, y, "logits"), n_bins=10, request=SummaryRequest(sums=sums, columns=columns),
                  engine="numpy")
    assert (s.classwise is None) == ("classwise_gap" not in sums)
    assert (s.nll is None) == (not columns) and (s.totals is None) == (columns or sums <= {"width", "mass", "correct",
                                                                                         "conf", "s99", "s99_correct"})
    conf, top = naive.top_label(naive.softmax_rows(x))
    hits = [p == t for p, t in zip(top, y.tolist())]
    bins = [naive.equal_width_bin(c, 10) for c in conf]
    np.testing.assert_array_equal(s.width.count, np.bincount(bins, minlength=10))
    np.testing.assert_array_equal(s.width.sum_correct, np.bincount(bins, weights=hits, minlength=10))
    np.testing.assert_allclose(s.width.sum_conf, np.bincount(bins, weights=conf, minlength=10), rtol=1e-13)
    if not sums & {"correct", "conf", "s99", "s99_correct"}:
        assert s.in_order is None
        return
    assert s.in_order["correct"][0] == sum(hits) and s.in_order["s99"][0] == sum(c >= 0.99 for c in conf)
    assert s.in_order["conf"][0] == pytest.approx(math.fsum(conf), rel=1e-13)


def test_s99_threshold_is_the_registrys():
    assert S99_THRESHOLD == REGISTRY_S99 == 0.99


def test_devices_are_recorded_and_refused_clearly(monkeypatch):
    has_cuda = pytest.importorskip("torch").cuda.is_available()
    x, y = logits_with_ties(50, 4, 14)
    assert evaluate(x, y).to_dict()["device"] == "cpu" and evaluate(x, y, device="torch-cpu").device == "torch-cpu"
    assert evaluate(x, y, device="auto").device == ("cuda" if has_cuda else "cpu")
    if not has_cuda:
        with pytest.raises(InputError, match="CUDA"):
            evaluate(x, y, device="cuda")
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(InputError, match=r"needs torch.*pip install torch==2\.13\.0"):
        evaluate(x, y, device="torch-cpu")
    assert evaluate(x, y, device="auto").device == "cpu"  # auto falls back to numpy
