"""calibrate_cli.engine.device_eval: top-label metrics of torch tensors on their device, against the independent
float64 loops of tests/naive_reference.py and tests/naive_metrics.py, and np.sort for the selection."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import math  # noqa: E402

import naive_metrics  # noqa: E402
import naive_reference as naive  # noqa: E402

from calibrate_cli.engine import device_eval, sorting  # noqa: E402
from calibrate_cli.engine.device_eval import DEVICE_METRICS, device_metrics  # noqa: E402
from calibrate_cli.engine.sorting import order_statistics  # noqa: E402
from calibrate_cli.errors import InputError  # noqa: E402

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
#: the CPU (torch's eager pass) and, where there is one, the GPU (the pass compiled by torch.compile)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU"))]


def synthetic(n, k, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = (rng.standard_normal((n, k)) * 2).astype(dtype)
    logits[np.arange(n), labels] += 2
    return logits, labels


def reference_metrics(scores, labels, input_kind="logits", n_bins=15) -> dict:
    """Every metric of DEVICE_METRICS by the independent float64 loops of tests/naive_reference.py and
    tests/naive_metrics.py (binary scores become the two columns calib defines: [0, s] for log-odds,
    [1 − s, s] for p(class 1))."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 1:
        scores = np.stack([1.0 - scores, scores] if input_kind == "probs" else [np.zeros_like(scores), scores], axis=1)
    probs = scores if input_kind == "probs" else np.array(naive.softmax_rows(scores))
    share, s99_accuracy = naive.s99(probs, labels)
    out = {
        "accuracy": naive.accuracy(probs, labels),
        "ece": naive.ece(probs, labels, n_bins),
        "adaece": naive.adaece(probs, labels, n_bins),
        "mce": naive.mce(probs, labels, n_bins),
        "rms_ce": naive_metrics.rms_ce(probs, labels, n_bins),
        "debiased_l2_ce": naive_metrics.debiased_l2_ce(probs, labels, n_bins),
        "nll": naive.nll_probs(probs, labels) if input_kind == "probs" else naive.nll(scores, labels),
        "brier": naive.brier(probs, labels),
        "top5_accuracy": naive.top5_accuracy(probs, labels) if scores.shape[1] > 5 else None,
        "mean_confidence": naive.mean_confidence(probs),
        "s99_share": share,
        "s99_accuracy": None if math.isnan(s99_accuracy) else s99_accuracy,
    }
    out["error"] = 1.0 - out["accuracy"]
    return out


