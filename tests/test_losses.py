"""calibrate_cli.training.losses: every training loss against (1) hand values, (2) an independent float64
per-sample loop (tests/naive_losses.py) and (3) the reference code's semantics on the same batch
(tests/reference_losses/: torrvision/focal_calibration and 3mcloud/adafocal, transcribed)."""

import inspect
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import naive_losses as naive  # noqa: E402
from reference_losses import adafocal as ref_ada  # noqa: E402
from reference_losses import focal_calibration as ref  # noqa: E402

from calibrate_cli.training import losses as L  # noqa: E402
from calibrate_cli.errors import InputError  # noqa: E402
from calibrate_cli.training.losses import LOSS_NAMES, make_loss  # noqa: E402


def batch(n=64, k=10, seed=0, scale=3.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = (scale * torch.randn(n, k, generator=g)).to(dtype)
    labels = torch.randint(0, k, (n,), generator=g)
    return logits, labels


def logits_with_p(p_values, k=10, dtype=torch.float32):
    """Logits whose softmax gives class 0 exactly p (up to rounding) and spreads the rest evenly."""
    rows = []
    for p in p_values:
        rest = (1 - p) / (k - 1)
        rows.append([math.log(p)] + [math.log(rest)] * (k - 1))
    return torch.tensor(rows, dtype=dtype), torch.zeros(len(p_values), dtype=torch.long)


# -- hand values --------------------------------------------------------------------------------------


def test_hand_values_on_two_samples():
    logits = torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]], dtype=torch.float64)
    labels = torch.tensor([0, 1])
    p1, p2 = 1 / 3, 1 / (math.exp(2) + 2)  # true-class probabilities
    ce = -math.log(p1) - math.log(p2)
    assert float(make_loss("ce", 3)(logits, labels)) == pytest.approx(ce, rel=1e-12)
    fl2 = -(1 - p1) ** 2 * math.log(p1) - (1 - p2) ** 2 * math.log(p2)
    assert float(make_loss("focal", 3, gamma=2)(logits, labels)) == pytest.approx(fl2, rel=1e-12)
    # FLSD-53: p1 = 1/3 ≥ 0.2 → γ = 3; p2 ≈ 0.1065 < 0.2 → γ = 5
    flsd = -(1 - p1) ** 3 * math.log(p1) - (1 - p2) ** 5 * math.log(p2)
    assert float(make_loss("flsd53", 3)(logits, labels)) == pytest.approx(flsd, rel=1e-12)
    assert flsd == pytest.approx(1.600824, abs=1e-6)
    # label smoothing ε = 0.1, K = 3: 0.05 on each wrong class
    q1 = [0.9, 0.05, 0.05]
    q2 = [0.05, 0.9, 0.05]
    lp1 = [math.log(1 / 3)] * 3
    z2 = math.log(math.exp(2) + 2)
    lp2 = [2 - z2, -z2, -z2]
    ls = -sum(q * v for q, v in zip(q1, lp1)) - sum(q * v for q, v in zip(q2, lp2))
    assert float(make_loss("ls", 3, eps=0.1)(logits, labels)) == pytest.approx(ls, rel=1e-12)
    # Brier: batch mean of Σ_k (p_k − y_k)²
    b1 = (1 / 3 - 1) ** 2 + 2 * (1 / 3) ** 2
    pr2 = [math.exp(v) for v in lp2]
    b2 = pr2[0] ** 2 + (pr2[1] - 1) ** 2 + pr2[2] ** 2
    assert float(make_loss("brier", 3)(logits, labels)) == pytest.approx((b1 + b2) / 2, rel=1e-12)


def test_mmce_hand_value_one_correct_one_wrong():
    """m = n = 1: MMCE_w² = (1−r1)²/(1+1e-5) + r2²/(1+1e-5) − 2 k(r1, r2)(1−r1) r2/(1+1e-5)."""
    logits = torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]], dtype=torch.float64)
    labels = torch.tensor([0, 1])  # sample 0: argmax 0 (first of ties) = label → correct; sample 1 wrong
    r1, r2 = 1 / 3, math.exp(2) / (math.exp(2) + 2)
    k12 = math.exp(-abs(r1 - r2) / 0.4)
    mmd = ((1 - r1) ** 2 + r2**2 - 2 * k12 * (1 - r1) * r2) / (1 + 1e-5)
    ce_mean = (-math.log(1 / 3) - math.log(1 / (math.exp(2) + 2))) / 2
    expected = 2 * (ce_mean + 2.0 * math.sqrt(mmd + 1e-10))
    assert float(make_loss("mmce", 3)(logits, labels)) == pytest.approx(expected, rel=1e-12)


