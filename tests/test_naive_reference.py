"""Validate the naive reference (tests/naive_reference.py) against hand-computed cases and against
the published values in /work/shared/reference/README.md (spec at 1e-6, compat at 2e-6)."""

import math
from pathlib import Path

import numpy as np
import pytest

from naive_reference import (
    accuracy,
    adaece,
    adaece_compat,
    adaece_edges,
    brier,
    classwise_ece,
    classwise_ece_compat,
    ece,
    ece_compat,
    equal_width_bin,
    mce,
    mean_confidence,
    nll,
    nll_compat,
    nll_probs,
    s99,
    softmax_f32,
    softmax_rows,
    top5_accuracy,
    top_label,
    torch_linspace_f32,
)

REF = Path(__file__).resolve().parents[2] / "shared" / "reference"
SPEC_TOL = 1e-6
COMPAT_TOL = 2e-6

# --------------------------------------------------------------------------- reference tables
# name -> (logits file, labels file, spec values, compat values, (T, compat values at T))
SETS = {
    "synthetic_N2000_K10": (
        "logits_N2000_K10.npy",
        "labels_N2000_K10.npy",
        dict(accuracy=0.816, ece=0.0873361425, adaece=0.0849562125, classwise_ece=0.0189108195,
             mce=0.2830650496, nll=0.7151337788, brier=0.2946872615),
        dict(accuracy=0.816, ece=0.0873361081, adaece=0.0850409716, classwise_ece=0.0189108178,
             nll=0.7151337862),
        (0.6, dict(ece=0.041869193)),
    ),
    "cifar100_wrn16-4_test": (
        "cifar100_wrn16-4_netcal_test_logits.npy",
        "cifar100_wrn16-4_netcal_test_labels.npy",
        dict(accuracy=0.7534, ece=0.056517, adaece=0.055455, classwise_ece=0.002660,
             mce=0.135301, nll=0.957609, brier=0.351205),
        dict(accuracy=0.7534, ece=0.056517, adaece=0.055466, classwise_ece=0.002660, nll=0.957608),
        (1.2, dict(ece=0.041064, adaece=0.040901, classwise_ece=0.002652, nll=0.956953)),
    ),
    "cifar10_cleanlab_test": (
        "cifar10_cleanlab_test_logits.npy",
        "cifar10_cleanlab_test_labels.npy",
        dict(accuracy=0.936, ece=0.028216, adaece=0.027967, classwise_ece=0.007032,
             mce=0.270150, nll=0.225939, brier=0.101236),
        dict(accuracy=0.936, ece=0.028216, adaece=0.027913, classwise_ece=0.007032, nll=0.225938),
        (1.5, dict(ece=0.013217, adaece=0.008294, classwise_ece=0.005099, nll=0.202297)),
    ),
}

COMPAT_FUNCS = dict(ece=ece_compat, adaece=adaece_compat, classwise_ece=classwise_ece_compat,
                    nll=nll_compat)


def _load(name):
    logits_file, labels_file = SETS[name][:2]
    lp, yp = REF / logits_file, REF / labels_file
    if not (lp.exists() and yp.exists()):
        pytest.skip("reference data not found in %s" % REF)
    return np.load(lp, allow_pickle=False), np.load(yp, allow_pickle=False)


@pytest.fixture(scope="module", params=list(SETS))
def dataset(request):
    logits, labels = _load(request.param)
    return request.param, logits, labels, softmax_rows(logits)


def test_reference_spec_values(dataset):
    name, logits, labels, probs = dataset
    spec = SETS[name][2]
    got = dict(
        accuracy=accuracy(probs, labels),
        ece=ece(probs, labels, 15),
        adaece=adaece(probs, labels, 15),
        classwise_ece=classwise_ece(probs, labels, 15),
        mce=mce(probs, labels, 15),
        nll=nll(logits, labels),
        brier=brier(probs, labels),
    )
    for key, want in spec.items():
        assert abs(got[key] - want) <= SPEC_TOL, (name, key, got[key], want)
    # NLL from logits and from probabilities agree
    assert abs(nll_probs(probs, labels) - got["nll"]) < 1e-9


def test_reference_compat_values(dataset):
    name, logits, labels, _ = dataset
    compat = SETS[name][3]
    for key, want in compat.items():
        if key == "accuracy":
            _, preds = top_label(softmax_f32(logits))
            got = float(np.mean(np.asarray(preds) == labels))
        else:
            got = COMPAT_FUNCS[key](logits, labels)
        assert abs(got - want) <= COMPAT_TOL, (name, key, got, want)


def test_reference_compat_values_after_temperature(dataset):
    name, logits, labels, _ = dataset
    t, values = SETS[name][4]
    # as the reference code: float32 logits divided by a float32 temperature parameter
    scaled = np.asarray(logits, dtype=np.float32) / np.float32(t)
    for key, want in values.items():
        got = COMPAT_FUNCS[key](scaled, labels)
        assert abs(got - want) <= COMPAT_TOL, (name, t, key, got, want)


