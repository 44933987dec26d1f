"""Training with the calibration losses (``calib train``; docs/training.md).

A room of its own, and the only part of calib besides ``.pt`` input that needs torch (the ``[train]``
extra): ``data`` (datasets that are never downloaded, held as arrays), ``models`` (the paper's CIFAR
networks and small ones for CPUs, plain torch), ``augment`` (random crop and flip on device tensors)
and ``loop`` (the training loop, its run folder, checkpoints and resume). The losses themselves live
in :mod:`calibrate_cli.training.losses`. Nothing here is imported by ``calib eval`` or the evaluation core; the
loop uses the core (:func:`calibrate_cli.evaluate`, :func:`calibrate_cli.fit_temperature`) for its
metrics.
"""

#: the networks of :func:`calibrate_cli.training.models.build_model` (here: readable without torch)
MODEL_NAMES = ("mlp", "cnn", "resnet50", "resnet110", "resnet110-he", "wrn-26-10", "densenet121")
#: the training recipes of :mod:`calibrate_cli.training.loop`
RECIPES = ("paper", "fast")