def test_mmce_is_cross_entropy_when_all_correct_or_all_wrong():
    logits = torch.tensor([[3.0, 0.0], [0.0, 2.0], [1.0, 0.0]], dtype=torch.float64)
    for labels in (torch.tensor([0, 1, 0]), torch.tensor([1, 0, 1])):
        ce = float(make_loss("ce", 2)(logits, labels))
        assert float(make_loss("mmce", 2)(logits, labels)) == pytest.approx(ce, rel=1e-12)


# -- the independent float64 loop ----------------------------------------------------------------------

NAIVE = {
    "ce": (dict(), lambda x, y: naive.ce(x, y)),
    "focal": (dict(gamma=2.0), lambda x, y: naive.focal_sum(x, y, lambda p: 2.0)),
    "flsd53": (dict(), lambda x, y: naive.focal_sum(x, y, naive.flsd53_gamma)),
    "flsd532": (dict(), lambda x, y: naive.focal_sum(x, y, naive.flsd532_gamma)),
    "flsc531": (dict(), lambda x, y: naive.focal_sum(x, y, lambda p: 5.0)),  # epoch 0
    "flsc532": (dict(), lambda x, y: naive.focal_sum(x, y, lambda p: 5.0)),
    "ls": (dict(eps=0.05), lambda x, y: naive.label_smoothing(x, y, 0.05)),
    "brier": (dict(), lambda x, y: naive.brier(x, y)),
    "mmce": (dict(lam=2.0), lambda x, y: naive.mmce_objective(x, y, 2.0)),
    "adafocal": (dict(), lambda x, y: naive.focal_sum(x, y, lambda p: 1.0)),  # before any update
}


def test_naive_table_covers_every_loss():
    assert set(NAIVE) == set(LOSS_NAMES)


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("seed", [0, 1])
def test_equals_float64_loop(name, seed):
    params, expected = NAIVE[name]
    logits, labels = batch(n=40, k=7, seed=seed, dtype=torch.float64)
    got = float(make_loss(name, 7, **params)(logits, labels))
    assert got == pytest.approx(expected(logits.tolist(), labels.tolist()), rel=1e-10)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_float32_close_to_float64_loop(name):
    params, expected = NAIVE[name]
    logits, labels = batch(n=128, k=10, seed=3)
    got = float(make_loss(name, 10, **params)(logits, labels))
    assert got == pytest.approx(expected(logits.double().tolist(), labels.tolist()), rel=2e-5)


# -- the reference code on the same batch --------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_reference_values(seed, scale):
    logits, labels = batch(n=128, k=10, seed=seed, scale=scale)
    cases = [
        (make_loss("ce", 10), ref.cross_entropy(logits, labels)),
        (make_loss("focal", 10, gamma=1), ref.focal_loss(logits, labels, 1.0)),
        (make_loss("focal", 10, gamma=3), ref.focal_loss(logits, labels, 3.0)),
        (make_loss("flsd53", 10), ref.focal_loss_adaptive(logits, labels, 3.0)),
        (make_loss("flsd532", 10), ref.focal_loss_adaptive(logits, labels, 2.0)),
        (make_loss("brier", 10), ref.brier_score(logits, labels)),
        (make_loss("mmce", 10, lam=2.0), ref.mmce_training_objective(logits, labels, 2.0)),
    ]
    for loss, expected in cases:
        got = loss(logits, labels)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=lambda m: f"{loss.name}: {m}")


def test_flsd_same_as_reference_bit_for_bit():
    """Same operations in the same order: FLSD's value and gradient equal the reference's exactly."""
    logits, labels = batch(n=256, k=10, seed=7, scale=2.0)
    for name, gamma in (("flsd53", 3.0), ("flsd532", 2.0)):
        a = logits.clone().requires_grad_(True)
        b = logits.clone().requires_grad_(True)
        ours, theirs = make_loss(name, 10)(a, labels), ref.focal_loss_adaptive(b, labels, gamma)
        ours.backward()
        theirs.backward()
        assert torch.equal(ours, theirs)
        assert torch.equal(a.grad, b.grad)