def assert_matches_reference(scores, labels, input_kind="logits", n_bins=15, device="cpu", tol=1e-15):
    expected = reference_metrics(scores, labels, input_kind, n_bins)
    got = device_metrics(torch.as_tensor(scores, device=device), torch.as_tensor(labels, device=device),
                         input_kind=input_kind, n_bins=n_bins)
    assert set(got) == set(DEVICE_METRICS) == set(expected)
    for name in DEVICE_METRICS:
        if expected[name] is None:
            assert got[name] is None, name
        else:
            assert got[name] == pytest.approx(expected[name], abs=tol, rel=1e-12), name  # tests/libm.py
    return got, expected


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few rows, and a selection that refines (tiny buckets) rather than sorting at once."""
    monkeypatch.setattr(device_eval, "EAGER_CHUNK_VALUES", 37)
    monkeypatch.setattr(sorting, "SELECT_GATHER", 8)
    monkeypatch.setattr(sorting, "SELECT_BUCKETS", 8)
    monkeypatch.setattr(sorting, "DEVICE_PIECE", 101)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("k", [2, 3, 10, 130])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logits_match_the_numpy_engine(k, dtype, device, small_chunks):
    logits, labels = synthetic(3001, k, seed=k, dtype=dtype)
    assert_matches_reference(logits, labels, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_probabilities_binary_scores_and_one_sample(device, small_chunks):
    logits, labels = synthetic(999, 7, seed=3, dtype=np.float64)
    probs = np.array(naive.softmax_rows(logits))
    assert_matches_reference(probs, labels, input_kind="probs", device=device)
    rng = np.random.default_rng(5)
    y2 = rng.integers(0, 2, 500)
    assert_matches_reference(rng.normal(size=500), y2, device=device)  # 1-D log-odds
    assert_matches_reference(rng.uniform(size=500), y2, input_kind="probs", device=device)  # 1-D p(class 1)
    got, _ = assert_matches_reference(np.array([[0.5, 2.0, -1.0]]), np.array([1]), device=device)  # N = 1
    assert got["accuracy"] == 1.0


@pytest.mark.parametrize("device", DEVICES)
def test_ties_and_confidences_on_bin_edges(device, small_chunks):
    """Equal logits (argmax takes the first), and probabilities exactly on the edges b/M."""
    logits = np.zeros((40, 4))
    logits[::3, 2] = 1.0
    labels = np.arange(40) % 4
    assert_matches_reference(logits, labels, device=device)
    m = 10
    conf = np.repeat(np.arange(1, m + 1) / m, 7)
    conf = conf[conf >= 0.5]
    probs = np.stack([conf, 1 - conf], axis=1)
    labels = np.arange(conf.shape[0]) % 2
    assert_matches_reference(probs, labels, input_kind="probs", n_bins=m, tol=1e-15, device=device)
    # a confidence of exactly 1.0: one huge logit
    assert_matches_reference(np.array([[0.0, 800.0], [1.0, 0.0]]), np.array([1, 1]), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_metrics_subset_and_refusals(device):
    logits, labels = synthetic(100, 5)
    x, y = torch.as_tensor(logits, device=device), torch.as_tensor(labels, device=device)
    assert set(device_metrics(x, y, metrics=["ece", "nll"])) == {"ece", "nll"}
    with pytest.raises(InputError, match="not ace"):
        device_metrics(x, y, metrics=["ace"])
    extras = device_metrics(x, y, metrics=["classwise_ece", "ks_ce", "smooth_ece"])
    probs = np.array(naive.softmax_rows(np.asarray(logits, dtype=np.float64)))
    assert extras["classwise_ece"] == pytest.approx(naive.classwise_ece(probs, labels), rel=1e-12, abs=1e-15)
    assert extras["ks_ce"] == pytest.approx(naive_metrics.ks_ce(probs, labels), rel=1e-12, abs=1e-15)
    assert extras["smooth_ece"] == pytest.approx(naive_metrics.smooth_ece_top_label(probs, labels), rel=1e-9)
    with pytest.raises(InputError, match="torch tensors"):
        device_metrics(logits, labels)
    bad = x.clone()
    bad[7, 2] = float("nan")
    with pytest.raises(InputError, match=r"scores contain NaN \(first at row 7\)"):
        device_metrics(bad, y)
    with pytest.raises(InputError, match=r"class indices in \[0, 5\)"):
        device_metrics(x, y + 1)
    with pytest.raises(InputError, match="labels must be integers"):
        device_metrics(x, y.double())
    with pytest.raises(InputError, match="sum to 1"):
        device_metrics(x.softmax(dim=1) * 0.9, y, input_kind="probs")
    with pytest.raises(InputError, match="labels of shape"):
        device_metrics(x, y[:-1])


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.sampled_from([0.0, -0.0, 1e-300, 5e-324, 0.1, 0.25, 0.5, 0.5000000000000001, 0.75, 1.0])
                    | st.floats(0, 1), min_size=1, max_size=300),
    data=st.data(),
    buckets=st.sampled_from([2, 4, 16]),
    gather=st.integers(1, 40),
    piece=st.sampled_from([1, 7, 1 << 24]),
)
def test_order_statistics_equal_np_sort(values, data, buckets, gather, piece):
    """A tensor's order statistics, selected by torch, with tiny buckets, gathers and pieces so that
    every path (one-value sets, gathered buckets, buckets split again, ranges too narrow to split) is
    taken: equal to np.sort."""
    values = np.array(values, dtype=np.float64)
    ranks = np.array(data.draw(st.lists(st.integers(0, values.shape[0] - 1), min_size=1, max_size=40)))
    old = sorting.SELECT_BUCKETS, sorting.SELECT_GATHER, sorting.DEVICE_PIECE
    sorting.SELECT_BUCKETS, sorting.SELECT_GATHER, sorting.DEVICE_PIECE = buckets, gather, piece
    try:
        got = order_statistics(torch.as_tensor(values), ranks)
    finally:
        sorting.SELECT_BUCKETS, sorting.SELECT_GATHER, sorting.DEVICE_PIECE = old
    np.testing.assert_array_equal(got, np.sort(values)[ranks])


@pytest.mark.parametrize("device", DEVICES)
def test_order_statistics_of_clustered_confidences_at_the_default_sizes(device):
    """Half the values exactly 1.0, the rest within 1e-6 of it (an over-confident model), a spread set,
    and float32 confidences: buckets are split several times; equal to np.sort, bit for bit."""
    rng = np.random.default_rng(4)
    n = 1_000_000
    clustered = np.where(rng.random(n) < 0.5, 1.0, 1 - rng.random(n) * 1e-6)
    spread = rng.random(n) ** 0.1
    ranks = np.unique(np.r_[0, n - 1, rng.integers(0, n, 30)])
    for v in (clustered, spread, spread.astype(np.float32)):
        got = order_statistics(torch.as_tensor(v, device=device), ranks)
        assert got.dtype == np.float64
        assert np.array_equal(got.view(np.int64), np.sort(v).astype(np.float64)[ranks].view(np.int64))


def test_order_statistics_refuse_ranks_out_of_range():
    with pytest.raises(ValueError):
        order_statistics(torch.tensor([0.5]), [1])
    assert order_statistics(torch.tensor([0.5]), []).shape == (0,)


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("k", [2, 10, 100, 1100])
def test_cuda_compiled_equals_numpy_and_eager(k, monkeypatch):
    logits, labels = synthetic(200_003 if k < 1000 else 9_001, k, seed=k)
    compiled, _ = assert_matches_reference(logits, labels, device="cuda")
    monkeypatch.setenv(device_eval.COMPILE_ENV, "0")
    eager = device_metrics(torch.as_tensor(logits, device="cuda"), torch.as_tensor(labels, device="cuda"))
    for name in DEVICE_METRICS:  # two paths (compiled, eager): the contract of tests/libm.py
        assert compiled[name] == pytest.approx(eager[name], rel=1e-12, abs=1e-15), name
    again = device_metrics(torch.as_tensor(logits, device="cuda"), torch.as_tensor(labels, device="cuda"))
    assert again == eager  # a CUDA run repeats bit for bit




@pytest.mark.parametrize("device", DEVICES)
def test_half_precision_non_contiguous_scores_and_narrow_or_bool_labels(device):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((500, 4)) * 2).astype(np.float16)
    y = rng.integers(0, 4, 500)
    expected = reference_metrics(x, y)
    columns_major = torch.as_tensor(x, device=device).T.contiguous().T  # a non-contiguous view
    for scores, labels in [(torch.as_tensor(x, device=device), torch.as_tensor(y.astype(np.int32), device=device)),
                           (columns_major, torch.as_tensor(y.astype(np.uint8), device=device))]:
        got = device_metrics(scores, labels)
        for name in DEVICE_METRICS:
            assert got[name] == pytest.approx(expected[name], abs=1e-12), name
    yb = y % 2 == 1
    xb = rng.standard_normal(500)
    expected = reference_metrics(xb, yb)
    got = device_metrics(torch.as_tensor(xb, device=device), torch.as_tensor(yb, device=device))
    assert got["ece"] == pytest.approx(expected["ece"], abs=1e-12)
    with pytest.raises(InputError, match="n_bins"):
        device_metrics(torch.as_tensor(x, device=device), torch.as_tensor(y, device=device), n_bins=0)
    with pytest.raises(InputError, match="input_kind"):
        device_metrics(torch.as_tensor(x, device=device), torch.as_tensor(y, device=device), input_kind="prob")


@pytest.mark.parametrize("device", DEVICES)
def test_probabilities_given_as_logits_refused_as_evaluate_refuses_them(device):
    """Unstated input kind: rows in [0, 1] summing to 1 are refused with evaluate's message; for
    bfloat16 the tolerance is bfloat16's (2·2⁻⁷), as for a bfloat16 file; 1-D scores in [0, 1] warn."""
    from calibrate_cli import evaluate
    from calibrate_cli.errors import CalibWarning

    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(6), 400)
    y = torch.as_tensor(rng.integers(0, 6, 400), device=device)
    with pytest.raises(InputError) as on_host:
        evaluate(p, y.cpu().numpy())
    with pytest.raises(InputError) as on_device:
        device_metrics(torch.as_tensor(p, device=device), y)
    assert str(on_device.value) == str(on_host.value)
    off = torch.as_tensor(p * 1.005, device=device).to(torch.bfloat16)  # sums 1.005 ± bfloat16 rounding
    assert (off.double().sum(1) - 1).abs().max() > 1e-3
    with pytest.raises(InputError, match="look like probabilities"):
        device_metrics(off, y)
    device_metrics(torch.as_tensor(p, device=device), y, input_kind="probs")  # stated: accepted
    with pytest.warns(CalibWarning, match="every score lies in"):
        device_metrics(torch.as_tensor(rng.uniform(size=400), device=device), y % 2)


@pytest.mark.parametrize("device", DEVICES)
def test_bfloat16_probabilities_take_bfloat16s_tolerance(device):
    """Stated bfloat16 probabilities whose rows sum to 1 within bfloat16's rounding (2·2⁻⁷), not within
    float32's 1e-3, are accepted, as a bfloat16 file is; their metrics are those of their values."""
    rng = np.random.default_rng(4)
    p = rng.dirichlet(np.ones(6), 300)
    y = rng.integers(0, 6, 300)
    off = torch.as_tensor(p * 1.004, device=device).to(torch.bfloat16)
    assert (off.double().sum(1) - 1).abs().max() > 1e-3
    got = device_metrics(off, torch.as_tensor(y, device=device), input_kind="probs", metrics=["ece", "accuracy"])
    probs = off.double().cpu().numpy()
    assert got["accuracy"] == pytest.approx(naive.accuracy(probs, y), rel=1e-12)
    assert got["ece"] == pytest.approx(naive.ece(probs, y, 15), rel=1e-9, abs=1e-12)
