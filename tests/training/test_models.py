"""The networks of calib train: parameter counts of the reference implementations, forward shapes."""

import pytest

torch = pytest.importorskip("torch")

from calibrate_cli.errors import InputError  # noqa: E402
from calibrate_cli.training import MODEL_NAMES  # noqa: E402
from calibrate_cli.training.models import build_model, count_parameters  # noqa: E402

#: counts of torrvision/focal_calibration's Net/ modules for 10 classes (resnet50(), resnet110(),
#: wide_resnet_cifar(), densenet121(), built with that code and counted), and of He et al.'s CIFAR
#: ResNet-110 by hand: stem 432 + 32, stage 1 18·(2·2304 + 64), stage 2 (4608 + 9216 + 128) +
#: 17·(2·9216 + 128), stage 3 (18432 + 36864 + 256) + 17·(2·36864 + 256), fc 650 = 1,727,962 ("1.7M")
REFERENCE_COUNTS = {
    "resnet50": 23_520_842,
    "resnet110": 45_864_522,
    "wrn-26-10": 36_481_434,
    "densenet121": 6_956_298,
    "resnet110-he": 1_727_962,
}


@pytest.mark.parametrize("name", sorted(REFERENCE_COUNTS))
def test_parameter_counts_equal_the_reference_implementations(name):
    assert count_parameters(build_model(name, (3, 32, 32), 10)) == REFERENCE_COUNTS[name]


def test_the_head_grows_with_the_classes():
    # resnet50's fc: 2048·K + K
    assert count_parameters(build_model("resnet50", (3, 32, 32), 100)) == 23_520_842 + 90 * 2049


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forward_shape(name):
    torch.manual_seed(0)
    model = build_model(name, (1, 8, 8), 7).eval()
    with torch.no_grad():
        out = model(torch.randn(2, 1, 8, 8))
    assert out.shape == (2, 7) and torch.isfinite(out).all()


def test_mlp_takes_feature_vectors_and_cnn_refuses_them():
    assert build_model("mlp", (20,), 3)(torch.zeros(4, 20)).shape == (4, 3)
    with pytest.raises(InputError, match="needs images"):
        build_model("cnn", (20,), 3)


def test_unknown_model_is_named():
    with pytest.raises(InputError, match="unknown model 'resnet9'"):
        build_model("resnet9", (3, 32, 32), 10)
