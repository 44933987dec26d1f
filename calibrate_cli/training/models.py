"""Networks for ``calib train``, in plain torch (no torchvision).

The paper's CIFAR networks are written as the reference code (torrvision/focal_calibration,
``Net/``) builds them, so a run here trains the architecture behind the paper's numbers:

=================  ==============================================================  ==================
name               architecture                                                     parameters (K=10)
=================  ==============================================================  ==================
``resnet50``       bottleneck ResNet [3, 4, 6, 3], 64-512 planes, 3x3 stem, no      23,520,842
                   max-pool (reference ``Net/resnet.py``)
``resnet110``      the reference's "ResNet-110": bottleneck [3, 4, 26, 3] (sic)    45,864,522
``resnet110-he``   He et al. 2016's CIFAR ResNet-110: 3 stages of 18 basic blocks,  1,727,962
                   16/32/64 planes, parameter-free (zero-padded) shortcuts
``wrn-26-10``      Wide-ResNet-26-10 (Zagoruyko & Komodakis 2016; reference        36,481,434
                   ``Net/wide_resnet.py``: 1x1 projection shortcuts, He init)
``densenet121``    DenseNet-121 for CIFAR, growth 32, [6, 12, 24, 16], reduction   6,956,298
                   0.5 (reference ``Net/densenet.py``)
``cnn``            a small CNN (3 conv layers, 32/64/128 channels) for CPUs
``mlp``            two hidden layers of 256 ReLU units, on the flattened input
=================  ==============================================================  ==================

The reference models end with a fixed average pool (4x4 or 8x8 on 32x32 inputs); here it is a
global average pool, identical on 32x32 inputs and usable on other sizes. The input channels are
the data's (1 for grey images).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import InputError
from . import MODEL_NAMES


class MLP(nn.Module):
    """Flatten → Linear(D, 256) → ReLU → Linear(256, 256) → ReLU → Linear(256, K)."""

    def __init__(self, in_features: int, num_classes: int, hidden: int = 256):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        return self.net(x)


class SmallCNN(nn.Module):
    """conv3x3(32) → conv3x3(64, stride 2) → conv3x3(128, stride 2), each with BN and ReLU, global
    average pool, linear."""

    def __init__(self, in_channels: int, num_classes: int):
        super().__init__()
        layers, c = [], in_channels
        for out, stride in ((32, 1), (64, 2), (128, 2)):
            layers += [nn.Conv2d(c, out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
            c = out
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# ----- ResNet (reference Net/resnet.py) ------------------------------------------------------------

class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, self.expansion * planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(self.expansion * planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion * planes),
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """The reference's CIFAR ResNet: 3x3 stem of 64 planes, four stages (64, 128, 256, 512 planes,
    strides 1, 2, 2, 2) of bottleneck blocks, global average pool, linear."""

    def __init__(self, num_blocks, in_channels: int = 3, num_classes: int = 10):
        super().__init__()
        self.in_planes = 64
        self.conv1 = nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.layer1 = self._make_layer(64, num_blocks[0], 1)
        self.layer2 = self._make_layer(128, num_blocks[1], 2)
        self.layer3 = self._make_layer(256, num_blocks[2], 2)
        self.layer4 = self._make_layer(512, num_blocks[3], 2)
        self.fc = nn.Linear(512 * _Bottleneck.expansion, num_classes)

    def _make_layer(self, planes, n, stride):
        layers = []
        for s in [stride] + [1] * (n - 1):
            layers.append(_Bottleneck(self.in_planes, planes, s))
            self.in_planes = planes * _Bottleneck.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


# ----- He et al. CIFAR ResNet (option A shortcuts) -------------------------------------------------

class _BasicBlockA(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride, self.pad = stride, planes - in_planes

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        short = x
        if self.stride != 1 or self.pad:
            short = x[:, :, :: self.stride, :: self.stride]
            short = F.pad(short, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + short)


class ResNetCifar(nn.Module):
    """He et al. 2016, §4.2: depth 6n + 2, three stages of n basic blocks (16, 32, 64 planes),
    identity shortcuts zero-padded where the size changes (option A)."""

    def __init__(self, depth: int = 110, in_channels: int = 3, num_classes: int = 10):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, c = [], 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            for s in [stride] + [1] * (n - 1):
                layers.append(_BasicBlockA(c, planes, s))
                c = planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x):
        out = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


# ----- Wide ResNet (reference Net/wide_resnet.py) --------------------------------------------------

class _WideBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class WideResNet(nn.Module):
    """WRN-depth-width as the reference: stem of 16, three stages of (depth − 2)/6 basic blocks with
    16·w, 32·w, 64·w planes (post-activation), He-normal conv init."""

    def __init__(self, depth: int = 26, width: int = 10, in_channels: int = 3, num_classes: int = 10):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, c = [], 16
        for planes, stride in ((16 * width, 1), (32 * width, 2), (64 * width, 2)):
            for s in [stride] + [1] * (n - 1):
                layers.append(_WideBlock(c, planes, s))
                c = planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(c, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.data.normal_(0, math.sqrt(2.0 / (m.kernel_size[0] * m.kernel_size[1] * m.out_channels)))

    def forward(self, x):
        out = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


# ----- DenseNet (reference Net/densenet.py) --------------------------------------------------------

class _DenseLayer(nn.Module):
    def __init__(self, in_planes: int, growth: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, 4 * growth, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(4 * growth)
        self.conv2 = nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)

    def forward(self, x):
        out = self.conv1(F.relu(self.bn1(x)))
        out = self.conv2(F.relu(self.bn2(out)))
        return torch.cat([out, x], 1)


class _Transition(nn.Module):
    def __init__(self, in_planes: int, out_planes: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(in_planes)
        self.conv = nn.Conv2d(in_planes, out_planes, 1, bias=False)

    def forward(self, x):
        return F.avg_pool2d(self.conv(F.relu(self.bn(x))), 2)


class DenseNet(nn.Module):
    """DenseNet-BC for CIFAR as the reference: 3x3 stem of 2·growth, four dense blocks joined by
    transitions that halve the channels (floor) and the resolution, BN-ReLU, global pool, linear."""

    def __init__(self, blocks=(6, 12, 24, 16), growth: int = 32, reduction: float = 0.5,
                 in_channels: int = 3, num_classes: int = 10):
        super().__init__()
        c = 2 * growth
        self.conv1 = nn.Conv2d(in_channels, c, 3, padding=1, bias=False)
        stages = []
        for i, n in enumerate(blocks):
            for _ in range(n):
                stages.append(_DenseLayer(c, growth))
                c += growth
            if i < len(blocks) - 1:
                out = int(math.floor(c * reduction))
                stages.append(_Transition(c, out))
                c = out
        self.features = nn.Sequential(*stages)
        self.bn = nn.BatchNorm2d(c)
        self.linear = nn.Linear(c, num_classes)

    def forward(self, x):
        out = F.relu(self.bn(self.features(self.conv1(x))))
        return self.linear(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))




def build_model(name: str, sample_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The network ``name`` (:data:`MODEL_NAMES`) for samples of ``sample_shape`` ((C, H, W) images,
    or (D,) features: the MLP only) and ``num_classes`` outputs."""
    if name not in MODEL_NAMES:
        raise InputError(f"unknown model {name!r}; one of: {', '.join(MODEL_NAMES)}")
    if name == "mlp":
        return MLP(int(math.prod(sample_shape)), num_classes)
    if len(sample_shape) != 3:
        raise InputError(f"the {name} model needs images (C, H, W); the data are feature vectors {tuple(sample_shape)}: use the mlp")
    c = sample_shape[0]
    if name == "cnn":
        return SmallCNN(c, num_classes)
    if name == "resnet50":
        return ResNet((3, 4, 6, 3), c, num_classes)
    if name == "resnet110":
        return ResNet((3, 4, 26, 3), c, num_classes)
    if name == "resnet110-he":
        return ResNetCifar(110, c, num_classes)
    if name == "wrn-26-10":
        return WideResNet(26, 10, c, num_classes)
    return DenseNet((6, 12, 24, 16), 32, 0.5, c, num_classes)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
