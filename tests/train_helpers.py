"""Helpers of the training tests: a stand-in loss used only where calibrate_cli.losses is absent
(the losses are built on another branch), so the loop's tests run either way."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class StandInCE(nn.Module):
    """Cross-entropy summed over the batch (the reference's ``cross_entropy``), with the epoch hooks
    of ``CalibrationLoss`` as no-ops; ``needs_validation`` counts end_epoch calls in a buffer."""

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
    """``make_loss`` of calibrate_cli.losses when it exists, else the stand-in (ce only)."""
    try:
        from calibrate_cli.losses import make_loss
    except ImportError:
        return StandInCE(name, num_classes, **params)
    return make_loss(name, num_classes, **params)
