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


#: the meters each rank runs: numpy batches (the host pass), CPU tensors (the device pass,
#: ``device="torch-cpu"``: the confidences gathered as tensors) and a meter asked for some metrics
#: (classwise-ECE at K = 100,000 too: sparse cells on one rank, dense on the other)
GLOO_VARIANTS = {"numpy": (None, False), "tensors": (None, True),
                 "asked": (["ece", "adaece", "classwise_ece", "nll"], True)}


def _gloo_worker(rank, world, port, out_dir):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        for case, (n, k, sizes) in enumerate(GLOO_CASES):
            logits, labels = _data(n, k, seed=5)
            start = sum(sizes[:rank])
            for variant, (asked, tensors) in GLOO_VARIANTS.items():
                meter = Meter(n_bins=12, metrics=asked, device="torch-cpu" if tensors else None)
                for i in range(start, start + sizes[rank], 9):  # uneven batches on each rank
                    stop = min(i + 9, start + sizes[rank])
                    x, y = logits[i:stop], labels[i:stop]
                    meter.update(*((torch.as_tensor(x), torch.as_tensor(y)) if tensors else (x, y)))
                meter.all_reduce()
                report = _comparable(meter.compute())
                with open(f"{out_dir}/case{case}_{variant}_rank{rank}.json", "w") as f:
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
        for variant, (asked, _) in GLOO_VARIANTS.items():
            whole = calib.evaluate(logits, labels, n_bins=12, metrics=asked)
            desired = json.loads(json.dumps(_comparable(whole)))
            for rank in range(2):
                got = json.loads((tmp_path / f"case{case}_{variant}_rank{rank}.json").read_text())
                where = f"case {case}, {variant}, rank {rank}"
                if asked is None:
                    assert_agree(got, desired, where=where)
                else:
                    assert_agree(got["metrics"], {m: desired["metrics"][m] for m in asked}, where=where)
                    assert_agree(got["classwise_ece_per_class"], desired["classwise_ece_per_class"], where=where)
                    assert_agree(got["bins"], desired["bins"], where=where)


def test_large_k_small_batches_sparse_cells():
    # K·M = 1.2e6 > 2^20 cells: batches of fewer samples than bins keep sparse classwise cells, the
    # concatenation dense ones; the running sum switches between the two. At K > 1024 classwise-ECE is
    # left out unless asked for (as by evaluate), so it is asked for here
    logits, labels = _data(40, 80_000, seed=9)
    meter, asked = Meter(), Meter(metrics=["ece", "classwise_ece"])
    for a, b in ((0, 3), (3, 7), (7, 40)):
        meter.update(logits[a:b], labels[a:b])
        asked.update(logits[a:b], labels[a:b])
    assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(logits, labels)))
    whole = calib.evaluate(logits, labels, metrics=["classwise_ece"])
    report = asked.compute()
    assert_agree(report.metrics, {m: whole.metrics[m] for m in ("ece", "classwise_ece")})
    assert_agree(report.classwise_ece_per_class, whole.classwise_ece_per_class)


# ----------------------------------------------------------------- torch tensors stay on their device

try:
    import torch
except ImportError:  # CI's phase without torch
    torch = None

#: the devices present: the CPU (torch's eager pass, the same code as on a GPU: ``device="torch-cpu"``)
#: and CUDA where there is one
DEVICES = [
    pytest.param("cpu", marks=pytest.mark.skipif(torch is None, reason="torch is not installed")),
    pytest.param("cuda", marks=pytest.mark.skipif(torch is None or not torch.cuda.is_available(),
                                                  reason="no CUDA device")),
]


def _Meter(*args, **kwargs):
    """A meter whose CPU tensors take the device pass (the code a GPU runs) rather than the host pass."""
    return Meter(*args, device="torch-cpu", **kwargs)


def _fed(meter, scores, labels, cuts, device, *, labels_as_numpy=False):
    """``meter`` updated with the batches [cuts[i], cuts[i+1]) as tensors on ``device``."""
    x = torch.as_tensor(scores, device=device)
    y = torch.as_tensor(labels, device=device)
    for a, b in zip(cuts, cuts[1:]):
        meter.update(x[a:b], labels[a:b] if labels_as_numpy else y[a:b])
    return meter


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cuts", [[0, 300], [0, 1, 300], [0, 100, 200, 300], list(range(0, 300, 7)) + [300]])
def test_device_tensors_any_batching_equals_evaluate(device, cuts):
    # K = 7 > 5: top-5; classwise-ECE, AdaECE, KS-CE and SmoothECE from what the meter keeps
    logits, labels = _data(300, 7)
    meter = _fed(_Meter(n_bins=10), logits, labels, cuts, device)
    report = meter.compute()
    assert report.device == ("cuda" if device == "cuda" else "torch-cpu")
    assert_agree(_comparable(report), _comparable(calib.evaluate(logits, labels, n_bins=10)))