BOUNDARY_P = [0.19999, 0.2, 0.49999, 0.5]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_flsd_gamma_at_the_boundaries_as_the_reference(dtype):
    logits, labels = logits_with_p(BOUNDARY_P, dtype=dtype)
    logp = torch.log_softmax(logits, 1)[:, 0]
    p = logp.exp()
    # where float32 rounding puts p: the thresholds are decided on the rounded p, as the reference does
    for name, gamma in (("flsd53", 3.0), ("flsd532", 2.0)):
        loss = make_loss(name, 10)
        ours = loss._gamma(p)
        theirs = ref.adaptive_gamma_list(p, gamma).to(dtype)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
        by_hand = [5.0 if float(v) < 0.2 else (3.0 if float(v) < 0.5 else gamma) for v in p]
        assert ours.tolist() == by_hand


def test_flsd_gamma_exactly_at_representable_thresholds():
    """p exactly 0.5 (representable) → the last γ; the float32 nearest 0.2 (0.2000000030) is ≥ 0.2 → 3;
    the float32 just below it (0.1999999881) → 5; as the reference's Python comparisons decide."""
    p = torch.tensor([0.5, np.nextafter(np.float32(0.5), np.float32(0)), np.float32(0.2),
                      np.nextafter(np.float32(0.2), np.float32(0))], dtype=torch.float32)
    assert make_loss("flsd53", 2)._gamma(p).tolist() == [3.0, 3.0, 3.0, 5.0]
    assert make_loss("flsd532", 2)._gamma(p).tolist() == [2.0, 3.0, 3.0, 5.0]
    assert ref.adaptive_gamma_list(p, 2.0).tolist() == [2.0, 3.0, 3.0, 5.0]
    p64 = torch.tensor([0.2, np.nextafter(0.2, 0.0), 0.5, np.nextafter(0.5, 0.0)], dtype=torch.float64)
    assert make_loss("flsd532", 2)._gamma(p64).tolist() == [3.0, 5.0, 2.0, 3.0]


def test_ceil_in_decides_like_a_float64_comparison():
    """The dtype-exact threshold: for every float32 x near a threshold t, x < ceil32(t) ⇔ float(x) < t."""
    for t in (0.2, 0.5, 0.1, 1 / 3, 0.7):
        c = L._ceil_in(t, torch.float32)
        x = np.float32(t)
        around = [x]
        for _ in range(3):
            around.append(np.nextafter(around[-1], np.float32(1)))
        down = x
        for _ in range(3):
            down = np.nextafter(down, np.float32(0))
            around.append(down)
        for v in around:
            assert bool(torch.tensor(v) < c) == (float(v) < t)
            assert bool(torch.tensor(v) >= c) == (float(v) >= t)


# -- gradients --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["focal", "flsd53", "ls", "brier", "mmce", "adafocal"])
def test_gradcheck_float64(name):
    logits, labels = batch(n=12, k=4, seed=11, scale=1.5, dtype=torch.float64)
    loss = make_loss(name, 4)
    x = logits.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda z: loss(z, labels), (x,), eps=1e-6, atol=1e-6)


def test_gamma_carries_no_gradient_and_p_is_not_detached():
    """d/dz of Σ −(1−p)^γ log p with γ constant: γ(1−p)^(γ−1) log p · dp/dz − (1−p)^γ/p · dp/dz.
    A detached p (in (1−p)^γ) would drop the first term; a γ with gradient would add a term."""
    logits, labels = batch(n=30, k=5, seed=2, dtype=torch.float64)
    x = logits.clone().requires_grad_(True)
    make_loss("flsd53", 5)(x, labels).backward()
    # the same with a constant γ tensor built outside
    p = torch.softmax(logits, 1).gather(1, labels.view(-1, 1)).view(-1)
    gamma = torch.where(p < 0.2, 5.0, 3.0).double()
    y = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(y, 1).gather(1, labels.view(-1, 1)).view(-1)
    (-(1 - logp.exp()) ** gamma * logp).sum().backward()
    torch.testing.assert_close(x.grad, y.grad, rtol=1e-12, atol=1e-12)
    # and differs from a detached-p version
    z = logits.clone().requires_grad_(True)
    logp = torch.log_softmax(z, 1).gather(1, labels.view(-1, 1)).view(-1)
    (-(1 - logp.exp().detach()) ** gamma * logp).sum().backward()
    assert not torch.allclose(x.grad, z.grad)


# -- API and errors ---------------------------------------------------------------------------------------


