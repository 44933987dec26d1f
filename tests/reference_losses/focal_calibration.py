"""Transcription of the loss functions of torrvision/focal_calibration (Mukhoti et al., NeurIPS 2020),
commit 475422a: Losses/focal_loss.py, Losses/focal_loss_adaptive_gamma.py, Losses/mmce.py
(MMCE_weighted), Losses/brier_score.py, Losses/loss.py, and the scaling of train_utils.py
(``len(data) * loss`` for mmce). The per-sample Python loop with ``.item()`` of the adaptive-γ loss,
its ``sorted(gamma_dic)`` walk and the top-k selection of MMCE_weighted are kept on purpose: they
are what the tests compare against.

Upstream licence:

MIT License

Copyright (c) 2020 Torr Vision Group

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

import numpy as np
import torch
import torch.nn.functional as F
from scipy.special import lambertw


def _log_pt(logits, target):
    """log p of the true class, (N,): log_softmax over classes, gathered at the target."""
    return F.log_softmax(logits, dim=1).gather(1, target.view(-1, 1)).view(-1)


def focal_loss(logits, target, gamma):
    """FocalLoss(gamma, size_average=False): Σ −(1 − p)^γ log p with a Python-float γ."""
    logpt = _log_pt(logits, target)
    pt = logpt.exp()
    return (-1 * (1 - pt) ** gamma * logpt).sum()


#: the adaptive loss's table {threshold: γ}: below 0.2 → 5, below 0.5 → 3
GAMMA_DIC = {0.2: 5.0, 0.5: 3.0}


def adaptive_gamma_list(pt, gamma):
    """FocalLossAdaptive.get_gamma_list: one γ per sample from ``pt[i].item()`` (a float32 value
    promoted to a Python float): ``gamma`` (the --gamma option) from 0.5 on, else the γ of the first
    key of ``sorted(GAMMA_DIC)`` with pt < key; built with torch.tensor (float32)."""
    out = []
    for i in range(pt.shape[0]):
        value = pt[i].item()
        if value >= 0.5:
            out.append(gamma)
            continue
        for key in sorted(GAMMA_DIC):
            if value < key:
                out.append(GAMMA_DIC[key])
                break
    return torch.tensor(out).to(pt.device)


def focal_loss_adaptive(logits, target, gamma):
    """FocalLossAdaptive(gamma, size_average=False): the focal loss with per-sample γ. FLSD-53 is
    ``gamma=3``, FLSD-532 ``gamma=2``."""
    logpt = _log_pt(logits, target)
    pt = logpt.exp()
    g = adaptive_gamma_list(pt, gamma)
    return (-1 * (1 - pt) ** g * logpt).sum()


def get_gamma(p=0.2):
    """focal_loss_adaptive_gamma.get_gamma: γ with g(p, γ) = 1 through Lambert W₋₁ (with its 1e-12)."""
    y = ((1 - p) ** (1 - (1 - p) / (p * np.log(p))) / (p * np.log(p))) * np.log(1 - p)
    g = (1 - p) / (p * np.log(p)) + lambertw(-y + 1e-12, k=-1) / np.log(1 - p)
    return np.real(g)


def cross_entropy(logits, target):
    """Losses/loss.py cross_entropy: F.cross_entropy(reduction='sum')."""
    return F.cross_entropy(logits, target, reduction="sum")


def brier_score(logits, target):
    """BrierScore: Σ (one-hot − softmax)² / N, the one-hot a float32 tensor filled by scatter."""
    one_hot = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device)
    one_hot.scatter_(1, target.view(-1, 1), 1)
    diff = (one_hot - F.softmax(logits, dim=1)) ** 2
    return torch.sum(diff) / float(logits.shape[0])


def _kernel(pairs):
    """MMCE's Laplacian kernel of a (a, b, 2) stack of pairs: exp(−|x − y| / 0.4)."""
    return torch.exp(-1.0 * torch.abs(pairs[:, :, 0] - pairs[:, :, 1]) / 0.4)


def _pairs(a, b):
    """(len(a), len(b), 2): element [i, j] = (a[i], b[j]) (the reference's tiling + permute)."""
    first = a.unsqueeze(1).repeat(1, b.shape[0]).unsqueeze(2)
    second = b.unsqueeze(1).repeat(1, a.shape[0]).unsqueeze(2).permute(1, 0, 2)
    return torch.cat([first, second], dim=2)


def mmce_weighted(logits, target):
    """MMCE_weighted.forward: the correct and the incorrect samples' confidences picked by top-k of
    the masked confidences, each kernel block's *mean* of kernel × weights divided again by
    (count² + 1e-5) (resp. m·n + 1e-5), sqrt(· + 1e-10), 0 unless both groups are non-empty."""
    device = logits.device
    probs = F.softmax(logits, dim=1)
    conf, pred = torch.max(probs, 1)
    correct = torch.where(torch.eq(pred, target), torch.ones(pred.shape).to(device), torch.zeros(pred.shape).to(device))
    k = torch.sum(correct).type(torch.int64)
    k_p = torch.sum(1.0 - correct).type(torch.int64)
    cond_k = torch.where(torch.eq(k, 0), torch.tensor(0).to(device), torch.tensor(1).to(device))
    cond_k_p = torch.where(torch.eq(k_p, 0), torch.tensor(0).to(device), torch.tensor(1).to(device))
    both = cond_k * cond_k_p
    k = torch.max(k, torch.tensor(1).to(device)) * both + (1 - both) * 2
    k_p = torch.max(k_p, torch.tensor(1).to(device)) * both + (1 - both) * (correct.shape[0] - 2)
    correct_prob, _ = torch.topk(conf * correct, int(k))
    incorrect_prob, _ = torch.topk(conf * (1 - correct), int(k_p))

    cc = torch.mean(_kernel(_pairs(correct_prob, correct_prob))
                    * torch.mm((1.0 - correct_prob).unsqueeze(1), (1.0 - correct_prob).unsqueeze(0)))
    ii = torch.mean(_kernel(_pairs(incorrect_prob, incorrect_prob))
                    * torch.mm(incorrect_prob.unsqueeze(1), incorrect_prob.unsqueeze(0)))
    ci = torch.mean(_kernel(_pairs(correct_prob, incorrect_prob))
                    * torch.mm((1.0 - correct_prob).unsqueeze(1), incorrect_prob.unsqueeze(0)))
    m = torch.sum(correct)
    n = torch.sum(1.0 - correct)
    mmd = 1.0 / (m * m + 1e-5) * torch.sum(cc)
    mmd += 1.0 / (n * n + 1e-5) * torch.sum(ii)
    mmd -= 2.0 / (m * n + 1e-5) * torch.sum(ci)
    gate = both.type(torch.FloatTensor).to(device).detach()
    return torch.max(gate * torch.sqrt(mmd + 1e-10), torch.tensor(0.0).to(device))


def mmce_training_objective(logits, target, lamda):
    """Losses/loss.py mmce_weighted (mean CE + λ·MMCE_w) as train_utils uses it: × len(data)."""
    return len(logits) * (F.cross_entropy(logits, target) + lamda * mmce_weighted(logits, target))


def scheduled_gamma(epoch, gamma, gamma2, gamma3, step1=100, step2=250):
    """train.py's --gamma-schedule 1: γ for a (0-based) epoch."""
    if epoch < step1:
        return gamma
    if step1 <= epoch < step2:
        return gamma2
    return gamma3
