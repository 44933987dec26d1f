"""Every engine present agrees with the numpy definition within the numeric contract (tests/libm.py,
docs/conventions.md), and the CPU engines give the same bits for any thread count and chunk size.

Engines, chosen as a user chooses them, each skipped with a reason where it is not there: "numpy" (the
definition), "fused" (the C extension, ``$CALIB_ENGINE`` or ``engine=``), torch on the CPU ("torch-cpu",
the code a GPU runs) and on CUDA (``device=``). Compared: every metric of ``evaluate(..., metrics="all")``,
the summary pass's per-sample values and classwise cells, the 1-D bin sums and the temperature fit's
passes; float32 and float64, logits and probabilities, K = 2, 1-D scores, N = 1, ties, extreme logits,
values on bin edges, float16 and bfloat16.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from libm import PER_VALUE, assert_agree, assert_bins_agree, assert_equal_up_to_exp

from calibrate_cli import fit_temperature
from calibrate_cli.calibrators.base import FitData
from calibrate_cli.calibrators.temperature import _nll_pass
from calibrate_cli.data import predictions as _predictions
from calibrate_cli.data.predictions import as_predictions
from calibrate_cli.engine import binning, kernels, torch_pass
from calibrate_cli.engine.devices import array_ops
from calibrate_cli.engine.summary import SummaryRequest, summarize
from calibrate_cli.evaluate import evaluate

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_CUDA = HAS_TORCH and __import__("torch").cuda.is_available()
FUSED = pytest.param("fused", marks=pytest.mark.skipif(not kernels.HAVE_CKERNEL,
                                                       reason="the C extension (the fused engine) is not built"))
CPU_ENGINES = ["numpy", FUSED]
DEVICES = ("torch-cpu", "cuda")
ENGINES = CPU_ENGINES + [
    pytest.param("torch-cpu", marks=pytest.mark.skipif(not HAS_TORCH, reason="needs torch (pip install torch==2.13.0)")),
    pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")),
]
DTYPES = [np.float32, np.float64]


def _choose(engine, monkeypatch=None) -> dict:
    """The keyword arguments (and ``$CALIB_ENGINE``) that run ``engine``."""
    if engine in DEVICES:
        return {"device": engine}
    if monkeypatch is not None:
        monkeypatch.setenv(kernels.ENGINE_ENV, engine)
    return {"engine": engine}


def _metrics(engine, monkeypatch, scores, labels, **kw):
    monkeypatch.setenv(kernels.ENGINE_ENV, "numpy")
    chosen = _choose(engine, monkeypatch)
    with np.errstate(divide="ignore"):
        return evaluate(scores, labels, metrics="all", device=chosen.get("device"), **kw).metrics


def _agree_with_numpy(engine, monkeypatch, scores, labels, **kw):
    """evaluate(metrics="all") by ``engine`` against the numpy definition: every metric in the contract."""
    want = _metrics("numpy", monkeypatch, scores, labels, **kw)
    got = _metrics(engine, monkeypatch, scores, labels, **kw)
    assert_agree(got, want)
    return got


def _probs(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(logits.dtype)


# ------------------------------------------------------------------ every metric of evaluate


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["logits", "probs"])
@pytest.mark.parametrize("n,k", [(3000, 2), (3000, 10), (400, 130), (1, 5), (2, 2)])
def test_every_metric_agrees(engine, dtype, kind, n, k, monkeypatch):
    rng = np.random.default_rng(n * 1000 + k)
    x = (rng.standard_normal((n, k)) * 3).astype(dtype)
    y = rng.integers(0, k, n)
    x[np.arange(n), y] += dtype(2)
    scores = x if kind == "logits" else _probs(x)
    _agree_with_numpy(engine, monkeypatch, scores, y, input_kind=kind)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_one_dimensional_binary_scores(engine, kind, monkeypatch):
    rng = np.random.default_rng(3)
    s = rng.standard_normal(1000) * 4 if kind == "logits" else rng.random(1000)
    y = rng.integers(0, 2, 1000)
    _agree_with_numpy(engine, monkeypatch, s, y, input_kind=kind)
    _agree_with_numpy(engine, monkeypatch, s[:1], y[:1], input_kind=kind)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [3, 12])
def test_ties(engine, dtype, k, monkeypatch):
    """Integer logits: ties of the maximum (argmax = lowest index), of the top-5 rank, of confidences
    (which the engines' sums may round a few ulps apart: AdaECE and KS-CE take them as ties)."""
    rng = np.random.default_rng(1)
    x = rng.integers(-2, 3, (4000, k)).astype(dtype)
    x[:40] = 0.0  # every class tied: confidence 1/K
    y = rng.integers(0, k, 4000)
    assert (x == x.max(axis=1, keepdims=True)).sum(axis=1).max() > 1
    got = _agree_with_numpy(engine, monkeypatch, x, y)
    assert got["accuracy"] == np.mean(x.argmax(axis=1) == y)  # a count: equal, lowest index wins


@pytest.mark.parametrize("engine", ENGINES)
def test_extreme_logits(engine, monkeypatch):
    """±1e308 (x − max overflows to −inf, exp 0), a logit that dwarfs the rest, float32's largest."""
    x = np.array([[1e308, -1e308, 0.0], [-1e308, -1e308, -1e308], [5.0, 5.0, -1e300], [3e17, 1.0, 2.0]])
    _agree_with_numpy(engine, monkeypatch, x, [1, 2, 0, 0])
    f = np.array([[3.4e38, -3.4e38, 0.0, 1.0], [1e-30, 0.0, -1e-30, 0.0]], dtype=np.float32)
    _agree_with_numpy(engine, monkeypatch, f, [0, 3])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("m", [5, 10, 15])
def test_probabilities_on_bin_edges(engine, m, monkeypatch):
    """Probabilities exactly b/M (the edges), confidence 1.0, a true-class probability of 0 (NLL inf)."""
    rows = [[0.3, 0.7], [0.1, 0.9], [0.0, 1.0], [1.0, 0.0], [0.5, 0.5], [0.2, 0.8], [0.6, 0.4]]
    probs = np.array(rows * 50)
    labels = np.tile([0, 1, 0, 1, 1, 0, 0], 50)
    got = _agree_with_numpy(engine, monkeypatch, probs, labels, input_kind="probs", n_bins=m)
    assert got["nll"] == np.inf
    rng = np.random.default_rng(m)
    p = rng.integers(0, m + 1, (600, 6)).astype(np.float64)
    p[:, 0] += p.sum(axis=1) == 0
    p = p / p.sum(axis=1, keepdims=True)
    edges = binning.uniform_edges(m)
    p[:, :2] = edges[rng.integers(0, m + 1, (600, 2))] / 2  # on the float64 edges b/M, halved
    p[:, -1] = 1.0 - p[:, :-1].sum(axis=1)
    keep = (p >= 0).all(axis=1)
    _agree_with_numpy(engine, monkeypatch, p[keep], rng.integers(0, 6, keep.sum()), input_kind="probs", n_bins=m)


# ------------------------------------------------------------------ the summary pass, value by value


def _assert_summaries_agree(a, b, kind):
    """``a`` (numpy) and ``b``: counts and flags equal, values from exp/log within PER_VALUE each."""
    for name in ("correct", "top5"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            np.testing.assert_array_equal(x, y, err_msg=name)
    assert_equal_up_to_exp(b.confidences, a.confidences, err_msg="conf")
    finite = np.isfinite(a.nll)
    np.testing.assert_array_equal(np.isfinite(b.nll), finite)
    assert_equal_up_to_exp(b.nll[finite], a.nll[finite], err_msg="nll")
    # Brier: Σ_k of K terms, each within 2·PER_VALUE, summed in another order
    np.testing.assert_allclose(b.brier, a.brier, rtol=0, atol=a.k * (4 * PER_VALUE + 2.0**-51))
    np.testing.assert_array_equal(b.classwise.count, a.classwise.count)
    np.testing.assert_array_equal(b.classwise.sum_correct, a.classwise.sum_correct)
    assert_equal_up_to_exp(b.classwise.sum_conf, a.classwise.sum_conf, additions=a.n, err_msg="sum_conf")


@pytest.mark.parametrize("engine", CPU_ENGINES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("closed", [True, False])
def test_bin_sums(engine, dtype, closed, monkeypatch):
    """1-D binning: equal-width (values on the edges, 0 and 1), equal-mass and float32 edges."""
    rng = np.random.default_rng(9)
    conf = np.concatenate([rng.random(3000), binning.uniform_edges(15), [0.0, 1.0, 0.2, 0.5]]).astype(dtype)
    correct = rng.random(conf.shape[0]) < 0.5
    for edges in (binning.uniform_edges(15), binning.uniform_edges(10), binning.equal_mass_edges(conf, 15),
                  binning.torch_linspace_edges(15), binning.uniform_edges(1)):
        values = conf.astype(edges.dtype)
        monkeypatch.setenv(kernels.ENGINE_ENV, "numpy")
        want = binning.bin_statistics(values, correct, edges, lowest_closed=closed)
        monkeypatch.setenv(kernels.ENGINE_ENV, engine)
        assert_bins_agree(binning.bin_statistics(values, correct, edges, lowest_closed=closed), want)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["logits", "probs"])
@pytest.mark.parametrize("n,k", [(1, 2), (2000, 2), (37, 3), (2000, 7), (64, 31), (64, 32), (64, 33), (20, 63), (20, 64),
                                 (20, 65), (9, 129), (300, 300)])
def test_rows_of_every_length(engine, dtype, kind, n, k):
    """Row lengths around the compiled loops' vector width and their paths (short rows, the classwise
    lowest-bin cells from 32 classes on), ties among a quarter of the rows: every per-sample value and
    classwise cell of the summary pass, and the top-label pass's."""
    rng = np.random.default_rng(n * 100 + k)
    x = (rng.standard_normal((n, k)) * 3).astype(dtype)
    x[: n // 4] = np.round(x[: n // 4])
    x[n // 2] = 0.0  # every class tied: p = 1/K, argmax 0
    scores = x if kind == "logits" else _probs(x.astype(np.float64)).astype(dtype)
    p = as_predictions(scores, rng.integers(0, k, n), kind)
    full = summarize(p, engine="numpy")
    _assert_summaries_agree(full, summarize(p, **_choose(engine)), kind)
    lean = summarize(p, **_choose(engine), request=SummaryRequest(sums=frozenset({"samples"})))
    np.testing.assert_array_equal(lean.correct, full.correct)
    assert_equal_up_to_exp(lean.confidences, full.confidences)


@pytest.mark.parametrize("engine", ENGINES)
def test_near_ties_of_the_maximum(engine):
    """Logits within an ulp-sized exp of the maximum: p_j = e_j/Σe rounds to the top probability, and
    the lowest such index is the prediction (exp(−1e-17) is 1), before and after the exact maximum."""
    x = np.array([[0.0, 1e-17, -1.0], [1e-17, 0.0, -1.0], [-3.0, 0.0, 2e-300], [1.0, 1.0 - 2.0**-52, 1.0],
                  [1.0 - 2.0**-53, 1.0, 0.9]])  # e_0 = 1 − 2^-53 < 1, yet e_0/Σe rounds to 1/Σe: index 0
    y = np.array([0, 0, 1, 1, 1])
    p = as_predictions(x, y, "logits")
    want = summarize(p, engine="numpy")
    got = summarize(p, **_choose(engine))
    assert want.correct.tolist() == [True, True, True, False, False]
    _assert_summaries_agree(want, got, "logits")
    f = np.array([[1e-30, np.nextafter(np.float32(1e-30), np.float32(1)), -1e-30]], dtype=np.float32)
    q = as_predictions(f, np.array([0]), "logits")
    _assert_summaries_agree(summarize(q, engine="numpy"), summarize(q, **_choose(engine)), "logits")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("k", [5, 40])
def test_probabilities_on_the_first_edge(engine, k):
    """Probabilities exactly 1/M (the upper edge of bin 0, so in bin 0) and 0, at few and many classes."""
    m = 15
    rng = np.random.default_rng(k)
    p = rng.random((300, k))
    p[:, 1] = 0.0
    p[:, 2:] *= (1.0 - 2.0 / m) / p[:, 2:].sum(axis=1, keepdims=True)
    p[:, 0] = p[:, 3] = binning.uniform_edges(m)[1]
    p[:, 4:] *= (1.0 - 2.0 / m - p[:, 2:3]) / p[:, 4:].sum(axis=1, keepdims=True)
    pr = as_predictions(p, rng.integers(0, k, 300), "probs")
    _assert_summaries_agree(summarize(pr, engine="numpy", n_bins=m), summarize(pr, **_choose(engine), n_bins=m), "probs")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_half_precision_scores(engine, half):
    """float16 and bfloat16 (a row reader of 16-bit patterns) scores: the values of their exact float32."""
    from calibrate_cli.data.arrays import BFloat16Rows, widen_bf16

    rng = np.random.default_rng(11)
    x = (rng.standard_normal((500, 70)) * 4).astype(np.float32)
    y = rng.integers(0, 70, 500)
    if half == "float16":
        scores = x.astype(np.float16)
        wide = scores.astype(np.float32)
    else:
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)
        scores, wide = BFloat16Rows(bits), widen_bf16(bits)
    want = summarize(as_predictions(wide, y, "logits"), engine="numpy")
    _assert_summaries_agree(want, summarize(as_predictions(scores, y, "logits"), **_choose(engine)), "logits")


@pytest.mark.skipif(not kernels.HAVE_CKERNEL, reason="the C extension (the fused engine) is not built")
@pytest.mark.parametrize("k", [10, 40, 100, 300])
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_c_rows_give_the_same_bits_in_any_split_whatever_else_is_asked(k, dtype):
    """A row's values are the same bits whatever the rows beside it in a call (the cells' counts equal,
    their Σp the same additions grouped by call), and with or without the classwise cells or in the
    top-label pass: asking for one more metric never moves the others."""
    rng = np.random.default_rng(k)
    x = (rng.standard_normal((150, k)) * 3).astype(dtype)
    x[:10] = np.round(x[:10])
    y = rng.integers(0, k, 150)
    edges = binning.uniform_edges(15)
    whole = kernels.fused_rows(x, y, edges, is_logits=True, top5=True, classwise=True)
    for step in (1, 7, 64):
        parts = [kernels.fused_rows(x[a:a + step], y[a:a + step], edges, is_logits=True, top5=True, classwise=True)
                 for a in range(0, 150, step)]
        for i in range(5):
            np.testing.assert_array_equal(np.concatenate([part[i] for part in parts]), whole[i])
        for i in (0, 2):
            np.testing.assert_array_equal(sum(part[5][i] for part in parts), whole[5][i])
        np.testing.assert_allclose(sum(part[5][1] for part in parts), whole[5][1], rtol=1e-13, atol=1e-15)
    no_cells = kernels.fused_rows(x, y, edges, is_logits=True, top5=True, classwise=False)
    for a, b in zip(no_cells[:5], whole[:5]):
        np.testing.assert_array_equal(a, b)
    conf, correct = kernels.top_label_rows(x, y, is_logits=True)
    np.testing.assert_array_equal(conf, whole[0])
    np.testing.assert_array_equal(correct, whole[1])


# ------------------------------------------------------------------ temperature scaling


def _fit_data(n, k, seed, dtype=np.float32, kind="logits"):
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(n, k)) * 2.5).astype(dtype)
    y = rng.integers(0, k, n)
    x[np.arange(n), y] += dtype(3)
    x[: n // 5] = np.round(x[: n // 5])
    if kind == "probs":
        p = _probs(x.astype(np.float64))
        p[:3, 0] = 0.0  # log-probabilities of 0
        p /= p.sum(axis=1, keepdims=True)
        return p, y
    return x, y


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["logits", "probs"])
@pytest.mark.parametrize("n,k", [(500, 3), (400, 2), (120, 100), (1, 4)])
def test_nll_pass_sums(engine, dtype, kind, n, k):
    """The Newton pass's sums (mean NLL, its derivative, the variance) at several β."""
    x, y = _fit_data(n, k, n + k, dtype, kind)
    data = FitData.prepare(x, y, kind, "scores", "labels")
    for beta in (0.05, 0.7, 1.0, 3.0, 40.0):
        want = _nll_pass(data, beta, "numpy")
        got = _nll_pass(data, beta, array_ops(engine) if engine in DEVICES else engine)
        assert_agree(list(got), list(want), rel=1e-12, abs=1e-13)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("search,objective", [("nll", None), ("grid", "ece"), ("grid", "nll")])
def test_temperature_fits_agree(engine, search, objective, monkeypatch):
    x, y = _fit_data(3000, 10, 7)
    kw = {"search": search} if objective is None else {"search": search, "objective": objective}
    monkeypatch.setenv(kernels.ENGINE_ENV, "numpy")
    monkeypatch.setattr(torch_pass, "TORCH_CHUNK_ELEMENTS", 10 * 100 * 7)  # on a device: chunks of 7 rows at 100 T
    want = fit_temperature(x, y, **kw)
    got = fit_temperature(x, y, device=_choose(engine, monkeypatch).get("device"), **kw)
    assert_agree([got.objective_value, got.objective_at_one], [want.objective_value, want.objective_at_one])
    if search == "nll":
        assert got.temperature == pytest.approx(want.temperature, rel=1e-9)
    else:  # a grid point: the definition's curve is at its minimum there, within the contract
        assert_agree([v for _, v in got.curve], [v for _, v in want.curve])
        curve = dict(want.curve)
        assert_agree(curve[got.temperature], min(curve.values()))


# ------------------------------------------------------------------ determinism


@pytest.mark.parametrize("engine", CPU_ENGINES)
def test_same_bits_for_any_thread_count_and_chunk_size(engine, monkeypatch):
    """Any thread count: every output the same bits (chunks are fixed by the input's shape, and their
    results combined in chunk order). Any chunk size: the same metrics too, except classwise-ECE,
    whose per-chunk (class, bin) cells are added chunk by chunk, and the NLL pass's chunk sums."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((30_000, 10)) * 3).astype(np.float32)
    x[:500] = np.round(x[:500])
    y = rng.integers(0, 10, 30_000)
    monkeypatch.setenv(kernels.ENGINE_ENV, engine)
    by_threads, by_chunks = [], []
    for threads, chunk in (("1", 7000), ("2", 7000), ("3", 7000), ("2", 1 << 20), ("2", 40_010)):
        monkeypatch.setenv("CALIB_THREADS", threads)
        monkeypatch.setattr(_predictions, "_CHUNK_ELEMENTS", chunk)
        report = evaluate(x, y, metrics="all")
        data = FitData.prepare(x, y, "logits", "scores", "labels")
        if chunk == 7000:
            by_threads.append((report.metrics, report.bins.sum_conf.tolist(), report.adaptive_bins.edges.tolist(),
                               _nll_pass(data, 0.8, engine)))
        by_chunks.append({name: v for name, v in report.metrics.items() if name != "classwise_ece"})
    assert all(r == by_threads[0] for r in by_threads[1:])
    assert all(r == by_chunks[0] for r in by_chunks[1:])


@pytest.mark.skipif(not kernels.HAVE_CKERNEL, reason="the C extension (the fused engine) is not built")
@pytest.mark.parametrize("k", [2, 3, 4, 5, 6, 10, 20, 30, 63, 64])
def test_the_c_classwise_bins_of_probabilities_on_an_edge(k):
    """Rows of equal logits: p = 1/K in the C loop (1 · (1/K)) and in numpy (exp 0 / K), the same
    float64; on or beside an edge b/M for many M, its bin is the definition's (assign_bins), never
    ⌊p·M⌋ where p·M rounds to an integer."""
    x = np.zeros((70, k), dtype=np.float32)  # more than one block of rows in the column loop
    y = np.arange(70) % k
    p = np.float64(1.0) / k
    for m in range(1, 31):
        edges = binning.uniform_edges(m)
        want = np.zeros((k, m), dtype=np.int64)
        want[:, binning.assign_bins(np.array([p]), edges)[0]] = 70
        _, _, _, _, _, (count, sum_p, sum_y) = kernels.fused_rows(x, y, edges, is_logits=True, top5=False,
                                                                 classwise=True)
        np.testing.assert_array_equal(count, want, err_msg=f"M = {m}")
        np.testing.assert_array_equal(sum_y.sum(axis=0), want[0])  # every label in the bin of p