def test_loss_names_and_validation_flag():
    assert LOSS_NAMES == ("ce", "focal", "flsd53", "flsd532", "flsc531", "flsc532", "ls", "brier", "mmce", "adafocal")
    for name in LOSS_NAMES:
        loss = make_loss(name, 3)
        assert isinstance(loss, torch.nn.Module)
        assert loss.needs_validation == (name == "adafocal")
        loss.start_epoch(0, 10)  # every loss has both hooks
        if not loss.needs_validation:
            loss.end_epoch(torch.zeros(4, 3), torch.zeros(4, dtype=torch.long))


@pytest.mark.parametrize(
    "name, k, params, message",
    [
        ("nope", 3, {}, "unknown loss 'nope'; choose from ce, focal,"),
        ("ce", 3, {"gamma": 2.0}, "loss 'ce' takes no parameters; got gamma"),
        ("focal", 3, {"eps": 0.1}, "loss 'focal' takes gamma, alpha; got eps"),
        ("focal", 3, {"gamma": -1}, "gamma must be ≥ 0, got -1"),
        ("focal", 3, {"gamma": float("nan")}, "gamma must be finite"),
        ("focal", 3, {"gamma": "2"}, "gamma must be a number, got '2'"),
        ("ls", 3, {"eps": 1.5}, "eps must be ≤ 1, got 1.5"),
        ("mmce", 3, {"lam": -2}, "lam must be ≥ 0"),
        ("focal", 3, {"alpha": 0.25}, "a single alpha weights class 1 by alpha and class 0 by 1 - alpha"),
        ("focal", 3, {"alpha": [0.2, 0.3]}, "alpha needs one weight per class (3), got 2"),
        ("focal", 2, {"alpha": 1.5}, "alpha must be in [0, 1], got 1.5"),
        ("adafocal", 3, {"n_bins": 2.5}, "n_bins must be an integer"),
        ("adafocal", 3, {"gamma_min": 3, "gamma_max": 2}, "gamma_min (3) must be ≤ gamma_max (2)"),
        ("ce", 1, {}, "needs an integer number of classes ≥ 2, got 1"),
    ],
)
def test_bad_names_and_parameters_are_one_line_input_errors(name, k, params, message):
    with pytest.raises(InputError) as info:
        make_loss(name, k, **params)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_none_parameters_take_the_defaults():
    assert make_loss("focal", 3, gamma=None, eps=None).params == {"gamma": 3.0, "alpha": None}
    assert make_loss("ls", 3).params["eps"] == 0.05
    assert make_loss("mmce", 3).params["lam"] == 2.0


def test_shape_errors():
    loss = make_loss("ce", 3)
    with pytest.raises(InputError, match=r"logits must have shape \(N, 3\), got \(4, 2\)"):
        loss(torch.zeros(4, 2), torch.zeros(4, dtype=torch.long))
    with pytest.raises(InputError, match=r"labels must have shape \(4,\)"):
        loss(torch.zeros(4, 3), torch.zeros(5, dtype=torch.long))
    with pytest.raises(InputError, match="labels must be integers"):
        loss(torch.zeros(4, 3), torch.zeros(4))


def test_half_precision_logits_computed_in_float32():
    logits, labels = batch(n=32, k=10, seed=5)
    half = logits.to(torch.bfloat16)
    got = make_loss("flsd53", 10)(half, labels)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, ref.focal_loss_adaptive(half.float(), labels, 3.0))


# -- no host synchronisation in forward -------------------------------------------------------------------

SYNCING = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "nonzero", "_local_scalar_dense")
#: a copy between devices (a host → GPU copy of pageable memory waits): none in a steady-state step
TRANSFERS = ("transfer",)


def _names_a_device(args, kwargs) -> bool:
    values = list(args[1:]) + list(kwargs.values())
    return any(isinstance(v, (torch.device, str)) for v in values)