# --------------------------------------------------------------------------- hand-computed cases
def test_single_sample():
    # N=1, p = (0.7, 0.3), y = 0: conf 0.7 (bin 10 of 15: 10/15 < 0.7 <= 11/15), correct.
    # ECE = 1/1 * |1 - 0.7| = 0.3 = MCE = AdaECE (all edges are 0.7; bin 0 is [0.7, 0.7]).
    probs, y = [[0.7, 0.3]], [0]
    assert equal_width_bin(0.7, 15) == 10
    assert ece(probs, y) == pytest.approx(0.3, abs=1e-15)
    assert mce(probs, y) == pytest.approx(0.3, abs=1e-15)
    assert adaece_edges([0.7], 15) == [0.7] * 16
    assert adaece(probs, y) == pytest.approx(0.3, abs=1e-15)
    # classwise: class 0 |0.7 - 1| = 0.3, class 1 |0.3 - 0| = 0.3 -> mean 0.3
    assert classwise_ece(probs, y) == pytest.approx(0.3, abs=1e-15)
    # Brier: (0.7-1)^2 + (0.3-0)^2 = 0.18; NLL = -ln 0.7
    assert brier(probs, y) == pytest.approx(0.18, abs=1e-15)
    assert nll_probs(probs, y) == pytest.approx(-math.log(0.7), abs=1e-15)
    assert accuracy(probs, y) == 1.0
    assert mean_confidence(probs) == 0.7
    share, acc = s99(probs, y)
    assert share == 0.0 and math.isnan(acc)
    # wrong label: ECE = |0 - 0.7| = 0.7
    assert ece(probs, [1]) == pytest.approx(0.7, abs=1e-15)


def test_single_sample_compat_drops_the_minimum():
    # logits (2, 0): p0 = 1/(1+e^-2) = 0.88079708; correct, so ECE = 1 - p0 = 0.11920292.
    # The reference AdaECE uses (e_0, e_1] for bin 0 with e_0 = the only confidence: sample dropped -> 0.
    logits, y = [[2.0, 0.0]], [0]
    assert ece_compat(logits, y) == pytest.approx(0.11920292202211769, abs=1e-7)
    assert adaece_compat(logits, y) == 0.0
    assert adaece(softmax_rows(logits), y) == pytest.approx(0.11920292202211769, abs=1e-15)
    assert nll(logits, y) == pytest.approx(math.log1p(math.exp(-2.0)), abs=1e-15)
    assert nll_compat(logits, y) == pytest.approx(math.log1p(math.exp(-2.0)), abs=1e-7)


def _four_samples():
    # K = 10. conf / pred / label / correct:
    #   s1: 0.20, pred 0, y 0 -> correct   (0.2 == 1/5 exactly: upper edge of bin 0 -> bin 0)
    #   s2: 0.15, pred 0, y 1 -> wrong     (bin 0)
    #   s3: 0.60, pred 0, y 1 -> wrong     (0.6 == 3/5 exactly: upper edge of bin 2 -> bin 2)
    #   s4: 1.00, pred 0, y 3 -> wrong     (exactly 1.0 -> last bin, 4)
    probs = [
        [0.2] + [0.1] * 8 + [0.0],
        [0.15] + [0.85 / 9] * 9,
        [0.6] + [0.4 / 9] * 9,
        [1.0] + [0.0] * 9,
    ]
    return probs, [0, 1, 1, 3]


def test_edges_and_empty_bins():
    probs, y = _four_samples()
    assert [equal_width_bin(c, 5) for c in (0.2, 0.15, 0.6, 1.0)] == [0, 0, 2, 4]
    assert equal_width_bin(0.0, 5) == 0
    assert equal_width_bin(1.0 + 1e-15, 5) == 4
    # M = 5; bins 1 and 3 are empty (skipped).
    # bin 0: {s1 correct 0.2, s2 wrong 0.15}: acc 0.5, conf 0.175, gap 0.325, weight 2/4 -> 0.1625
    # bin 2: {s3 wrong 0.6}: gap 0.6, weight 1/4 -> 0.15
    # bin 4: {s4 wrong 1.0}: gap 1.0, weight 1/4 -> 0.25
    # ECE = 0.5625   (had 0.2 gone to bin 1 it would be 0.25*0.15 + 0.25*0.8 + 0.15 + 0.25 = 0.6375)
    assert ece(probs, y, 5) == pytest.approx(0.5625, abs=1e-12)
    assert mce(probs, y, 5) == pytest.approx(1.0, abs=1e-12)
    assert accuracy(probs, y) == 0.25
    # AdaECE, M = 2: sorted conf (0.15, 0.2, 0.6, 1.0); interp at (0, 2, 4) -> edges (0.15, 0.6, 1.0)
    # bin 0 = [0.15, 0.6]: {s2, s1, s3}: acc 1/3, conf 0.95/3, gap 1/60, weight 3/4 -> 0.0125
    # bin 1 = (0.6, 1.0]: {s4}: gap 1, weight 1/4 -> 0.25;  AdaECE = 0.2625
    assert adaece_edges([0.2, 0.15, 0.6, 1.0], 2) == pytest.approx([0.15, 0.6, 1.0], abs=0)
    assert adaece(probs, y, 2) == pytest.approx(0.2625, abs=1e-12)


