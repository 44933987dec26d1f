"""Training losses of Mukhoti et al. (2020), *Calibrating Deep Neural Networks using Focal Loss*, and
the baselines it compares with, exactly as the reference training loop uses them (torch).

:func:`make_loss` builds one by name (:data:`LOSS_NAMES`); each is a :class:`CalibrationLoss`, an
``nn.Module`` whose ``forward(logits (N, K), labels (N,))`` returns the *batch objective* the
reference code back-propagates (github.com/torrvision/focal_calibration, ``train_utils.py``; AdaFocal:
github.com/3mcloud/adafocal): summed over the batch for the focal family, cross-entropy and label
smoothing, the batch mean for Brier, and ``N · (mean CE + λ · MMCE_w)`` for MMCE. With
``p = softmax(logits)[y]`` the probability of the true class:

=============  ================================================================  =============
name           per-sample loss                                                    reduction
=============  ================================================================  =============
``ce``         −log p                                                             sum
``focal``      −α_y (1 − p)^γ log p  (γ = ``gamma``, 3; α: ``alpha``, none)       sum
``flsd53``     focal with γ = 5 where p < 0.2, else 3                             sum
``flsd532``    focal with γ = 5 where p < 0.2, 3 where 0.2 ≤ p < 0.5, else 2      sum
``flsc531``    focal with γ = 5, 3, 1 in epochs [0, 100), [100, 250), [250, 350)  sum
``flsc532``    as flsc531 with 2 in the last phase                                sum
``ls``         −(1 − ε) log p − ε/(K − 1) Σ_{k≠y} log p_k  (ε = ``eps``, 0.05)    sum
``brier``      Σ_k (p_k − [k = y])²                                               mean
``mmce``       CE + λ · MMCE_w (λ = ``lam``, 2)                                   N · mean
``adafocal``   −(1 − p)^γ_b log p, or −(1 + p)^|γ_b| log p where γ_b < 0          sum
=============  ================================================================  =============

Conventions (the reference code's, checked against it in tests/test_losses.py; docs/losses.md):

* γ is chosen from the ``p`` of the current forward pass and carries no gradient; ``p`` is not
  detached inside ``(1 − p)^γ``.
* Thresholds are strict as in the reference (``p < 0.2`` → 5): p = 0.2 gets 3 and p = 0.5 gets the
  last γ. The comparison is exact: the reference compares the float32 ``p`` promoted to float64
  with the float64 constant; here it is compared with the smallest value of ``p``'s dtype that is
  ≥ the constant, which decides every value of that dtype the same way (no float64 on the device).
* Logits in half precision (bf16/fp16 autocast) are computed in float32; float32 and float64 as
  they come. The forward pass has no per-sample Python and no host synchronisation (no ``.item()``,
  no branching on tensor values), so it runs inside CUDA graphs and ``torch.compile``.

Epoch hooks: the training loop calls :meth:`CalibrationLoss.start_epoch` before each epoch (0-based;
the flsc schedules) and, where :attr:`CalibrationLoss.needs_validation` is true (``adafocal``),
:meth:`CalibrationLoss.end_epoch` with the validation logits and labels after each epoch. The
AdaFocal state is in buffers: save ``loss.state_dict()`` with the checkpoint to resume exactly.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InputError

__all__ = [
    "LOSS_NAMES",
    "LOSS_PARAMS",
    "PAPER_EPOCHS",
    "CalibrationLoss",
    "make_loss",
    "scale_epoch",
]

#: the length of the paper's runs; its epoch milestones are scaled to a run's length by :func:`scale_epoch`
PAPER_EPOCHS = 350
#: FLSD's thresholds on p (γ = 5 below the first; 3 below the second; the last γ from there)
FLSD_THRESHOLDS = (0.2, 0.5)
#: FLSC's epochs (of the paper's 350) where γ steps down
FLSC_STEPS = (100, 250)
#: the Laplacian kernel width of MMCE (Kumar et al. 2018; the reference's 0.4)
MMCE_KERNEL_WIDTH = 0.4


def scale_epoch(epoch: int, total_epochs: int, paper_epochs: int = PAPER_EPOCHS) -> int:
    """The epoch of a ``total_epochs`` run that corresponds to ``epoch`` of the paper's 350, rounded
    half up: ``scale_epoch(100, 350) == 100``, ``scale_epoch(100, 35) == 10``, ``scale_epoch(250, 5) == 4``.

    >>> [scale_epoch(e, 35) for e in (100, 150, 250)]
    [10, 15, 25]
    """
    return (2 * epoch * total_epochs + paper_epochs) // (2 * paper_epochs)


def _ceil_in(value: float, dtype: torch.dtype) -> float:
    """The smallest number of ``dtype`` that is ≥ ``value`` (a Python float, exact in ``dtype``):
    for every x of that dtype, ``x < value`` ⇔ ``x < _ceil_in(value, dtype)`` and
    ``x ≥ value`` ⇔ ``x ≥ _ceil_in(value, dtype)``."""
    if dtype == torch.float64:
        return float(value)
    np_dtype = {torch.float32: np.float32, torch.float16: np.float16}.get(dtype)
    if np_dtype is None:  # bfloat16 (not reached: half precision is computed in float32)
        t = torch.tensor(value, dtype=dtype)
        if float(t) < value:
            t = torch.nextafter(t, torch.tensor(math.inf, dtype=dtype))
        return float(t)
    v = np_dtype(value)
    if float(v) < value:
        v = np.nextafter(v, np_dtype(np.inf))
    return float(v)


def _in_compute_dtype(logits: torch.Tensor) -> torch.Tensor:
    """float32/float64 logits as they are; anything else (bf16, fp16) in float32."""
    return logits if logits.dtype in (torch.float32, torch.float64) else logits.float()


def _true_class_log_prob(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p_y, shape (N,), as the reference: ``log_softmax(logits, 1).gather(1, y)``."""
    return F.log_softmax(logits, dim=1).gather(1, labels.view(-1, 1)).view(-1)