class _RecordOps(torch.overrides.TorchFunctionMode):
    """Records the name of every torch call; a ``.to(...)``/``.cuda()``/``.copy_`` that names a device
    (a move, not a dtype cast) is recorded as ``transfer``."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name in ("cuda", "copy_") or (name == "to" and _names_a_device(args, kwargs)):
            name = "transfer"
        self.names.append(name)
        return func(*args, **kwargs)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_forward_calls_no_syncing_tensor_operation(name):
    """Every torch call forward makes is recorded (a TorchFunctionMode sees .item(), bool(t),
    float(t), .tolist(), .cpu(), nonzero...): none of them can move a value to the host."""
    logits, labels = batch(n=64, k=10, seed=4)
    alpha = [0.1 * (k + 1) for k in range(10)] if "alpha" in L.LOSS_PARAMS[name] else None
    loss = make_loss(name, 10, alpha=alpha)
    if name == "adafocal":  # a real state with several γ, built (and moved) in end_epoch
        loss.end_epoch(*batch(n=300, k=10, seed=9))
    loss(logits, labels)  # any lazy set-up (a copy to the device) happens once, outside the measured call
    with _RecordOps() as mode:
        loss(logits, labels.clone())
    assert mode.names, "the mode recorded nothing"
    assert not [n for n in mode.names if n in SYNCING], mode.names
    assert not [n for n in mode.names if n in TRANSFERS], mode.names


def test_the_syncing_detector_detects():
    t = torch.ones(3)
    with _RecordOps() as mode:
        (t.sum() > 0).item()
        bool(t.sum() > 0)
    assert "item" in mode.names and "__bool__" in mode.names
    device = t.device
    with _RecordOps() as mode:
        t.to(torch.float64)
        t.to("cpu")
        t.to(device=device, dtype=torch.float64)
    assert mode.names == ["to", "transfer", "transfer"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA only")
@pytest.mark.parametrize("name", LOSS_NAMES)
def test_forward_and_backward_without_sync_on_cuda(name):
    logits, labels = batch(n=128, k=10, seed=4)
    logits, labels = logits.cuda().requires_grad_(True), labels.cuda()
    alpha = [0.1 * (k + 1) for k in range(10)] if "alpha" in L.LOSS_PARAMS[name] else None
    loss = make_loss(name, 10, alpha=alpha)
    if name == "adafocal":
        loss.end_epoch(*[t.cuda() for t in batch(n=300, k=10, seed=9)])
    loss(logits, labels)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss(logits, labels).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_source_has_no_item_in_forward_paths():
    """Belt and braces with the mode above: the forward code has no .item()/.tolist()."""
    for cls in (L.CalibrationLoss, L.CrossEntropy, L._FocalFamily, L.Focal, L.FocalSampleDependent,
                L.FocalScheduled, L.LabelSmoothing, L.Brier, L.MMCE):
        source = inspect.getsource(cls)
        assert ".item(" not in source and ".tolist(" not in source, cls
    source = inspect.getsource(L.AdaFocal._objective)
    assert ".item(" not in source and ".tolist(" not in source


# -- MMCE's degenerate batches ------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2])
def test_mmce_tiny_batches_with_one_group_empty_are_cross_entropy(n):
    """The reference fails on a batch of 1 (top-k of 2 out of 1) and returns NaN for a batch of 2 that
    is all correct or all wrong (the mean of an empty block); the MMCE term is 0 here, as it is in the
    reference for every larger batch with an empty group."""
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])[:n]
    for labels in (logits.argmax(1), (logits.argmax(1) + 1) % 3):
        ce = make_loss("ce", 3)(logits, labels)
        torch.testing.assert_close(make_loss("mmce", 3)(logits, labels), ce)
    if n == 2:
        assert torch.isnan(ref.mmce_training_objective(logits, logits.argmax(1), 2.0))


# -- alpha-balanced focal ---------------------------------------------------------------------------------


def test_alpha_balanced_focal_equals_the_loop():
    logits, labels = batch(n=50, k=4, seed=6, dtype=torch.float64)
    alpha = [0.1, 0.2, 0.3, 0.4]
    got = float(make_loss("focal", 4, gamma=2.0, alpha=alpha)(logits, labels))
    expected = naive.focal_sum(logits.tolist(), labels.tolist(), lambda p: 2.0, alpha=alpha)
    assert got == pytest.approx(expected, rel=1e-12)
    got = float(make_loss("flsd53", 4, alpha=alpha)(logits, labels))
    assert got == pytest.approx(naive.focal_sum(logits.tolist(), labels.tolist(), naive.flsd53_gamma, alpha=alpha), rel=1e-12)


def _torchvision_sigmoid_focal_sum(x, y, alpha, gamma):
    """torchvision.ops.sigmoid_focal_loss(reduction="sum"), transcribed with math floats: x the
    log-odds of class 1, y the 0/1 target; α_t = α for y = 1 and 1 − α for y = 0 (Lin et al. 2017)."""
    total = 0.0
    for xi, yi in zip(x, y):
        p = 1.0 / (1.0 + math.exp(-xi))
        ce = -(yi * math.log(p) + (1 - yi) * math.log(1.0 - p))
        p_t = p * yi + (1.0 - p) * (1 - yi)
        alpha_t = alpha * yi + (1.0 - alpha) * (1 - yi)
        total += alpha_t * ce * (1.0 - p_t) ** gamma
    return total


def test_single_alpha_weights_the_positive_class_1_as_lin_et_al_and_torchvision():
    # by hand: logits (0, 2), label 1: p = σ(2) = 0.8807970780, (1 − p)² = 0.0142232..., −log p =
    # 0.1269280110; the plain focal term is 0.0018053...; α = 0.25 weights it by 0.25 (class 1), not 0.75
    logits = torch.tensor([[0.0, 2.0]], dtype=torch.float64)
    got = float(make_loss("focal", 2, gamma=2.0, alpha=0.25)(logits, torch.tensor([1])))
    p = 1.0 / (1.0 + math.exp(-2.0))
    assert got == pytest.approx(0.25 * (1.0 - p) ** 2 * -math.log(p), rel=1e-12)
    assert got == pytest.approx(0.25 * 0.0018035628352, rel=1e-9)
    # label 0: weight 1 − α = 0.75
    got = float(make_loss("focal", 2, gamma=2.0, alpha=0.25)(logits, torch.tensor([0])))
    assert got == pytest.approx(0.75 * p**2 * -math.log(1.0 - p), rel=1e-12)
    # a batch against torchvision's sigmoid_focal_loss on the log-odds z1 − z0
    logits, labels = batch(n=40, k=2, seed=11, dtype=torch.float64)
    x = (logits[:, 1] - logits[:, 0]).tolist()
    for name, gamma in (("focal", 2.0), ("focal", 0.0)):
        got = float(make_loss(name, 2, gamma=gamma, alpha=0.25)(logits, labels))
        assert got == pytest.approx(_torchvision_sigmoid_focal_sum(x, labels.tolist(), 0.25, gamma), rel=1e-10)
    # flsd53 uses the same α
    got = float(make_loss("flsd53", 2, alpha=0.25)(logits, labels))
    assert got == pytest.approx(naive.focal_sum(logits.tolist(), labels.tolist(), naive.flsd53_gamma, alpha=[0.75, 0.25]), rel=1e-12)


# -- FLSC schedules ---------------------------------------------------------------------------------------


def test_flsc_schedule_at_the_paper_length_matches_the_reference_train_loop():
    for name, last in (("flsc531", 1.0), ("flsc532", 2.0)):
        loss = make_loss(name, 3)
        for epoch in (0, 99, 100, 101, 249, 250, 349):
            loss.start_epoch(epoch, 350)
            assert loss.gamma == ref.scheduled_gamma(epoch, 5.0, 3.0, last), (name, epoch)


def test_flsc_schedule_scaled_to_the_run_length():
    loss = make_loss("flsc531", 3)
    gammas = []
    for epoch in range(35):
        loss.start_epoch(epoch, 35)
        gammas.append(loss.gamma)
    assert gammas == [5.0] * 10 + [3.0] * 15 + [1.0] * 10
    logits, labels = batch(n=20, k=3, seed=1, dtype=torch.float64)
    loss.start_epoch(30, 35)
    assert float(loss(logits, labels)) == pytest.approx(naive.focal_sum(logits.tolist(), labels.tolist(), lambda p: 1.0))


def test_scale_epoch_rounds_half_up():
    assert [L.scale_epoch(e, 350) for e in (100, 150, 250)] == [100, 150, 250]
    assert L.scale_epoch(175, 1) == 1  # 0.5 → 1
    assert L.scale_epoch(174, 1) == 0
    assert [L.scale_epoch(e, 5) for e in (100, 250)] == [1, 4]  # 1.43, 3.57


# -- AdaFocal ---------------------------------------------------------------------------------------------


def validation_set(n, seed, scale, q, k=10):
    """Logits and labels, correct (argmax) with probability q, else a random class."""
    g = torch.Generator().manual_seed(seed)
    x = scale * torch.randn(n, k, generator=g)
    y = torch.where(torch.rand(n, generator=g) < q, x.argmax(1), torch.randint(0, k, (n,), generator=g))
    return x, y


def test_adafocal_bins_and_gaps_as_the_reference():
    loss = make_loss("adafocal", 10)
    for seed, (n, scale, q) in enumerate([(150, 1.0, 0.6), (1000, 3.0, 0.3), (333, 0.5, 0.9), (15, 2.0, 0.5)]):
        x, y = validation_set(n, seed, scale, q)
        edges, gaps = loss.bin_statistics(x, y)
        theirs = ref_ada.validation_bins(x, y)
        assert [theirs[b]["lower_bound"] for b in range(15)] + [theirs[14]["upper_bound"]] == edges.tolist()
        np.testing.assert_allclose(gaps, [theirs[b]["calibration_gap"] for b in range(15)], rtol=0, atol=1e-6)


def test_adafocal_minimum_confidence_is_in_no_bin():
    """15 samples, 15 bins: the equal-mass edges are the sorted confidences themselves; bin b is
    (e_b, e_{b+1}], so the least confident sample is left out (the reference's strict lower bound)."""
    conf = np.linspace(0.55, 0.97, 15)
    # two classes with softmax = (c, 1 − c): logit log(c / (1 − c)) on class 0
    x = torch.tensor([[math.log(c / (1 - c)), 0.0] for c in conf], dtype=torch.float64)
    y = torch.zeros(15, dtype=torch.long)  # all correct
    loss = make_loss("adafocal", 2)
    edges, gaps = loss.bin_statistics(x, y)
    np.testing.assert_allclose(edges[:-1], conf, rtol=1e-12)
    # bin 0 = (c_0, c_1] holds c_1; ...; the last bin holds c_14 and c_14 (edges[14] = edges[15])
    expected = [conf[b + 1] - 1.0 for b in range(14)] + [0.0]
    np.testing.assert_allclose(gaps, expected, rtol=1e-12, atol=1e-12)


def test_adafocal_update_rule_by_hand():
    """γ ← γ exp(λ g) for γ > 0, γ exp(−λ g) otherwise; |γ| < 0.2 flips to ∓0.2; clip [−2, 20]."""
    loss = make_loss("adafocal", 2, n_bins=4)
    loss.bin_gammas = [1.0, 0.21, -0.5, 19.0]
    gaps = np.array([0.1, -0.1, 0.2, 0.5])
    loss.bin_statistics = lambda x, y: (np.array([0.1, 0.4, 0.6, 0.8, 1.0]), gaps)
    loss.end_epoch(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long))
    g1 = 1.0 * math.exp(0.1)
    g2 = 0.21 * math.exp(-0.1)  # 0.190 < 0.2 → −0.2 (switch to inverse focal)
    g3 = -0.5 * math.exp(-0.2)  # −0.409: the inverse-focal γ moves towards 0 when over-confident
    g4 = min(19.0 * math.exp(0.5), 20.0)
    assert loss.bin_gammas == pytest.approx([g1, -0.2, g3, g4], rel=1e-15)
    assert loss.bin_edges == [0.1, 0.4, 0.6, 0.8, 1.0]
    # and the forward uses bins (−∞, 0.4), [0.4, 0.6), [0.6, 0.8), [0.8, ∞) with those γ
    logits = torch.tensor([[math.log(p / (1 - p)), 0.0] for p in (0.05, 0.5, 0.7, 0.9)], dtype=torch.float64)
    labels = torch.zeros(4, dtype=torch.long)
    expected = naive.adafocal_sum(logits.tolist(), labels.tolist(), [0.4, 0.6, 0.8], loss.bin_gammas)
    assert float(loss(logits, labels)) == pytest.approx(expected, rel=1e-12)
    # the inverse-focal term by hand: −(1 + p)^0.2 log p at p = 0.5
    one = float(loss(logits[1:2], labels[1:2]))
    assert one == pytest.approx(-(1.5**0.2) * math.log(0.5), rel=1e-12)


