"""The one pass: validated predictions → per-sample quantities and per-bin sums.

:mod:`.rows` defines the row pass once (softmax and its normaliser, confidence and prediction, NLL,
Brier, top-5, the classwise per-bin sums, the temperature grid and NLL passes) for numpy and torch;
:mod:`.binning` the one equal-width bin rule. :mod:`.summary` runs the pass over chunks for what a
request asks, through :mod:`.kernels` (numpy, or the optional C extension running the same definition
faster) or torch (:mod:`.torch_pass`, :mod:`.device_eval` for tensors on a device).
Order statistics: :mod:`.sorting`; data that is not one array: :mod:`.stream`, :mod:`.shards`,
:mod:`.parallel`. Nothing here reads files or prints.
"""
