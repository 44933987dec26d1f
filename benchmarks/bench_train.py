#!/usr/bin/env python
"""Step and epoch time of calib train's training step, next to the reference code's recipe.

Times the step of ``calibrate_cli.training.loop`` (batch indexed from a device-held dataset, GPU-side
random crop + flip, forward, the loss, backward, gradient-norm clipping at 2, SGD step; no host
synchronisation) for a model and a loss on synthetic CIFAR-shaped data, and, with ``--reference``,
the reference code's step (torrvision/focal_calibration ``train_utils.train_single_epoch`` with its
``FocalLossAdaptive``: γ chosen per sample in a Python loop with one ``.item()`` per sample, batches
copied from the host, augmentation on the host left out, which favours the reference).

    python benchmarks/bench_train.py --model resnet50 --loss flsd53 --device cuda --amp
    python benchmarks/bench_train.py --model resnet50 --loss flsd53 --device cuda --reference
    python benchmarks/bench_train.py --model cnn --loss ce --device cpu --steps 20

Prints one JSON line per measured variant: ms per step (median of ``--repeats`` timings of
``--steps`` steps after ``--warmup`` steps), and the epoch time for 45,000 images (the paper's
training split) at that rate. Needs torch and calibrate_cli.training.losses.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from calibrate_cli.training.augment import random_crop_flip
from calibrate_cli.training.models import build_model

EPOCH_IMAGES = 45_000


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reference_flsd53(logits, target, device):
    """The reference's FocalLossAdaptive(gamma=3) forward, verbatim in effect (summed)."""
    logpt = F.log_softmax(logits, dim=1).gather(1, target.view(-1, 1)).view(-1)
    pt = logpt.exp()
    gammas = []
    for i in range(pt.shape[0]):
        p = pt[i].item()  # one device sync per sample
        gammas.append(3.0 if p >= 0.5 else (5.0 if p < 0.2 else 3.0))
    gamma = torch.tensor(gammas).to(device)
    return (-1 * (1 - pt) ** gamma * logpt).sum()


def time_steps(step, device, steps, warmup, repeats):
    for _ in range(warmup):
        step()
    _sync(device)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        times.append((time.perf_counter() - t) / steps)
    return statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--loss", default="flsd53")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--amp", action="store_true", help="bfloat16 autocast (CUDA)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--reference", action="store_true", help="also time the reference code's step (flsd53 only)")
    args = ap.parse_args(argv)

    from calibrate_cli.training.losses import make_loss

    dev = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()) else "cpu")
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    n, k = 4096, 10
    x = torch.randn(n, 3, 32, 32, device=dev)
    y = torch.randint(0, k, (n,), device=dev)
    memory = torch.channels_last if cuda else torch.contiguous_format
    x = x.contiguous(memory_format=memory)
    gen = torch.Generator(device=dev).manual_seed(0)

    def variant(name, reference):
        model = build_model(args.model, (3, 32, 32), k).to(dev, memory_format=memory)
        run = torch.compile(model) if args.compile and not reference else model
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
        loss_fn = make_loss(args.loss, k).to(dev)
        total = torch.zeros((), dtype=torch.float64, device=dev)
        host_x, host_y = x.cpu(), y.cpu()
        state = {"i": 0}

        def step():
            i = state["i"] = (state["i"] + 1) % (n // args.batch_size)
            sl = slice(i * args.batch_size, (i + 1) * args.batch_size)
            if reference:  # host batch copied in, per-sample γ loop, .item() of the loss
                xb, yb = host_x[sl].to(dev), host_y[sl].to(dev)
                loss = reference_flsd53(model(xb), yb, dev)
            else:
                idx = torch.randint(0, n, (args.batch_size,), device=dev, generator=gen)
                xb = random_crop_flip(x[idx], gen)
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.amp and cuda):
                    logits = run(xb)
                loss = loss_fn(logits.float(), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 2)
            opt.step()
            if reference:
                loss.item()
            else:
                total.add_(loss.detach())

        sec = time_steps(step, dev, args.steps, args.warmup, args.repeats)
        print(json.dumps({
            "variant": name, "model": args.model, "loss": args.loss if not reference else "flsd53 (reference)",
            "device": torch.cuda.get_device_name(dev) if cuda else "cpu", "batch": args.batch_size,
            "amp": args.amp and not reference, "compile": args.compile and not reference,
            "ms_per_step": round(sec * 1e3, 3), "epoch_s_45k": round(sec * EPOCH_IMAGES / args.batch_size, 2),
        }), flush=True)

    variant("calib", False)
    if args.reference:
        variant("reference", True)


if __name__ == "__main__":
    main()