def test_adafocal_sign_switch_back_to_focal():
    loss = make_loss("adafocal", 2, n_bins=1)
    loss.bin_gammas = [-0.21]
    loss.bin_statistics = lambda x, y: (np.array([0.5, 1.0]), np.array([0.1]))  # over-confident
    loss.end_epoch(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long))
    assert loss.bin_gammas == [0.2]  # −0.21·e^−0.1 = −0.19 → |γ| < 0.2 → +0.2
    loss.bin_gammas = [-1.9]
    loss.bin_statistics = lambda x, y: (np.array([0.5, 1.0]), np.array([-0.5]))  # under-confident
    loss.end_epoch(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long))
    assert loss.bin_gammas == [-2.0]  # −1.9·e^0.5 = −3.13 → clipped


def test_adafocal_trajectory_follows_the_reference():
    """30 epochs of updates from varied validation sets (over- and under-confident, through the
    inverse-focal switch and both clips): our γ per bin and loss track the reference's (float64 vs
    float32 means of the gaps: ~1e-7)."""
    ours, theirs = make_loss("adafocal", 10), ref_ada.ReferenceAdaFocal()
    g = torch.Generator().manual_seed(1)
    signs = set()
    for epoch in range(30):
        n = (150, 1000, 333)[epoch % 3]
        x, y = validation_set(n, 100 + epoch, (0.5, 1.0, 3.0, 6.0)[epoch % 4], (0.9, 0.6, 0.3)[epoch % 3])
        ours.end_epoch(x, y)
        theirs.update_bin_stats(ref_ada.validation_bins(x, y))
        ref_gammas = [theirs.bin_stats[b]["gamma"] for b in range(15)]
        np.testing.assert_allclose(ours.bin_gammas, ref_gammas, rtol=1e-5, atol=1e-5)
        signs.update(np.sign(ref_gammas).tolist())
        tx = 2 * torch.randn(128, 10, generator=g)
        ty = torch.randint(0, 10, (128,), generator=g)
        torch.testing.assert_close(ours(tx, ty), theirs.loss(tx, ty), rtol=1e-5, atol=1e-5)
    assert signs == {-1.0, 1.0}  # both regimes were exercised


