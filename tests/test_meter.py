"""calibrate_cli.Meter: batches summarised one by one give evaluate()'s report of their concatenation
(within the numeric contract of tests/libm.py); two gloo processes give one process's report; it runs
inside a small torch loop."""

from __future__ import annotations

import json
import math
import socket

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libm import assert_agree

import calibrate_cli as calib
from calibrate_cli.errors import InputError
from calibrate_cli.metrics.meter import Meter


def _data(n, k, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(scale=2.0, size=(n, k))
    logits[np.arange(n), labels] += 1.5
    return logits.astype(dtype), labels


def _comparable(report):
    out = report.to_dict()
    out.pop("device")
    return out


def _naive_ece(probs, labels, n_bins):
    """A float64 loop: Σ_b |B_b|/N |acc − conf| over (b/M, (b+1)/M], conf = max p, argmax lowest index."""
    count, s_conf, s_corr = [0] * n_bins, [0.0] * n_bins, [0.0] * n_bins
    for p, y in zip(probs, labels):
        conf = max(p)
        pred = list(p).index(conf)
        b = min(n_bins - 1, max(0, math.ceil(conf * n_bins) - 1))
        count[b] += 1
        s_conf[b] += conf
        s_corr[b] += pred == y
    return sum(abs(s_corr[b] - s_conf[b]) for b in range(n_bins)) / len(labels)


def test_meter_is_exported():
    assert calib.Meter is Meter


@pytest.mark.parametrize("batches", [[300], [1, 299], [100, 100, 100], [7] * 42 + [6], [150, 0, 150]])
def test_any_batching_equals_evaluate(batches):
    logits, labels = _data(300, 7)
    meter = Meter(n_bins=10)
    start = 0
    for size in batches:
        if size:
            meter.update(logits[start:start + size], labels[start:start + size])
        start += size
    assert meter.n == 300
    assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(logits, labels, n_bins=10)))


@settings(max_examples=12, deadline=None)
@given(cuts=st.lists(st.integers(0, 60), max_size=6), k=st.sampled_from([2, 3, 11]))
def test_random_batching_equals_evaluate(cuts, k):
    logits, labels = _data(60, k, seed=k)
    edges = sorted({0, 60, *cuts})
    meter = Meter(n_bins=7)
    for a, b in zip(edges, edges[1:]):
        meter.update(logits[a:b], labels[a:b])
    assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(logits, labels, n_bins=7)))


def test_hand_computed_probs_and_binary():
    # two samples, 75 % sure of each, right once: one bin (0.5, 0.75], ECE = |0.5 − 0.75| = 0.25
    meter = Meter(n_bins=4, input_kind="probs")
    meter.update(np.array([[0.75, 0.25]]), np.array([0]))
    meter.update(np.array([[0.25, 0.75]]), np.array([0]))
    report = meter.compute()
    assert report.metrics["ece"] == pytest.approx(0.25, abs=1e-15)
    assert report.metrics["accuracy"] == 0.5
    # 1-D binary probabilities (K = 2), N = 1 per batch
    p = np.array([0.9, 0.2, 0.6, 0.51])
    y = np.array([1, 0, 0, 1])
    meter = Meter(n_bins=5, input_kind="probs")
    for i in range(4):
        meter.update(p[i:i + 1], y[i:i + 1])
    probs = np.stack([1 - p, p], axis=1)
    assert meter.compute().metrics["ece"] == pytest.approx(_naive_ece(probs, y, 5), rel=1e-12, abs=1e-15)
    assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(p, y, input_kind="probs", n_bins=5)))


def test_ties_and_float32():
    logits, labels = _data(64, 3, seed=3, dtype=np.float32)
    logits[:10] = 0.0  # ties: the lowest index wins
    meter = Meter()
    for i in range(0, 64, 16):
        meter.update(logits[i:i + 16], labels[i:i + 16])
    assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(logits, labels)))


