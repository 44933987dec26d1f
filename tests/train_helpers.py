"""Helpers of the training tests: the losses' factory, a counting stand-in loss, the DDP worker."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class StandInCE(nn.Module):
    """Cross-entropy summed over the batch (the reference's ``cross_entropy``) that counts its
    end_epoch calls in a buffer (``needs_validation``): the loop must call it once per epoch and
    keep the count in the checkpoint."""

    needs_validation = True

    def __init__(self, name, num_classes, **params):
        super().__init__()
        self.name, self.num_classes = name, num_classes
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def start_epoch(self, epoch, total_epochs):
        pass

    def end_epoch(self, val_logits, val_labels):
        self.calls += 1

    def forward(self, logits, labels):
        return F.cross_entropy(logits, labels, reduction="sum")


def loss_factory(name, num_classes, **params):
    """:func:`calibrate_cli.training.losses.make_loss` (importable by the DDP workers)."""
    from calibrate_cli.training.losses import make_loss

    return make_loss(name, num_classes, **params)


def ddp_worker(rank, world, port, run_dir, out_dir, config_kwargs):
    """One process of a torchrun-like group (gloo, CPU): train, then save this rank's final weights
    and validation logits to ``out_dir/rank{rank}.npz``."""
    import os

    import numpy as np

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    from calibrate_cli.training.loop import TrainConfig, train

    result = train(TrainConfig(**config_kwargs), run_dir, loss_factory=loss_factory)
    weights = torch.cat([p.detach().flatten() for p in result.model.parameters()]).numpy()
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"), weights=weights, val_logits=result.val_logits,
             history=np.array([[h.train_loss, h.val_error] for h in result.history]))