def test_adafocal_state_dict_round_trip():
    a = make_loss("adafocal", 10)
    a.end_epoch(*validation_set(200, 0, 1.0, 0.9))
    b = make_loss("adafocal", 10)
    b.load_state_dict(a.state_dict())
    assert b.bin_gammas == a.bin_gammas and b.bin_edges == a.bin_edges
    x, y = batch(n=64, k=10, seed=2)
    assert torch.equal(a(x, y), b(x, y))
    c = make_loss("adafocal", 10, n_bins=5)
    with pytest.raises(InputError, match="saved state has 15 bins, expected 5"):
        c.load_state_dict(a.state_dict())


def test_adafocal_bad_validation_input():
    loss = make_loss("adafocal", 3)
    with pytest.raises(InputError, match="validation logits"):
        loss.end_epoch(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long))
    with pytest.raises(InputError, match="validation logits"):
        loss.end_epoch(torch.zeros(4, 3), torch.zeros(5, dtype=torch.long))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adafocal_bin_of_p_on_the_edges_as_the_reference(dtype):
    """p exactly on an edge goes to the bin above (lower ≤ p < upper); an edge between two float32
    values decides as the reference's float64 comparison of the promoted p."""
    ours, theirs = make_loss("adafocal", 2, n_bins=4), ref_ada.ReferenceAdaFocal(num_bins=4)
    edges = [0.05, 0.2, 0.5, 0.7, 1.0]
    ours.bin_edges, ours.bin_gammas = edges, [1.0, 2.0, 3.0, 4.0]
    ours._updates += 1
    for b in range(4):
        theirs.bin_stats[b].update(lower_boundary=edges[b], upper_boundary=edges[b + 1], gamma=float(b + 1))
    near = []
    for e in (0.2, 0.5, 0.7):
        x = np.float32(e) if dtype == torch.float32 else np.float64(e)
        near += [x, np.nextafter(x, x.dtype.type(0)), np.nextafter(x, x.dtype.type(1))]
    p = torch.tensor(np.array(near + [0.0, 0.01, 0.999, 1.0]), dtype=dtype)
    got = ours._gamma(p)
    assert got.tolist() == theirs.gamma_per_sample(p).to(dtype).tolist()
    # float32(0.7) = 0.69999998 < 0.7: below the edge, in bin 2
    seventh = 3.0 if dtype == torch.float32 else 4.0
    assert got.tolist()[:9] == [2.0, 1.0, 2.0, 3.0, 2.0, 3.0, seventh, 3.0, 4.0]


def test_adafocal_end_epoch_takes_numpy_arrays():
    x, y = validation_set(400, 3, 1.0, 0.7)
    a, b = make_loss("adafocal", 10), make_loss("adafocal", 10)
    a.end_epoch(x, y)
    b.end_epoch(x.numpy(), y.numpy())
    assert a.bin_gammas == b.bin_gammas and a.bin_edges == b.bin_edges
    assert a.bin_gammas != [1.0] * 15
