"""The paper's augmentation on device tensors: random crop with padding 4, random horizontal flip.

torchvision's ``RandomCrop(32, padding=4)`` + ``RandomHorizontalFlip()`` (the reference's CIFAR
transform) image by image on the CPU, done here for a whole batch at once where the batch lives
(one gather, no Python loop over images, no host synchronisation): each image i gets offsets
(dy_i, dx_i) uniform in {0, …, 2·pad} of its padded copy and is mirrored with probability 1/2.
The padding is the value a black pixel has after normalisation (the reference pads before
normalising). The draws come from a ``torch.Generator`` on the batch's device, so a run is
reproducible and its state goes into the checkpoint.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def random_crop_flip(x: torch.Tensor, generator: torch.Generator | None = None, *, pad: int = 4,
                     pad_value: torch.Tensor | None = None, flip: bool = True) -> torch.Tensor:
    """Randomly crop each image of ``x`` (B, C, H, W) from its copy padded by ``pad`` on every side
    (filled with ``pad_value``, (C,) or a scalar; default 0) back to H x W, and mirror it left-right
    with probability 1/2 (``flip``). Returns a new (B, C, H, W) tensor in channels-last memory
    layout; ``x`` is not changed."""
    b, c, h, w = x.shape
    dev = x.device
    if pad > 0:
        padded = F.pad(x, (pad, pad, pad, pad))
        if pad_value is not None:
            value = torch.as_tensor(pad_value, dtype=x.dtype, device=dev).reshape(1, -1, 1, 1)
            border = torch.ones((1, 1, h + 2 * pad, w + 2 * pad), dtype=torch.bool, device=dev)
            border[:, :, pad:pad + h, pad:pad + w] = False
            padded = torch.where(border, value.expand(1, c, 1, 1), padded)
    else:
        padded = x
    dy = torch.randint(0, 2 * pad + 1, (b, 1), generator=generator, device=dev)
    dx = torch.randint(0, 2 * pad + 1, (b, 1), generator=generator, device=dev)
    rows = dy + torch.arange(h, device=dev)  # (B, H)
    cols = torch.arange(w, device=dev).expand(b, w)
    if flip:
        mirror = torch.randint(0, 2, (b, 1), generator=generator, device=dev).bool()
        cols = torch.where(mirror, (w - 1) - cols, cols)
    cols = dx + cols  # (B, W)
    batch = torch.arange(b, device=dev)[:, None, None]
    out = padded[batch, :, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
    return out.permute(0, 3, 1, 2)
