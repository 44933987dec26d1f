"""calibrate_cli.engine.kernels itself: the choice of engine (``$CALIB_ENGINE``, ``engine=``), the C
loops' refusal of arrays they cannot read, and the float16 widening, bit for bit numpy's (the engines'
agreement with the definition: tests/test_engines.py)."""

from __future__ import annotations

import numpy as np
import pytest

from calibrate_cli.engine import binning, kernels
from calibrate_cli.errors import InputError


def test_the_choice_of_engine(monkeypatch):
    monkeypatch.setenv(kernels.ENGINE_ENV, "numpy")
    assert kernels.default_engine() == "numpy" and kernels.check_engine(None) == "numpy"
    monkeypatch.setenv(kernels.ENGINE_ENV, "gpu")
    with pytest.raises(InputError, match="CALIB_ENGINE"):
        kernels.default_engine()
    monkeypatch.delenv(kernels.ENGINE_ENV)
    assert kernels.default_engine() == ("fused" if kernels.HAVE_CKERNEL else "numpy")
    with pytest.raises(InputError, match="engine"):
        kernels.check_engine("cuda")
    if kernels.HAVE_CKERNEL:
        assert kernels.check_engine("fused") == "fused"
    else:
        with pytest.raises(InputError, match="C extension"):
            kernels.check_engine("fused")


@pytest.mark.skipif(not kernels.HAVE_CKERNEL, reason="the C extension (the fused engine) is not built")
def test_the_c_loops_refuse_bad_arrays():
    x, y, edges = np.zeros((3, 4)), np.array([0, 1, 2]), binning.uniform_edges(15)
    with pytest.raises(ValueError, match="labels"):
        kernels.fused_rows(x, np.array([0, 4, 1]), edges, is_logits=True, top5=True, classwise=True)
    with pytest.raises(TypeError):
        kernels.fused_rows(x.astype(np.float16), y, edges, is_logits=True, top5=False, classwise=False)
    with pytest.raises(ValueError, match="label"):
        kernels.nll_sums(x, np.array([0, -1, 1]), 1.0)
    conf, correct, *_ = kernels.fused_rows(x, y, edges, is_logits=True, top5=True, classwise=True)
    assert conf.tolist() == [0.25] * 3 and correct.tolist() == [True, False, False]  # ties: lowest index


@pytest.mark.skipif(not kernels.HAVE_CKERNEL, reason="the C extension (the fused engine) is not built")
def test_the_c_float16_widening_is_numpys_for_every_pattern():
    """Every one of the 65,536 float16 patterns (zeros, subnormals, infinities, NaN payloads) widens to
    the float32 numpy gives it, bit for bit; chunks read through widened_rows equal numpy's too."""
    from calibrate_cli.engine.summary import widened_rows

    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    out = np.empty(halves.shape, dtype=np.float32)
    kernels.half_to_float(halves, out)
    np.testing.assert_array_equal(out.view(np.uint32), halves.astype(np.float32).view(np.uint32))
    scores = halves[: 256 * 100].reshape(256, 100)
    np.testing.assert_array_equal(widened_rows(scores, slice(3, 200)).view(np.uint32),
                                  scores[3:200].astype(np.float32).view(np.uint32))