def test_merge_equals_one_meter_and_reset():
    logits, labels = _data(200, 5, seed=1)
    a, b = Meter(), Meter()
    a.update(logits[:80], labels[:80]).update(logits[80:120], labels[80:120])
    b.update(logits[120:], labels[120:])
    a.merge(b)
    assert_agree(_comparable(a.compute()), _comparable(calib.evaluate(logits, labels)))
    assert a.compute().n == 200  # compute() may be called again
    a.reset()
    assert a.n == 0
    with pytest.raises(InputError, match="no samples"):
        a.compute()
    with pytest.raises(InputError, match="bins"):
        Meter(n_bins=10).merge(Meter(n_bins=15))


def test_a_later_batch_that_looks_like_probabilities_keeps_the_first_batch_kind():
    # [[0, 1]] alone looks like probabilities; after a batch of logits it is logits, as in the concatenation
    scores = np.array([[2.0, 0.0], [0.0, 1.0]])
    labels = np.array([0, 0])
    meter = Meter(n_bins=4).update(scores[:1], labels[:1]).update(scores[1:], labels[1:])
    assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(scores, labels, n_bins=4)))
    with pytest.raises(InputError, match="look like probabilities"):
        Meter().update(scores[1:], labels[1:])  # a first batch as evaluate would refuse it


def test_inconsistent_batches_are_refused():
    meter = Meter()
    meter.update(np.zeros((2, 3)), np.array([0, 1]))
    with pytest.raises(InputError, match="K = 4"):
        meter.update(np.zeros((2, 4)), np.array([0, 1]))
    with pytest.raises(InputError, match="batch 2 labels"):
        meter.update(np.zeros((2, 3)), np.array([0, 5]))


def test_torch_tensors_and_a_small_loop():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    x = torch.randn(96, 4)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(3):
        for i in range(0, 96, 32):  # train
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32]).backward()
            opt.step()
        meter, outputs = Meter(n_bins=10), []
        with torch.no_grad():  # evaluate batch by batch
            for i in range(0, 96, 20):
                logits = model(x[i:i + 20])
                meter.update(logits, y[i:i + 20])
                outputs.append(logits)
        whole = torch.cat(outputs).numpy()
        assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(whole, y.numpy(), n_bins=10)))
    # half precision on its way in: upcast exactly to float32 on the host
    half = torch.cat(outputs).to(torch.bfloat16)
    meter = Meter().update(half, y)
    assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(half.float().numpy(), y.numpy())))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: (N, K, per-rank sizes): dense classwise statistics on both ranks; then a rank with fewer samples than
#: bins and K·M > 2^20 (sparse cells there, dense on the other)
GLOO_CASES = [(101, 6, [60, 41]), (33, 100_000, [3, 30])]


def _gloo_worker(rank, world, port, out_dir):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        for case, (n, k, sizes) in enumerate(GLOO_CASES):
            logits, labels = _data(n, k, seed=5)
            start = sum(sizes[:rank])
            meter = Meter(n_bins=12)
            for i in range(start, start + sizes[rank], 9):  # uneven batches on each rank
                stop = min(i + 9, start + sizes[rank])
                meter.update(logits[i:stop], labels[i:stop])
            meter.all_reduce()
            report = _comparable(meter.compute())
            with open(f"{out_dir}/case{case}_rank{rank}.json", "w") as f:
                json.dump(report, f)
    finally:
        dist.destroy_process_group()


def test_two_gloo_processes_equal_one(tmp_path):
    pytest.importorskip("torch")
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    mp.spawn(_gloo_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    for case, (n, k, _) in enumerate(GLOO_CASES):
        logits, labels = _data(n, k, seed=5)
        desired = json.loads(json.dumps(_comparable(calib.evaluate(logits, labels, n_bins=12))))
        for rank in range(2):
            got = json.loads((tmp_path / f"case{case}_rank{rank}.json").read_text())
            assert_agree(got, desired, where=f"case {case}, rank {rank}")


def test_large_k_small_batches_sparse_cells():
    # K·M = 1.2e6 > 2^20 cells: batches of fewer samples than bins keep sparse classwise cells, the
    # concatenation dense ones; the running sum switches between the two
    logits, labels = _data(40, 80_000, seed=9)
    meter = Meter()
    for a, b in ((0, 3), (3, 7), (7, 40)):
        meter.update(logits[a:b], labels[a:b])
    assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(logits, labels)))
