"""Transcription of AdaFocal's loss and γ update from 3mcloud/adafocal (Ghosh, Schaaf & Gormley,
NeurIPS 2022), commit 3e1a38d: losses/adafocal.py (AdaFocal: update_bin_stats,
get_gamma_per_sample, forward) and utils/metrics.py (adaECE_error_mukhoti: the validation bins and
their calibration gaps; test_classification_net_adafocal: the confidences). The per-sample loop over
bins with ``.item()`` and the float32 confidences of the validation pass are kept on purpose.

Upstream licence:

MIT License

Copyright (c) 2023 3M

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F


def validation_bins(logits, labels, num_bins=15):
    """adaECE_error_mukhoti's bin dictionary for a validation set: {b: (lower, upper, gap)}.

    Confidences as test_classification_net_adafocal: exp(max log_softmax) in the logits' dtype,
    through Python lists back into a float32 tensor; equal-mass edges by np.interp over the sorted
    confidences; bin = conf > lower and conf ≤ upper compared in float32; gap = mean confidence −
    accuracy, both 0 for an empty bin."""
    log_conf, pred = torch.max(F.log_softmax(logits, dim=1), dim=1)
    conf_list = log_conf.exp().cpu().numpy().tolist()
    confidences = torch.FloatTensor(conf_list)
    accuracies = torch.FloatTensor(pred.cpu().numpy().tolist()).eq(torch.FloatTensor(labels.cpu().numpy().tolist()))
    n = len(conf_list)
    x = confidences.cpu().detach()
    edges_in = np.interp(np.linspace(0, n, num_bins + 1), np.arange(n), np.sort(x))
    _, boundaries = np.histogram(x, edges_in)
    out = {}
    for b, (lower, upper) in enumerate(zip(boundaries[:-1], boundaries[1:])):
        in_bin = confidences.gt(lower.item()) * confidences.le(upper.item())
        prop = in_bin.float().mean()
        if prop.item() > 0:
            acc = accuracies[in_bin].float().mean().item()
            avg = confidences[in_bin].mean().item()
        else:
            acc = avg = 0.0
        out[b] = {"lower_bound": lower, "upper_bound": upper, "calibration_gap": avg - acc}
    return out


class ReferenceAdaFocal:
    """AdaFocal's state (bin_stats) with its update and its loss, as the reference computes them."""

    def __init__(self, num_bins=15, lamda=1.0, gamma_initial=1.0, switch_pt=0.2, gamma_max=20.0, gamma_min=-2.0):
        self.num_bins, self.lamda, self.switch_pt = num_bins, lamda, switch_pt
        self.gamma_max, self.gamma_min = gamma_max, gamma_min
        self.bin_stats = {
            b: {"lower_boundary": b * (1 / num_bins), "upper_boundary": (b + 1) * (1 / num_bins), "gamma": gamma_initial}
            for b in range(num_bins)
        }

    def update_bin_stats(self, val_bins):
        for b in range(self.num_bins):
            prev = self.bin_stats[b]["gamma"]
            gap = val_bins[b]["calibration_gap"]
            nxt = prev * math.exp(self.lamda * gap) if prev > 0 else prev * math.exp(-self.lamda * gap)
            if abs(nxt) < self.switch_pt:
                nxt = -self.switch_pt if nxt > 0 else self.switch_pt
            self.bin_stats[b]["gamma"] = max(min(nxt, self.gamma_max), self.gamma_min)
            self.bin_stats[b]["lower_boundary"] = val_bins[b]["lower_bound"]
            self.bin_stats[b]["upper_boundary"] = val_bins[b]["upper_bound"]

    def gamma_per_sample(self, pt):
        """The first bin (in order) that holds pt[i].item(): bin 0 for pt < its upper boundary, the
        last for pt ≥ its lower boundary, else lower ≤ pt < upper; γ list → torch.tensor (float32)."""
        out = []
        last = self.num_bins - 1
        for i in range(pt.shape[0]):
            value = pt[i].item()
            for b, stats in self.bin_stats.items():
                if b == 0 and value < stats["upper_boundary"]:
                    break
                if b == last and value >= stats["lower_boundary"]:
                    break
                if stats["lower_boundary"] <= value < stats["upper_boundary"]:
                    break
            out.append(stats["gamma"])
        return torch.tensor(out).to(pt.device)

    def loss(self, logits, target):
        logpt = F.log_softmax(logits, dim=1).gather(1, target.view(-1, 1)).view(-1)
        pt = logpt.exp()
        gamma = self.gamma_per_sample(pt)
        pt = torch.sign(gamma) * pt
        return (-1 * ((1 - pt + 1e-20) ** torch.abs(gamma)) * logpt).sum()
