"""Where the computations over the data run: device names, their resolution, and one array namespace per device.

calib's array math is written once against a small namespace of operations (:class:`NumpyOps`,
:class:`TorchOps`) — the ``xp`` of the array-API idiom, reduced to what calib uses — so a
computation runs on numpy or on torch (CPU or CUDA) with the same code. Results stay float64 on
every device; they agree with numpy up to float64 summation order.

Devices (``--device``):

- ``"cpu"``: numpy (default);
- ``"cuda"``: torch on the GPU (needs torch and a CUDA GPU);
- ``"torch-cpu"``: the same torch code on the CPU (to test the torch path without a GPU);
- ``"auto"``: ``"cuda"`` when torch and a GPU are there, else ``"cpu"``.

torch is imported only when a torch device is asked for, so ``import calibrate_cli`` never imports it.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError

__all__ = ["DEVICES", "DEFAULT_DEVICE", "NumpyOps", "TorchOps", "array_ops", "check_device", "resolve_device"]

DEVICES = ("cpu", "cuda", "auto", "torch-cpu")
DEFAULT_DEVICE = "cpu"

# the pinned install (an unpinned torch pulls a multi-GB CUDA build): see README
TORCH_INSTALL = "pip install torch==2.13.0"


def _torch_device(device: str):
    """The torch device for ``device``, or None for numpy. Raises InputError when unavailable."""
    if device not in DEVICES:
        raise InputError(f"Expected `device` to be one of {DEVICES}, but got {device!r}")
    if device == "cpu":
        return None
    try:
        import torch
    except ImportError:
        if device == "auto":
            return None
        raise InputError(f"device {device!r} needs torch, which is not installed ({TORCH_INSTALL})") from None
    if device == "torch-cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        if device == "auto":
            return None
        raise InputError("device 'cuda' needs a CUDA GPU, but torch sees none (device 'cpu' or 'auto' runs without one)")
    return torch.device("cuda")


def check_device(device: str) -> None:
    """Raise InputError now (before any work) when ``device`` is unknown or unavailable here."""
    _torch_device(device)


def resolve_device(device: str) -> str:
    """Where ``device`` runs here: ``"cpu"`` (numpy), ``"cuda"`` or ``"torch-cpu"``.

    ``"auto"`` resolves to ``"cuda"`` when torch and a GPU are there, else ``"cpu"``. Raises
    InputError for an unknown device, or for ``"cuda"``/``"torch-cpu"`` without torch or a GPU.
    """
    torch_device = _torch_device(device)
    if torch_device is None:
        return "cpu"
    return "cuda" if device == "auto" else device


def array_ops(device: str) -> "NumpyOps | TorchOps":
    """The array namespace that runs on ``device``."""
    torch_device = _torch_device(device)
    return NumpyOps() if torch_device is None else TorchOps(torch_device)


class NumpyOps:
    """The operations calib's array code uses, on numpy arrays (the reference semantics)."""

    name = "cpu"

    def asarray(self, a):
        return np.asarray(a)

    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x)

    def zeros(self, shape):
        return np.zeros(shape)

    def arange(self, n: int):
        return np.arange(n)

    def to_float32(self, x):
        return x.astype(np.float32)

    def to_float64(self, x):
        return x.astype(np.float64)

    def minimum(self, x, bound: int):
        return np.minimum(x, bound)

    def broadcast_to(self, x, shape):
        return np.broadcast_to(x, shape)

    def einsum(self, spec: str, *operands):
        return np.einsum(spec, *operands)

    def matmul(self, a, b):
        return np.matmul(a, b)

    def swap01(self, x):
        """Swap the first two axes (a view)."""
        return np.swapaxes(x, 0, 1)

    def cumsum(self, x, axis: int):
        return np.cumsum(x, axis=axis)

    def diff(self, x, axis: int):
        return np.diff(x, axis=axis)

    def rint(self, x):
        return np.rint(x)

    def where(self, cond, a, b):
        return np.where(cond, a, b)

    def concat(self, arrays, axis: int):
        return np.concatenate(arrays, axis=axis)

    def searchsorted(self, sorted_values, values, *, right: bool):
        """Positions of ``values`` (any shape) in the 1-D ``sorted_values``."""
        return np.searchsorted(sorted_values, values, side="right" if right else "left")

    def searchsorted_rows(self, sorted_rows, values, *, right: bool):
        """Row r: positions of the 1-D ``values`` in ``sorted_rows[r]`` → (rows, len(values))."""
        side = "right" if right else "left"
        return np.stack([np.searchsorted(row, values, side=side) for row in sorted_rows])


class TorchOps(NumpyOps):
    """The same operations on torch tensors on ``device`` (float64 throughout)."""

    def __init__(self, device):
        import torch

        self.torch = torch
        self.device = device
        self.name = "torch-cpu" if device.type == "cpu" else device.type

    def asarray(self, a):
        return self.torch.as_tensor(np.ascontiguousarray(a), device=self.device)

    def to_numpy(self, x) -> np.ndarray:
        return x.cpu().numpy()

    def zeros(self, shape):
        return self.torch.zeros(shape, dtype=self.torch.float64, device=self.device)

    def arange(self, n: int):
        return self.torch.arange(n, device=self.device)

    def to_float32(self, x):
        return x.to(self.torch.float32)

    def to_float64(self, x):
        return x.to(self.torch.float64)

    def minimum(self, x, bound: int):
        return self.torch.clamp(x, max=bound)

    def broadcast_to(self, x, shape):
        return x.expand(shape)

    def einsum(self, spec: str, *operands):
        return self.torch.einsum(spec, *operands)

    def matmul(self, a, b):
        return self.torch.matmul(a, b)

    def swap01(self, x):
        return x.transpose(0, 1)

    def cumsum(self, x, axis: int):
        return self.torch.cumsum(x, dim=axis)

    def diff(self, x, axis: int):
        return self.torch.diff(x, dim=axis)

    def rint(self, x):
        return self.torch.round(x)  # round half to even, as np.rint

    def where(self, cond, a, b):
        return self.torch.where(cond, a, b)

    def concat(self, arrays, axis: int):
        return self.torch.cat(arrays, dim=axis)

    def searchsorted(self, sorted_values, values, *, right: bool):
        return self.torch.searchsorted(sorted_values, values.contiguous(), right=right)

    def searchsorted_rows(self, sorted_rows, values, *, right: bool):
        rows = sorted_rows.contiguous()
        return self.torch.searchsorted(rows, values[None, :].expand(rows.shape[0], -1).contiguous().to(rows.dtype), right=right)
