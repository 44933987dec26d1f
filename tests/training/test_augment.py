"""Random crop (pad 4) + horizontal flip on device tensors: every output is one crop of the padded
image, possibly mirrored, found here by brute force over all 9 x 9 x 2 choices."""

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calibrate_cli.training.augment import random_crop_flip  # noqa: E402


def _choices(image: np.ndarray, out: np.ndarray, pad: int, fill: np.ndarray):
    """Every (dy, dx, flipped) whose crop of ``image`` padded with ``fill`` equals ``out`` (numpy loop)."""
    c, h, w = image.shape
    padded = np.empty((c, h + 2 * pad, w + 2 * pad), dtype=image.dtype)
    padded[:] = fill[:, None, None]
    padded[:, pad:pad + h, pad:pad + w] = image
    found = []
    for dy, dx, flip in itertools.product(range(2 * pad + 1), range(2 * pad + 1), (False, True)):
        crop = padded[:, dy:dy + h, dx:dx + w]
        if flip:
            crop = crop[:, :, ::-1]
        if np.array_equal(crop, out):
            found.append((dy, dx, flip))
    return found


def test_each_output_is_a_padded_crop_maybe_mirrored():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, 6, 5)  # distinct values everywhere: the choice is unique
    fill = np.array([-1.5, 0.25, 2.0], dtype=np.float32)
    out = random_crop_flip(x, g, pad=2, pad_value=torch.from_numpy(fill))
    assert out.shape == x.shape
    seen = set()
    for i in range(len(x)):
        found = _choices(x[i].numpy(), out[i].numpy(), 2, fill)
        assert len(found) == 1, (i, found)
        seen.add(found[0])
    assert {f for _, _, f in seen} == {False, True}
    assert len({(dy, dx) for dy, dx, _ in seen}) > 10  # offsets vary


def test_all_offsets_and_both_flips_occur_about_uniformly():
    # a 9x9 ramp padded by 4: the output's centre pixel is the ramp at (dy, dx), mirrored or not
    h = w = 9
    ramp = torch.arange(h * w, dtype=torch.float32).reshape(1, 1, h, w).repeat(9000, 1, 1, 1)
    out = random_crop_flip(ramp, torch.Generator().manual_seed(1), pad=4, pad_value=torch.tensor([-1.0]))
    center = out[:, 0, 4, 4].long()  # the ramp value under the output's centre
    flipped = out[:, 0, 4, 3] > out[:, 0, 4, 5]  # a mirrored row decreases left to right
    counts = torch.bincount(center, minlength=h * w).reshape(h, w)
    assert (counts > 0).all()  # every one of the 81 offsets
    assert counts.min() > 9000 / 81 * 0.6 and counts.max() < 9000 / 81 * 1.4
    assert abs(flipped.float().mean().item() - 0.5) < 0.03


def test_seeded_and_input_untouched():
    x = torch.randn(16, 3, 8, 8)
    before = x.clone()
    a = random_crop_flip(x, torch.Generator().manual_seed(5))
    b = random_crop_flip(x, torch.Generator().manual_seed(5))
    c = random_crop_flip(x, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(x, before)


def test_no_pad_no_flip_is_the_identity():
    x = torch.randn(4, 3, 5, 5)
    assert torch.equal(random_crop_flip(x, torch.Generator().manual_seed(0), pad=0, flip=False), x)