@pytest.mark.parametrize("device", DEVICES)
def test_device_tensors_never_come_to_the_host_whole(device, monkeypatch):
    # only the per-sample confidences (1-D) and the sums reach the host, never a (B, K) batch; the device
    # pass is the one that reduces each batch, and the only pass over its rows (the confidences AdaECE
    # keeps and the classwise cells come from it too)
    from calibrate_cli.engine import device_eval, rows
    from calibrate_cli.metrics import meter as meter_module

    copied, passes, row_passes = [], [], []
    real_copy, real_pass, real_rows = meter_module._host_array, device_eval.device_batch, rows.row_stats

    def copy(x):
        copied.append(tuple(x.shape))
        return real_copy(x)

    def device_pass(*args, **kwargs):
        passes.append(args[0].device.type)
        return real_pass(*args, **kwargs)

    def row_pass(*args, **kwargs):
        row_passes.append(args[1].shape[0])
        return real_rows(*args, **kwargs)

    monkeypatch.setattr(meter_module, "_host_array", copy)
    monkeypatch.setattr(device_eval, "device_batch", device_pass)
    monkeypatch.setattr(device_eval, "row_stats", row_pass)
    monkeypatch.setattr(rows, "row_stats", row_pass)
    monkeypatch.setenv(device_eval.COMPILE_ENV, "0")  # eager on CUDA too: row_stats is called, not traced
    logits, labels = _data(120, 4, seed=2)
    report = _fed(_Meter(), logits, labels, [0, 50, 120], device, labels_as_numpy=True).compute()
    assert passes == [device, device]
    assert row_passes == [50, 70]  # one pass over each batch's rows
    assert all(len(shape) == 1 for shape in copied), copied
    assert_agree(_comparable(report), _comparable(calib.evaluate(logits, labels)))


@pytest.mark.parametrize("device", DEVICES)
def test_device_tensors_probs_binary_half_and_ties(device):
    # probabilities, hand-computed: 75 % sure of both, right once → ECE 0.25
    probs = np.array([[0.75, 0.25], [0.25, 0.75]])
    meter = _fed(_Meter(n_bins=4, input_kind="probs"), probs, np.array([0, 0]), [0, 1, 2], device)
    assert meter.compute().metrics["ece"] == pytest.approx(0.25, abs=1e-15)
    # 1-D binary probabilities, one sample a batch, against the float64 loop
    p, y = np.array([0.9, 0.2, 0.6, 0.51]), np.array([1, 0, 0, 1])
    meter = _fed(_Meter(n_bins=5, input_kind="probs"), p, y, [0, 1, 2, 3, 4], device)
    assert meter.compute().metrics["ece"] == pytest.approx(_naive_ece(np.stack([1 - p, p], 1), y, 5), rel=1e-12)
    assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(p, y, input_kind="probs", n_bins=5)))
    # 1-D binary log-odds
    z = np.array([2.0, -1.0, 0.3, 0.0, -0.2])
    yz = np.array([1, 0, 0, 1, 1])
    meter = _fed(_Meter(n_bins=5), z, yz, [0, 2, 5], device)
    assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(z, yz, input_kind="logits", n_bins=5)))
    # float32 with exact ties (lowest index wins) and bfloat16 (widened exactly)
    logits, labels = _data(64, 3, seed=3, dtype=np.float32)
    logits[:10] = 0.0
    assert_agree(_comparable(_fed(_Meter(), logits, labels, [0, 16, 32, 64], device).compute()),
                 _comparable(calib.evaluate(logits, labels)))
    half = torch.as_tensor(logits).to(torch.bfloat16)
    meter = _Meter().update(half.to(device), torch.as_tensor(labels, device=device))
    assert_agree(_comparable(meter.compute()), _comparable(calib.evaluate(half.float().numpy(), labels)))


@pytest.mark.parametrize("device", DEVICES)
def test_device_and_host_batches_and_meters_merge(device):
    logits, labels = _data(150, 6, seed=4)
    a = _Meter().update(logits[:40], labels[:40])  # numpy: the host pass
    _fed(a, logits, labels, [40, 90], device)  # then tensors
    b = _fed(_Meter(), logits, labels, [90, 150], device)
    a.merge(b)
    assert a.n == 150
    assert_agree(_comparable(a.compute()), _comparable(calib.evaluate(logits, labels)))
    assert_agree(_comparable(a.compute()), _comparable(calib.evaluate(logits, labels)))  # compute() again


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_cpu_tensors_take_the_host_pass():
    # a view of the tensor (no copy): the compiled CPU loops, faster there than torch's eager pass
    logits, labels = _data(120, 6, seed=7, dtype=np.float32)
    meter = _fed(Meter(n_bins=9), logits, labels, [0, 64, 120], "cpu")
    report = meter.compute()
    assert report.device == "cpu"
    assert_agree(_comparable(report), _comparable(calib.evaluate(logits, labels, n_bins=9)))
    with pytest.raises(InputError, match="device"):
        Meter(device="cuda")