class CalibrationLoss(nn.Module):
    """A training loss of :data:`LOSS_NAMES`: ``forward(logits, labels)`` → the scalar batch objective.

    Attributes: ``name``; ``num_classes``; ``params`` (the resolved parameters, JSON-ready);
    ``needs_validation`` (call :meth:`end_epoch` with the validation set after each epoch).
    """

    needs_validation: bool = False

    def __init__(self, name: str, num_classes: int, params: dict[str, Any]):
        super().__init__()
        self.name = name
        self.num_classes = int(num_classes)
        self.params = dict(params)

    # -- the epoch hooks (no-ops unless a loss has a schedule or a state) --------------------------
    def start_epoch(self, epoch: int, total_epochs: int) -> None:
        """Called before epoch ``epoch`` (0-based) of ``total_epochs``; a no-op unless scheduled."""

    def end_epoch(self, val_logits, val_labels) -> None:
        """Called after each epoch with the validation logits and labels; a no-op unless
        :attr:`needs_validation`."""

    # -- forward ------------------------------------------------------------------------------------
    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self._check(logits, labels)
        return self._objective(_in_compute_dtype(logits), labels.long())

    def _objective(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _check(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        """Shapes only (no look at values: that would synchronise with the device)."""
        if logits.ndim != 2 or logits.shape[1] != self.num_classes:
            raise InputError(
                f"loss {self.name!r}: logits must have shape (N, {self.num_classes}), got {tuple(logits.shape)}"
            )
        if labels.ndim != 1 or labels.shape[0] != logits.shape[0]:
            raise InputError(
                f"loss {self.name!r}: labels must have shape ({logits.shape[0]},), got {tuple(labels.shape)}"
            )
        if labels.dtype.is_floating_point or labels.dtype == torch.bool:
            raise InputError(f"loss {self.name!r}: labels must be integers, got {labels.dtype}")

    def extra_repr(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"name={self.name!r}, num_classes={self.num_classes}" + (f", {params}" if params else "")


class CrossEntropy(CalibrationLoss):
    """−Σ_i log p_i (the reference's ``F.cross_entropy(..., reduction='sum')``)."""

    def _objective(self, logits, labels):
        return F.cross_entropy(logits, labels, reduction="sum")


class _FocalFamily(CalibrationLoss):
    """Σ_i −α_{y_i} (1 − p_i)^γ_i log p_i with γ_i from :meth:`_gamma` (a float, or a (N,) tensor
    without gradient) and α optional (:func:`_alpha_weights`)."""

    def __init__(self, name, num_classes, params):
        super().__init__(name, num_classes, params)
        #: per-class α (float64, host), or None; :meth:`_alpha_on` holds its copy on the device
        self.alpha = _alpha_weights(params.get("alpha"), self.num_classes)
        self._alpha_cache: dict = {}

    def _alpha_on(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """α on ``device`` in ``dtype``, copied there once (not at every step)."""
        key = (device, dtype)
        if key not in self._alpha_cache:
            self._alpha_cache = {key: self.alpha.to(dtype).to(device)}
        return self._alpha_cache[key]

    def _gamma(self, p: torch.Tensor) -> float | torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _objective(self, logits, labels):
        logp = _true_class_log_prob(logits, labels)
        p = logp.exp()
        loss = -1 * (1 - p) ** self._gamma(p.detach()) * logp
        if self.alpha is not None:
            loss = loss * self._alpha_on(loss.device, loss.dtype)[labels]
        return loss.sum()


class Focal(_FocalFamily):
    """Focal loss with a fixed γ (Lin et al. 2017; the reference's ``FocalLoss(gamma)``)."""

    def _gamma(self, p):
        return self.params["gamma"]


class FocalSampleDependent(_FocalFamily):
    """FLSD: γ by the true-class probability p of this forward pass (the reference's
    ``FocalLossAdaptive``): ``gammas[j]`` for the first threshold with p < threshold (strict), the
    last γ from the last threshold on."""

    def __init__(self, name, num_classes, params, gammas: Sequence[float], thresholds: Sequence[float]):
        super().__init__(name, num_classes, params)
        self.gammas = tuple(float(g) for g in gammas)
        self.thresholds = tuple(float(t) for t in thresholds)

    def _gamma(self, p):
        gamma = torch.full_like(p, self.gammas[-1])
        # from the highest threshold down, so the lowest one decides last
        for t, g in reversed(list(zip(self.thresholds, self.gammas))):
            gamma = gamma.masked_fill(p < _ceil_in(t, p.dtype), g)
        return gamma


class FocalScheduled(_FocalFamily):
    """FLSC: γ by epoch, ``gammas[j]`` from epoch ``scale_epoch(FLSC_STEPS[j-1])`` on (the
    reference's ``--gamma-schedule 1``: ``epoch < step1`` → γ1, ``< step2`` → γ2, else γ3)."""

    def __init__(self, name, num_classes, params, gammas: Sequence[float]):
        super().__init__(name, num_classes, params)
        self.gammas = tuple(float(g) for g in gammas)
        self.gamma = self.gammas[0]

    def start_epoch(self, epoch: int, total_epochs: int) -> None:
        steps = [scale_epoch(s, total_epochs) for s in FLSC_STEPS]
        self.gamma = self.gammas[sum(epoch >= s for s in steps)]

    def _gamma(self, p):
        return self.gamma


class LabelSmoothing(CalibrationLoss):
    """Σ_i −[(1 − ε) log p_{i,y} + ε/(K − 1) Σ_{k≠y} log p_{ik}] (ε/(K − 1) on each wrong class;
    note torch's ``label_smoothing=ε`` puts ε/K on every class instead)."""

    def _objective(self, logits, labels):
        eps = self.params["eps"]
        k = logits.shape[1]
        logp = F.log_softmax(logits, dim=1)
        true = logp.gather(1, labels.view(-1, 1)).view(-1)
        wrong = logp.sum(dim=1) - true
        return -((1 - eps) * true + (eps / (k - 1)) * wrong).sum()


class Brier(CalibrationLoss):
    """(1/N) Σ_i Σ_k (p_ik − [k = y_i])² (the reference's ``BrierScore``)."""

    def _objective(self, logits, labels):
        probs = F.softmax(logits, dim=1)
        one_hot = F.one_hot(labels, logits.shape[1]).to(probs.dtype)
        return ((one_hot - probs) ** 2).sum() / logits.shape[0]


class MMCE(CalibrationLoss):
    """N · (mean CE + λ · MMCE_w): the weighted MMCE of Kumar et al. (2018) as the reference's
    ``MMCE_weighted`` computes it and ``train_utils`` scales it (``len(data) * (ce + λ·mmce)``).

    With r_i the top-label confidence, c_i = [argmax = y_i], m = Σ c_i, n = N − m,
    k(r, r') = exp(−|r − r'|/0.4), u_i = c_i (1 − r_i), v_i = (1 − c_i) r_i:

        MMCE_w² = uᵀKu / (m² (m² + 1e-5)) + vᵀKv / (n² (n² + 1e-5)) − 2 uᵀKv / (mn (mn + 1e-5))

    (the reference averages each kernel block, then divides by m² + 1e-5 etc. again: this is its
    normalisation, kept) and MMCE_w = sqrt(MMCE_w² + 1e-10), 0 when m = 0 or n = 0.
    """

    def _objective(self, logits, labels):
        n_total = logits.shape[0]
        lam = self.params["lam"]
        ce = F.cross_entropy(logits, labels)
        probs = F.softmax(logits, dim=1)
        conf, pred = torch.max(probs, 1)
        correct = (pred == labels).to(conf.dtype)
        kernel = torch.exp(-1.0 * torch.abs(conf.unsqueeze(1) - conf.unsqueeze(0)) / MMCE_KERNEL_WIDTH)
        u = correct * (1.0 - conf)
        v = (1.0 - correct) * conf
        ku, kv = kernel @ u, kernel @ v
        m = correct.sum()
        n = n_total - m
        both = (m > 0) & (n > 0)
        m1, n1 = m.clamp(min=1), n.clamp(min=1)
        mmd = (u @ ku) / (m1 * m1 * (m1 * m1 + 1e-5))
        mmd = mmd + (v @ kv) / (n1 * n1 * (n1 * n1 + 1e-5))
        mmd = mmd - 2.0 * (u @ kv) / (m1 * n1 * (m1 * n1 + 1e-5))
        mmce = torch.where(both, torch.sqrt(mmd + 1e-10), torch.zeros_like(mmd))
        return n_total * (ce + lam * mmce)


class AdaFocal(CalibrationLoss):
    """AdaFocal (Ghosh, Schaaf & Gormley, NeurIPS 2022; github.com/3mcloud/adafocal): focal loss with
    one γ_b per confidence bin b, updated after each epoch from the validation set.

    Forward: sample i falls in bin b by its true-class probability p_i (bins from the last update:
    b = number of inner edges ≤ p_i, so bin 0 is p < e_1 and the last bin p ≥ e_{B−1}); the loss is
    Σ_i −(1 − sign(γ_b) p_i + 1e-20)^|γ_b| log p_i: focal for γ_b > 0, *inverse focal*
    −(1 + p)^|γ_b| log p for γ_b < 0. Before the first update every bin has ``gamma_initial``.

    :meth:`end_epoch` (the reference's ``update_bin_stats`` on ``adaECE_error_mukhoti``'s bins):
    top-label confidences r of the validation set, B + 1 equal-mass edges
    ``np.interp(linspace(0, N, B + 1), arange(N), sort(r))``, bin b = {e_b < r ≤ e_{b+1}} (the
    sample at the minimum is in no bin, as in the reference), gap g_b = mean(r) − accuracy in bin b
    (0 for an empty bin), and

        γ_b ← γ_b · exp(λ g_b)  if γ_b > 0,   γ_b · exp(−λ g_b)  otherwise;
        if |γ_b| < switch: γ_b ← −switch if γ_b > 0 else +switch;   γ_b ← clip(γ_b, γ_min, γ_max).

    So an over-confident bin (g_b > 0) gets a larger γ while γ > 0; in the inverse-focal regime
    (γ < 0) over-confidence pushes γ towards 0 and back across the switch into focal. Defaults: 15
    bins, λ = 1, γ_initial = 1, switch 0.2, clip [−2, 20] (the reference's).
    """

    needs_validation = True

    def __init__(self, name, num_classes, params):
        super().__init__(name, num_classes, params)
        n_bins = params["n_bins"]
        # the state, exact in float64 on the host as in the reference (Python floats): γ per bin and
        # the bins' edges (the reference's initial bins are equal-width; with one γ they do not matter)
        self.bin_gammas = [float(params["gamma_initial"])] * n_bins
        self.bin_edges = [b / n_bins for b in range(n_bins + 1)]
        self._updates = 0
        self._cache: dict = {}

    def get_extra_state(self):
        """The state in ``state_dict()`` (save it with the checkpoint to resume exactly)."""
        return {"bin_gammas": list(self.bin_gammas), "bin_edges": list(self.bin_edges), "updates": self._updates}

    def set_extra_state(self, state) -> None:
        gammas, edges = [float(g) for g in state["bin_gammas"]], [float(e) for e in state["bin_edges"]]
        if len(gammas) != self.params["n_bins"] or len(edges) != len(gammas) + 1:
            raise InputError(f"loss {self.name!r}: saved state has {len(gammas)} bins, expected {self.params['n_bins']}")
        self.bin_gammas, self.bin_edges, self._updates = gammas, edges, int(state.get("updates", 0))
        self._cache = {}

    def _on(self, device: torch.device, dtype: torch.dtype):
        """(inner edges ceiled into ``dtype``, γ rounded to ``dtype``) on ``device``, built once per
        update from the host state (one small transfer; then no host work in forward). γ is rounded
        as the reference's ``torch.tensor(list)`` does (float32 logits: float32 γ)."""
        key = (device, dtype, self._updates)
        if self._cache.get("key") != key:
            inner = [_ceil_in(e, dtype) for e in self.bin_edges[1:-1]]
            self._cache = {
                "key": key,
                "edges": torch.tensor(inner, dtype=dtype, device=device),
                "gammas": torch.tensor(self.bin_gammas, dtype=torch.float64).to(device=device, dtype=dtype),
            }
        return self._cache["edges"], self._cache["gammas"]

    def _gamma(self, p: torch.Tensor) -> torch.Tensor:
        """γ of each sample's bin: b = #(inner edges ≤ p), as the reference's first bin (in order)
        with lower ≤ p < upper (bin 0 open below, the last open above)."""
        edges, gammas = self._on(p.device, p.dtype)
        return gammas[torch.bucketize(p, edges, right=True)]

    def _objective(self, logits, labels):
        logp = _true_class_log_prob(logits, labels)
        p = logp.exp()
        gamma = self._gamma(p.detach())
        sp = torch.sign(gamma) * p
        loss = -1 * (1 - sp + 1e-20) ** torch.abs(gamma) * logp
        return loss.sum()

    def bin_statistics(self, val_logits, val_labels):
        """(edges (B + 1,), gaps (B,)) of the validation set as the reference's
        ``adaECE_error_mukhoti``: equal-mass edges of the top-label confidences, bins (e_b, e_{b+1}],
        gap = mean confidence − accuracy (0 where empty)."""
        logits = torch.as_tensor(val_logits).detach()
        labels = torch.as_tensor(val_labels).detach()
        if logits.ndim != 2 or labels.ndim != 1 or labels.shape[0] != logits.shape[0] or logits.shape[0] == 0:
            raise InputError(
                f"loss {self.name!r}: validation logits (N, K) and labels (N,) with N ≥ 1 expected, "
                f"got {tuple(logits.shape)} and {tuple(labels.shape)}"
            )
        logits = _in_compute_dtype(logits)
        log_conf, pred = torch.max(F.log_softmax(logits, dim=1), dim=1)
        conf = log_conf.exp().cpu().numpy()
        correct = (pred == labels.to(pred.device)).cpu().numpy()
        n = len(conf)
        n_bins = self.params["n_bins"]
        edges = np.interp(np.linspace(0, n, n_bins + 1), np.arange(n), np.sort(conf))
        # the reference compares the confidences with each edge in their own dtype
        edges_c = edges.astype(conf.dtype)
        gaps = np.zeros(n_bins)
        for b in range(n_bins):  # B bins, once per epoch: not the per-sample hot path
            in_bin = (conf > edges_c[b]) & (conf <= edges_c[b + 1])
            if in_bin.any():
                gaps[b] = float(np.mean(conf[in_bin], dtype=np.float64) - np.mean(correct[in_bin]))
        return edges, gaps

    def end_epoch(self, val_logits, val_labels) -> None:
        """Update γ_b from the validation set (the rule in the class docstring). Tensors or NumPy
        arrays; given as tensors on the training device, the new state is copied there now rather
        than in the next step."""
        edges, gaps = self.bin_statistics(val_logits, val_labels)
        lam, switch = self.params["lam"], self.params["switch"]
        lo, hi = self.params["gamma_min"], self.params["gamma_max"]
        new = []
        for prev, gap in zip(self.bin_gammas, gaps.tolist()):
            nxt = prev * math.exp(lam * gap) if prev > 0 else prev * math.exp(-lam * gap)
            if abs(nxt) < switch:
                nxt = -switch if nxt > 0 else switch
            new.append(max(min(nxt, hi), lo))
        self.bin_gammas, self.bin_edges = new, [float(e) for e in edges]
        self._updates += 1
        logits = torch.as_tensor(val_logits)
        self._on(logits.device, _in_compute_dtype(logits).dtype)  # the transfer now, not in the next step


# -- parameters -------------------------------------------------------------------------------------


def _alpha_weights(alpha, num_classes: int) -> torch.Tensor | None:
    """α of the α-balanced focal loss as per-class weights (K,), or None. A number α needs K = 2 and
    weights the positive class 1 by α and the negative class 0 by 1 − α, i.e. (1 − α, α) for classes
    (0, 1), as Lin et al. (2017) and torchvision's ``sigmoid_focal_loss`` (α_t = α for y = 1); a
    sequence gives one weight per class."""
    if alpha is None:
        return None
    if isinstance(alpha, (int, float)) and not isinstance(alpha, bool):
        if num_classes != 2:
            raise InputError(
                f"a single alpha weights class 1 by alpha and class 0 by 1 - alpha and needs 2 classes, "
                f"not {num_classes}; give {num_classes} per-class weights"
            )
        if not 0 <= alpha <= 1:
            raise InputError(f"alpha must be in [0, 1], got {alpha}")
        weights = [1.0 - float(alpha), float(alpha)]
    else:
        try:
            weights = [float(a) for a in alpha]
        except (TypeError, ValueError):
            raise InputError(f"alpha must be a number or {num_classes} per-class weights, got {alpha!r}") from None
        if len(weights) != num_classes:
            raise InputError(f"alpha needs one weight per class ({num_classes}), got {len(weights)}")
        if not all(math.isfinite(w) and w >= 0 for w in weights):
            raise InputError(f"alpha weights must be finite and ≥ 0, got {weights}")
    return torch.tensor(weights, dtype=torch.float64)


def _number(name: str, *, low: float | None = None, high: float | None = None, low_open=False, integer=False):
    """A checker of one numeric parameter: finite, within [low, high] (``low_open``: (low, ...))."""

    def check(value):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InputError(f"{name} must be a number, got {value!r}")
        if integer and int(value) != value:
            raise InputError(f"{name} must be an integer, got {value!r}")
        value = int(value) if integer else float(value)
        if not math.isfinite(value):
            raise InputError(f"{name} must be finite, got {value}")
        if low is not None and (value <= low if low_open else value < low):
            raise InputError(f"{name} must be {'>' if low_open else '≥'} {low:g}, got {value:g}")
        if high is not None and value > high:
            raise InputError(f"{name} must be ≤ {high:g}, got {value:g}")
        return value

    return check


def _alpha(value):
    return value if value is None or isinstance(value, (int, float)) else [float(a) for a in value]


#: each loss's parameters: name → (default, checker). ``None`` given for a parameter means its default.
LOSS_PARAMS: dict[str, dict[str, tuple[Any, Callable]]] = {
    "ce": {},
    "focal": {"gamma": (3.0, _number("gamma", low=0)), "alpha": (None, _alpha)},
    "flsd53": {"alpha": (None, _alpha)},
    "flsd532": {"alpha": (None, _alpha)},
    "flsc531": {"alpha": (None, _alpha)},
    "flsc532": {"alpha": (None, _alpha)},
    "ls": {"eps": (0.05, _number("eps", low=0, high=1))},
    "brier": {},
    "mmce": {"lam": (2.0, _number("lam", low=0))},
    "adafocal": {
        "n_bins": (15, _number("n_bins", low=1, integer=True)),
        "lam": (1.0, _number("lam", low=0)),
        "gamma_initial": (1.0, _number("gamma_initial")),
        "switch": (0.2, _number("switch", low=0)),
        "gamma_min": (-2.0, _number("gamma_min")),
        "gamma_max": (20.0, _number("gamma_max")),
    },
}
#: every loss :func:`make_loss` knows, in the order of the docs
LOSS_NAMES = tuple(LOSS_PARAMS)


def _build(name: str, num_classes: int, params: dict) -> CalibrationLoss:
    if name == "ce":
        return CrossEntropy(name, num_classes, params)
    if name == "focal":
        return Focal(name, num_classes, params)
    if name == "flsd53":
        return FocalSampleDependent(name, num_classes, params, (5.0, 3.0), FLSD_THRESHOLDS[:1])
    if name == "flsd532":
        return FocalSampleDependent(name, num_classes, params, (5.0, 3.0, 2.0), FLSD_THRESHOLDS)
    if name == "flsc531":
        return FocalScheduled(name, num_classes, params, (5.0, 3.0, 1.0))
    if name == "flsc532":
        return FocalScheduled(name, num_classes, params, (5.0, 3.0, 2.0))
    if name == "ls":
        return LabelSmoothing(name, num_classes, params)
    if name == "brier":
        return Brier(name, num_classes, params)
    if name == "mmce":
        return MMCE(name, num_classes, params)
    return AdaFocal(name, num_classes, params)


def make_loss(name: str, num_classes: int, **params) -> CalibrationLoss:
    """The training loss ``name`` (one of :data:`LOSS_NAMES`) for ``num_classes`` classes.

    ``params`` are the loss's parameters (:data:`LOSS_PARAMS`: ``gamma`` and ``alpha`` of focal,
    ``eps`` of ls, ``lam`` of mmce, ...); a parameter given as ``None`` takes its default. An unknown
    name, a parameter the loss does not take or a bad value raises :class:`~calibrate_cli.errors.InputError`.

    >>> import torch
    >>> loss = make_loss("flsd53", 3)
    >>> logits = torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]])
    >>> round(float(loss(logits, torch.tensor([0, 1]))), 4)   # p = 1/3 → γ 3; p ≈ 0.107 → γ 5
    1.6008
    """
    if name not in LOSS_PARAMS:
        raise InputError(f"unknown loss {name!r}; choose from {', '.join(LOSS_NAMES)}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
        raise InputError(f"loss {name!r} needs an integer number of classes ≥ 2, got {num_classes!r}")
    spec = LOSS_PARAMS[name]
    unknown = sorted(k for k, v in params.items() if k not in spec and v is not None)
    if unknown:
        takes = ", ".join(spec) if spec else "no parameters"
        raise InputError(f"loss {name!r} takes {takes}; got {', '.join(unknown)}")
    resolved = {}
    for key, (default, check) in spec.items():
        value = params.get(key)
        resolved[key] = default if value is None else check(value)
    if name == "adafocal" and resolved["gamma_min"] > resolved["gamma_max"]:
        raise InputError(f"gamma_min ({resolved['gamma_min']:g}) must be ≤ gamma_max ({resolved['gamma_max']:g})")
    return _build(name, int(num_classes), resolved)