def test_classwise_hand():
    # K = 3, M = 5, labels (0, 0)
    # class 0: 0.7 (y=1) bin 3 -> |0.7-1|/2 = 0.15; 0.4 (y=1) bin 1 -> |0.4-1|/2 = 0.3  => 0.45
    # class 1: 0.2 (y=0) bin 0 -> 0.2/2 = 0.1;      0.5 (y=0) bin 2 -> 0.5/2 = 0.25     => 0.35
    # class 2: 0.1, 0.1 (y=0) both bin 0 -> mean 0.1, weight 1                           => 0.1
    # Classwise-ECE = (0.45 + 0.35 + 0.1) / 3 = 0.3
    probs, y = [[0.7, 0.2, 0.1], [0.4, 0.5, 0.1]], [0, 0]
    assert classwise_ece(probs, y, 5) == pytest.approx(0.3, abs=1e-12)
    # compat divides by max(label)+1 = 1: only class 0 -> 0.45
    logits = np.log(np.asarray(probs))
    assert classwise_ece_compat(logits, y, 5) == pytest.approx(0.45, abs=1e-6)


def test_classwise_zero_probability():
    # p = (1, 0), y = 1. class 0: 1.0 -> last bin, |1 - 0| = 1; class 1: 0.0 -> bin 0, |0 - 1| = 1
    # Classwise-ECE = (1 + 1) / 2 = 1
    assert classwise_ece([[1.0, 0.0]], [1], 15) == 1.0
    # The reference code: float32 softmax of (0, -200) is exactly (1, 0); a 0 falls in no bin
    # (lower edge exclusive), so class 1 contributes 0 -> (1 + 0) / 2 = 0.5.
    assert softmax_f32([[0.0, -200.0]]) == [[1.0, 0.0]]
    assert classwise_ece_compat([[0.0, -200.0]], [1], 15) == 0.5
    # float64 softmax keeps p1 = e^-200 > 0 in bin 0: 1.0
    assert classwise_ece(softmax_rows([[0.0, -200.0]]), [1], 15) == pytest.approx(1.0, abs=1e-15)


def test_top_label_ties_and_top5_rank():
    confs, preds = top_label([[0.25, 0.25, 0.5, 0.0], [0.4, 0.4, 0.2, 0.0]])
    assert preds == [2, 0] and confs == [0.5, 0.4]
    row = [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]
    # label 5: rank = #{p > 0.1} (1) + #{k < 5: p == 0.1} (4) = 5 -> not in top 5
    assert top5_accuracy([row], [5]) == 0.0
    # label 1: rank = 1 -> in top 5
    assert top5_accuracy([row], [1]) == 1.0


def test_s99():
    probs = [[0.995, 0.005], [0.99, 0.01], [0.98, 0.02], [0.6, 0.4]]
    share, acc = s99(probs, [0, 1, 0, 0])  # conf >= 0.99: samples 0 (correct) and 1 (wrong)
    assert share == 0.5 and acc == 0.5


def test_softmax_rows_stable():
    p = softmax_rows([[1000.0, 1000.0, -1000.0], [0.0, math.log(3.0), -1000.0]])
    assert p[0] == [0.5, 0.5, 0.0]
    assert p[1][0] == pytest.approx(0.25, abs=1e-15) and p[1][1] == pytest.approx(0.75, abs=1e-15)


def test_torch_linspace_f32():
    # torch's CPU linspace: step = float32(1)/15; i < 8: i*step, else 1 - (15-i)*step, all float32.
    edges = torch_linspace_f32(0.0, 1.0, 16)
    f = np.float32
    step = f(1.0) / f(15)
    assert edges[0] == 0.0 and edges[-1] == 1.0
    assert edges[1] == float(step) == float(f(1.0 / 15))
    assert edges[3] == float(f(3) * step)
    assert edges[12] == float(f(1) - f(3) * step)
    # Each edge is within 1 float32 ulp of the nearest float32 to b/15, but not always equal to it
    # (e.g. edge 3 is one ulp above float32(0.2)).
    for b, e in enumerate(edges):
        assert abs(e - float(f(b / 15))) <= float(np.spacing(f(b / 15)))
    assert edges[3] == 0.20000001788139343 and float(f(0.2)) == 0.20000000298023224