@pytest.mark.parametrize("device", DEVICES)
def test_device_errors_name_the_batch(device):
    meter = _Meter()
    meter.update(torch.zeros((2, 3), device=device), torch.tensor([0, 1], device=device))
    with pytest.raises(InputError, match="batch 2: labels must be class indices"):
        meter.update(torch.zeros((2, 3), device=device), torch.tensor([0, 5], device=device))
    with pytest.raises(InputError, match="batch 2: K = 4"):
        meter.update(torch.zeros((2, 4), device=device), torch.tensor([0, 1], device=device))
    with pytest.raises(InputError, match="batch 2: scores contain NaN"):
        meter.update(torch.full((2, 3), float("nan"), device=device), torch.tensor([0, 1], device=device))
    with pytest.raises(InputError, match="batch 1: scores: every row lies in"):
        _Meter().update(torch.tensor([[0.0, 1.0]], device=device), torch.tensor([0], device=device))


@pytest.mark.parametrize("device", [None, *DEVICES])
def test_asked_metrics_only(device):
    # error, ECE and NLL: sums only; the report holds those three, no equal-mass or classwise bins
    logits, labels = _data(200, 5, seed=6)
    whole = calib.evaluate(logits, labels, n_bins=12)
    cuts = [0, 64, 128, 200]
    asked = ["nll", "error", "ece"]
    if device is None:
        meter = _Meter(n_bins=12, metrics=asked)
        for a, b in zip(cuts, cuts[1:]):
            meter.update(logits[a:b], labels[a:b])
    else:
        meter = _fed(_Meter(n_bins=12, metrics=asked), logits, labels, cuts, device)
    report = meter.compute()
    assert list(report.metrics) == ["error", "ece", "nll"]  # in report order
    assert_agree(report.metrics, {m: whole.metrics[m] for m in report.metrics})
    assert report.adaptive_bins.n_bins == 0 and report.classwise_ece_per_class == ()
    assert_agree(report.to_dict()["bins"]["ece"], whole.to_dict()["bins"]["ece"])
    # AdaECE alone: its edges selected from the kept confidences (on the device for tensors)
    meter = _Meter(n_bins=12, metrics=["adaece"]) if device is None else _fed(
        _Meter(n_bins=12, metrics=["adaece"]), logits, labels, cuts, device)
    if device is None:
        for a, b in zip(cuts, cuts[1:]):
            meter.update(logits[a:b], labels[a:b])
    report = meter.compute()
    assert_agree(report.metrics, {"adaece": whole.metrics["adaece"]})
    assert_agree(report.to_dict()["bins"]["adaece"], whole.to_dict()["bins"]["adaece"])
    with pytest.raises(InputError, match="not ace"):
        _Meter(metrics=["ece", "ace"])


@pytest.mark.parametrize("device", [None, *DEVICES])
def test_nll_whose_sum_overflows_across_batches(device):
    # each −log p_y ≈ 1.5e308 is finite, their sum is not: the mean stays finite (evaluate's rule)
    logits = np.array([[0.0, -1.5e308], [0.0, -1.4e308], [0.0, -1.0e308]])
    labels = np.array([1, 1, 1])
    # the first batch's own sum overflows too (its sums scaled by its N), then the running sum
    meter = _Meter(metrics=["nll", "accuracy"])
    if device is None:
        meter.update(logits[:2], labels[:2]).update(logits[2:], labels[2:])
    else:
        _fed(meter, logits, labels, [0, 2, 3], device)
    nll = meter.compute().metrics["nll"]
    assert math.isfinite(nll)
    assert nll == pytest.approx((1.5e308 / 3 + 1.4e308 / 3 + 1.0e308 / 3), rel=1e-12)
    assert_agree(nll, calib.evaluate(logits, labels).metrics["nll"])


@pytest.mark.parametrize("device", DEVICES)
def test_compat_mode_with_tensors_is_the_host_path(device):
    logits, labels = _data(90, 4, seed=8, dtype=np.float32)
    meter = _fed(_Meter(compat="focal-calibration"), logits, labels, [0, 30, 90], device)
    report = meter.compute()
    assert report.device == "cpu"
    assert_agree(_comparable(report), _comparable(calib.evaluate(logits, labels, compat="focal-calibration")))


@pytest.mark.parametrize("device", DEVICES)
def test_inside_a_torch_loop_on_the_device(device):
    torch.manual_seed(0)
    x = torch.randn(96, 4, device=device)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long() + (x[:, 2] > 1).long()
    model = torch.nn.Linear(4, 3).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(2):
        for i in range(0, 96, 32):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32]).backward()
            opt.step()
        meter, outputs = _Meter(n_bins=10, metrics=["error", "ece", "adaece", "nll"]), []
        with torch.no_grad():
            for i in range(0, 96, 20):
                logits = model(x[i:i + 20])
                meter.update(logits, y[i:i + 20])
                outputs.append(logits)
        whole = calib.evaluate(torch.cat(outputs).cpu().numpy(), y.cpu().numpy(), n_bins=10)
        assert_agree(meter.compute().metrics, {m: whole.metrics[m] for m in ("error", "ece", "adaece", "nll")})
