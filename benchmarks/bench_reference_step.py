#!/usr/bin/env python
"""The reference code's own training step, timed: torrvision/focal_calibration's ``train_single_epoch``
with its ``resnet50`` and its losses (``cross_entropy``; ``focal_loss_adaptive`` at γ = 3, FLSD-53),
imported from a copy of that repository (nothing of it is vendored here).

    git clone https://github.com/torrvision/focal_calibration /tmp/focal_calibration
    python benchmarks/bench_reference_step.py --reference-dir /tmp/focal_calibration --device cuda

Its recipe as in its train.py: SGD (lr 0.1, momentum 0.9, weight decay 5e-4), batch 128, float32, the
batches from a ``DataLoader`` of host tensors (here synthetic CIFAR-shaped data with no augmentation
and no worker processes, which favours the reference). One epoch of ``--steps`` batches is timed
after a warm-up epoch; prints one JSON line per loss, as benchmarks/bench_train.py does.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time

import torch

EPOCH_IMAGES = 45_000


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference-dir", required=True, help="a checkout of torrvision/focal_calibration")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--losses", default="cross_entropy,focal_loss_adaptive")
    args = ap.parse_args(argv)
    sys.path.insert(0, args.reference_dir)
    if not hasattr(torch.nn.utils, "clip_grad_norm"):  # removed from recent torch: the same function
        torch.nn.utils.clip_grad_norm = torch.nn.utils.clip_grad_norm_
    from Net.resnet import resnet50  # noqa: E402  (the reference's CIFAR ResNet-50)
    from train_utils import train_single_epoch  # noqa: E402

    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as its train.py
    torch.manual_seed(0)
    n = args.batch_size * max(args.steps, args.warmup)
    x = torch.randn(n, 3, 32, 32)
    y = torch.randint(0, 10, (n,))

    def loader(steps):
        data = torch.utils.data.TensorDataset(x[: steps * args.batch_size], y[: steps * args.batch_size])
        return torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True)

    for loss in args.losses.split(","):
        model = resnet50(num_classes=10).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
        gamma = 3.0 if loss == "focal_loss_adaptive" else 1.0

        def epoch(steps):
            with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
                train_single_epoch(0, model, loader(steps), opt, dev, loss_function=loss, gamma=gamma)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)

        epoch(args.warmup)
        start = time.perf_counter()
        epoch(args.steps)
        sec = (time.perf_counter() - start) / args.steps
        print(json.dumps({
            "variant": "reference code", "model": "resnet50 (Net/resnet.py)", "loss": loss,
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "batch": args.batch_size,
            "ms_per_step": round(sec * 1e3, 3), "epoch_s_45k": round(sec * EPOCH_IMAGES / args.batch_size, 2),
        }), flush=True)


if __name__ == "__main__":
    main()
