"""The training loop of ``calib train``: recipes, the run folder, checkpoints, resume, DDP.

A run trains ``config.model`` on ``config.data`` with the loss ``config.loss``
(:func:`calibrate_cli.training.losses.make_loss`) and keeps everything in one folder, RUN_DIR:

=====================  ===================================================================================
``config.json``        the run's settings (a resumed run must have the same)
``checkpoint.pt``      after every epoch, written atomically: model, optimiser, scheduler, loss state
                       (AdaFocal's γ per bin), RNG states, the finished epochs and the history; read with
                       ``torch.load(weights_only=True)``
``history.csv``        per epoch: train loss (the batch objective summed over the epoch / samples, as the
                       reference prints it), validation error, ECE, NLL (a :class:`~calibrate_cli.Meter`
                       fed the validation batches on the device: :func:`validate`), the learning rate
                       the epoch started with, seconds
``val_logits.npy`` …   ``val_logits``/``val_labels``/``test_logits``/``test_labels`` of the final model
                       (float32 logits, int64 labels): ``calib eval``, ``calib temperature`` read them
``summary.json``       final metrics on both sets before and after temperature scaling (the paper's grid,
                       T fitted on the validation set by ECE), from the evaluation core
=====================  ===================================================================================

Recipes (docs/training.md, "Recipes"): ``paper`` is the reference code's: SGD (momentum 0.9, weight decay 5e-4), lr 0.1,
×0.1 at epochs 150 and 250 of 350 (scaled to the run's length), batch 128, random crop (pad 4) and
horizontal flip, the summed batch loss, gradient-norm clipping at 2. ``fast`` is for small CPU runs:
AdamW (lr 3e-3, weight decay 5e-4) with a one-cycle schedule (:func:`one_cycle`), batch 64, the same losses.

Speed: the whole dataset is held on the device; each step indexes a batch, augments it there
(:mod:`.augment`), and adds the loss to an on-device total, read once per epoch: no host
synchronisation inside the step. On CUDA the image models run channels-last, ``amp`` runs the forward
in bfloat16 autocast (the loss in float32), ``compile`` wraps the model with ``torch.compile``.

Distributed: under ``torchrun`` (``WORLD_SIZE`` > 1) every process holds the data, takes the same
seeded permutation of the training set each epoch and its own share (``DistributedSampler``'s
rule: padded to a multiple of the processes, every ``world``-th index), runs batches of
``batch_size`` and averages gradients through ``DistributedDataParallel`` (NCCL on CUDA, gloo on
CPU). Validation and test are evaluated whole on every process (the loss's state stays identical);
process 0 writes the run folder.

Resume: ``resume=True`` reloads ``checkpoint.pt`` and continues with the next epoch; a run killed
mid-epoch loses that epoch only. Batch order and augmentation are drawn from generators seeded by
(seed, epoch, process), so a resumed run takes the same batches as one that never stopped.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn as nn

from .._version import __version__
from ..errors import InputError, OutputError
from ..data.outputs import atomic_write, write_array, write_text
from ..metrics.registry import TRAIN_HISTORY
from ..engine.parallel import THREADS_ENV, cpu_threads
from . import RECIPES
from .augment import random_crop_flip
from .data import Dataset, load_dataset
from .models import build_model, count_parameters

#: recipe → (epochs, batch size, learning rate)
RECIPE_DEFAULTS = {"paper": (350, 128, 0.1), "fast": (30, 64, 3e-3)}
PAPER_EPOCHS = 350
PAPER_MILESTONES = (150, 250)
GRAD_CLIP = 2.0
WEIGHT_DECAY = 5e-4
EVAL_BATCH = 1024
#: every file a run writes (``force`` removes these, and only these, before a new run)
RUN_FILES = ("config.json", "checkpoint.pt", "history.csv", "val_logits.npy", "val_labels.npy",
             "test_logits.npy", "test_labels.npy", "summary.json")
HISTORY_COLUMNS = ("epoch", "train_loss", *(f"val_{m}" for m in TRAIN_HISTORY), "lr", "seconds")
CHECKPOINT_FORMAT = "calib-train-checkpoint-1"
#: the largest learning rate: the optimiser multiplies float32 (or bfloat16) parameters by it
MAX_LR = float(np.finfo(np.float32).max)
#: seeds are 0 … 2**64 − 1 (torch.manual_seed's range; numpy's generators take no negative seed)
MAX_SEED = 2**64 - 1

#: settings that must match when a run is resumed (device, amp and compile may change)
RUN_IDENTITY = ("loss", "loss_params", "data", "model", "epochs", "batch_size", "lr", "recipe", "seed", "val_size", "augment")


@dataclass(frozen=True)
class TrainConfig:
    """The settings of a run. ``None`` for ``epochs``/``batch_size``/``lr`` takes the recipe's
    (:data:`RECIPE_DEFAULTS`); ``model="auto"`` the MLP for feature vectors and images of at most
    16x16 pixels, else the small CNN; ``augment="auto"`` crop and flip for images of at least
    32x32 pixels (not for digits: a flipped digit is another digit)."""

    loss: str
    data: str
    loss_params: dict = field(default_factory=dict)
    model: str = "auto"
    recipe: str = "paper"
    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    seed: int = 0
    val_size: float = 0.1
    augment: str = "auto"
    device: str = "auto"
    amp: bool = False
    compile: bool = False
    n_bins: int = 15

    def resolved(self, dataset: Dataset | None = None) -> "TrainConfig":
        """The config with the recipe's defaults (and, given the data, the model and augmentation) filled in."""
        if self.recipe not in RECIPES:
            raise InputError(f"unknown recipe {self.recipe!r}; one of: {', '.join(RECIPES)}")
        epochs, batch, lr = RECIPE_DEFAULTS[self.recipe]
        changes = {
            "epochs": self.epochs if self.epochs is not None else epochs,
            "batch_size": self.batch_size if self.batch_size is not None else batch,
            "lr": self.lr if self.lr is not None else lr,
            "loss_params": {k: v for k, v in sorted(self.loss_params.items()) if v is not None},
        }
        if changes["epochs"] < 1:
            raise InputError(f"the number of epochs must be at least 1 (got {changes['epochs']})")
        if changes["batch_size"] < 1:
            raise InputError(f"the batch size must be at least 1 (got {changes['batch_size']})")
        if not (changes["lr"] > 0 and math.isfinite(changes["lr"])):
            raise InputError(f"the learning rate must be a positive number (got {changes['lr']:g})")
        if changes["lr"] > MAX_LR:
            raise InputError(
                f"the learning rate must be at most {MAX_LR:.4g}, the largest float32 (the parameters' type; "
                f"got {changes['lr']:g})"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or not 0 <= self.seed <= MAX_SEED:
            raise InputError(f"the seed must be a whole number from 0 to 2**64 − 1 (torch's range; got {self.seed!r})")
        if self.augment not in ("auto", "on", "off"):
            raise InputError(f"augment must be auto, on or off (got {self.augment!r})")
        if dataset is not None:
            small = not dataset.is_image or max(dataset.sample_shape[1:]) <= 16
            if self.model == "auto":
                changes["model"] = "mlp" if small else "cnn"
            if self.augment == "auto":
                changes["augment"] = "on" if dataset.is_image and min(dataset.sample_shape[1:]) >= 32 else "off"
            elif self.augment == "on" and not dataset.is_image:
                raise InputError(f"{dataset.name}: crop and flip need images; the data are feature vectors")
        return TrainConfig(**{**asdict(self), **changes})

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class EpochRecord:
    epoch: int
    train_loss: float
    val_error: float
    val_ece: float
    val_nll: float
    lr: float
    seconds: float


@dataclass
class TrainResult:
    """What :func:`train` returns: the run folder, its summary (as in summary.json), the history,
    the trained model (the module itself, not a DDP wrapper) and the epoch a resumed run started at."""

    run_dir: Path
    summary: dict
    history: list[EpochRecord]
    model: nn.Module
    started_at_epoch: int
    val_logits: np.ndarray
    test_logits: np.ndarray


@dataclass(frozen=True)
class _Dist:
    world: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def _dist_from_env() -> _Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist()
    return _Dist(world, int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")))


def pick_device(name: str, dist: _Dist | None = None) -> torch.device:
    """``"auto"``: CUDA when available, else the CPU; ``"cuda"`` without a GPU is an error. Under
    torchrun each process takes the GPU of its local rank."""
    dist = dist or _Dist()
    if name not in ("auto", "cpu", "cuda"):
        raise InputError(f"unknown device {name!r}; one of: auto, cpu, cuda")
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise InputError("no CUDA GPU is available to this torch build; use the cpu")
    return torch.device("cuda", dist.local_rank % torch.cuda.device_count())


def milestones(epochs: int) -> list[int]:
    """The paper's lr steps (epochs 150 and 250 of 350) scaled to ``epochs``: round(150·E/350),
    round(250·E/350); 350 → [150, 250], 5 → [2, 4]."""
    return [int(round(m * epochs / PAPER_EPOCHS)) for m in PAPER_MILESTONES]


def shard_indices(perm: torch.Tensor, world: int, rank: int) -> torch.Tensor:
    """``DistributedSampler``'s share of one process: ``perm`` padded with its own first entries to a
    multiple of ``world``, then every ``world``-th index from ``rank``. World 1: ``perm`` itself."""
    if world == 1:
        return perm
    total = int(math.ceil(len(perm) / world)) * world
    if total > len(perm):
        perm = torch.cat([perm, perm[: total - len(perm)]])
    return perm[rank:total:world]


def _epoch_generator(seed: int, epoch: int, stream: int, device: torch.device) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed((int(seed) * 1_000_003 + epoch * 7919 + stream) % (2**63))
    return g


# ----- the run folder --------------------------------------------------------------------------------

def prepare_run_dir(run_dir: str | os.PathLike, *, resume: bool, force: bool) -> Path:
    """Check (and create) the run folder: a folder holding files is refused unless the run is resumed
    (then it must hold a checkpoint) or ``force`` (then calib's own files in it are removed)."""
    path = Path(run_dir)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{path}: exists and is not a folder")
    if resume:
        if not (path / "checkpoint.pt").is_file():
            raise InputError(f"{path}: no checkpoint.pt to resume from")
        return path
    if path.is_dir() and any(path.iterdir()):
        if not force:
            raise OutputError(f"{path}: the folder is not empty (an earlier run?)", remedy="resume-or-force")
        for name in RUN_FILES:
            (path / name).unlink(missing_ok=True)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{path}: cannot create the folder ({exc.strerror or exc})") from None
    return path


def _save_checkpoint(path: Path, state: dict) -> None:
    def write(f):
        buffer = io.BytesIO()
        torch.save(state, buffer)
        f.write(buffer.getbuffer())

    atomic_write(path, write, force=True)


def load_checkpoint(path: str | os.PathLike, device: torch.device | str = "cpu") -> dict:
    """The checkpoint at ``path``, read with ``weights_only=True`` (tensors and plain containers only:
    nothing is unpickled); a damaged or foreign file is one InputError naming it."""
    try:
        state = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, ... on bad files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: not a readable calib checkpoint ({first[:200]})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise InputError(f"{path}: not a calib training checkpoint")
    return state


def _history_csv(history: list[EpochRecord]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HISTORY_COLUMNS)
    for r in history:
        writer.writerow([r.epoch] + [repr(float(getattr(r, c))) for c in HISTORY_COLUMNS[1:]])
    return out.getvalue()


# ----- the loop ----------------------------------------------------------------------------------------

def _optimizer(config: TrainConfig, model: nn.Module, steps_per_epoch: int):
    if config.recipe == "paper":
        opt = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=0.9, weight_decay=WEIGHT_DECAY)
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones(config.epochs), gamma=0.1)
        return opt, sched, False, GRAD_CLIP
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=WEIGHT_DECAY)
    total = config.epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: one_cycle(step, total))
    return opt, sched, True, None


def one_cycle(step: int, total: int, warmup: float = 0.25, start: float = 0.04) -> float:
    """The fast recipe's learning-rate factor at optimiser step ``step`` of ``total``: linear from
    ``start`` to 1 over the first ``warmup`` share of the steps (at least one), then half a cosine
    down to 0 at the last step. Defined for any ``total`` ≥ 1 (torch's OneCycleLR divides by zero
    on runs of a few steps)."""
    w = max(1, int(warmup * total))
    if step < w:
        return start + (1 - start) * step / w
    return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - w) / max(1, total - w))))


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, *, amp: bool = False, batch: int = EVAL_BATCH) -> torch.Tensor:
    """Logits of ``x`` in eval mode, float32, batch by batch (on the device; one tensor)."""
    was = model.training
    model.eval()
    outs = []
    for start in range(0, len(x), batch):
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
            outs.append(model(x[start:start + batch]).float())
    model.train(was)
    return torch.cat(outs) if outs else torch.empty(0)


@torch.no_grad()
def validate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, n_bins: int, amp: bool = False,
             keep_logits: bool = False, batch: int = EVAL_BATCH) -> tuple[dict, torch.Tensor | None]:
    """The epoch's validation metrics (:data:`~calibrate_cli.metrics.registry.TRAIN_HISTORY`: error,
    ECE, NLL), from a :class:`~calibrate_cli.metrics.meter.Meter` fed batch by batch on the device with
    the logits of :func:`predict` (only its sums come to the host; no (N, K) array is kept), and, with
    ``keep_logits``, those logits as one tensor (a loss that reads them: AdaFocal). NaN or infinite
    logits (a diverged training): every metric NaN."""
    from ..metrics.meter import Meter

    was = model.training
    model.eval()
    meter = Meter(n_bins, input_kind="logits", metrics=TRAIN_HISTORY)
    finite, outs = True, []
    for start in range(0, len(x), batch):
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(x[start:start + batch]).float()
        if keep_logits:
            outs.append(logits)
        finite = finite and bool(torch.isfinite(logits).all())
        if finite:
            meter.update(logits, y[start:start + batch])
    model.train(was)
    metrics = meter.compute().metrics if finite else {name: float("nan") for name in TRAIN_HISTORY}
    return {name: metrics[name] for name in TRAIN_HISTORY}, (torch.cat(outs) if outs else None)


def _summary(config: TrainConfig, dataset: Dataset, val_logits, test_logits, history, n_params, started) -> dict:
    """summary.json: the metrics of both sets before/after the paper's temperature (grid by ECE on val)."""
    from ..evaluate import evaluate
    from ..calibrators.temperature_fit import fit_temperature

    out = {
        "calib_version": __version__,
        "command": "train",
        "config": config.to_dict(),
        "classes": list(dataset.classes),
        "n_train": int(len(dataset.y_train)),
        "n_val": int(len(dataset.y_val)),
        "n_test": int(len(dataset.y_test)),
        "parameters": int(n_params),
        "epochs_done": len(history),
        "resumed_at_epoch": started,
    }
    if not (np.isfinite(val_logits).all() and np.isfinite(test_logits).all()):
        out["warnings"] = ["the logits hold NaN or infinite values (the training diverged); no metrics"]
        return out
    fit = fit_temperature(val_logits, dataset.y_val, search="grid", n_bins=config.n_bins)
    out["temperature"] = fit.temperature
    out["calibration"] = fit.to_dict()
    for name, logits, labels in (("val", val_logits, dataset.y_val), ("test", test_logits, dataset.y_test)):
        before = evaluate(logits, labels, n_bins=config.n_bins)
        after = evaluate(fit.transform(logits), labels, n_bins=config.n_bins)
        out[name] = {"before": dict(before.metrics), "after": dict(after.metrics)}
    out["warnings"] = list(fit.warnings)
    return out


def _default_loss_factory(name, num_classes, **params):
    from .losses import make_loss

    return make_loss(name, num_classes, **params)


def train(
    config: TrainConfig,
    run_dir: str | os.PathLike,
    *,
    resume: bool = False,
    force: bool = False,
    progress: Callable[[int, int], None] | None = None,
    on_epoch: Callable[[EpochRecord, int], None] | None = None,
    step_hook: Callable[[int, int], None] | None = None,
    loss_factory: Callable | None = None,
) -> TrainResult:
    """Train as ``config`` says and fill ``run_dir`` (see the module's docstring).

    ``progress(done, total)``: after every step, counting the steps of the whole run. ``on_epoch(record,
    total_epochs)``: after every epoch. ``step_hook(epoch, step)``: called after each optimiser step
    (tests use it to stop a run midway). ``loss_factory``: ``make_loss``'s signature (default:
    :func:`calibrate_cli.training.losses.make_loss`). Under torchrun the process group is set up here (and
    torn down at the end)."""
    dist = _dist_from_env()
    loss_factory = loss_factory or _default_loss_factory
    run_dir = Path(run_dir)
    if not resume:
        config.resolved()  # a bad setting (--seed -1, --lr 1e308) is refused before RUN_DIR is made
    if dist.main:
        run_dir = prepare_run_dir(run_dir, resume=resume, force=force)
    checkpoint = None
    if resume:
        saved = _read_config(run_dir / "config.json")
        config = _resumed_config(saved, config)
    dataset = load_dataset(config.data, val_size=config.val_size, seed=config.seed)
    config = config.resolved(dataset)
    device = pick_device(config.device, dist)
    if config.amp and device.type != "cuda":
        raise InputError("bfloat16 autocast (amp) needs a CUDA device")
    if dist.world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        if resume:
            checkpoint = load_checkpoint(run_dir / "checkpoint.pt", device)
        elif dist.main:
            write_text(run_dir / "config.json", json.dumps(config.to_dict(), indent=2) + "\n", force=True)
        return _run(config, dataset, device, dist, run_dir, checkpoint, progress, on_epoch, step_hook, loss_factory)
    finally:
        if dist.world > 1 and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def _read_config(path: Path) -> dict:
    from ..data.outputs import read_json

    saved = read_json(path, what="a calib run's config.json")
    names = {f.name for f in fields(TrainConfig)}
    if not isinstance(saved, dict) or not {"loss", "data"} <= set(saved) or not set(saved) <= names:
        raise InputError(f"{path}: not a calib run's config.json")
    return saved


def _resumed_config(saved: dict, given: TrainConfig) -> TrainConfig:
    """The saved settings; ``given`` values that differ from the defaults and from the saved run's
    identity are an error (a resumed run must be the same run). Device, amp and compile may change."""
    defaults = TrainConfig(loss=given.loss, data=given.data)
    for name in RUN_IDENTITY:
        value = getattr(given, name)
        if name in ("loss", "data"):
            if value is not None and value != saved.get(name):
                raise InputError(f"the run was started with {name} {saved.get(name)!r}, not {value!r}")
            continue
        if name == "loss_params":
            value = {k: v for k, v in value.items() if v is not None}
            if value and value != {k: v for k, v in saved[name].items() if k in value}:
                raise InputError(f"the run was started with loss parameters {saved[name]}, not {value}")
            continue
        if value != getattr(defaults, name) and value != saved.get(name):
            raise InputError(f"the run was started with {name} {saved.get(name)!r}, not {value!r}")
    keep = {k: v for k, v in saved.items() if k in RUN_IDENTITY or k == "n_bins"}
    return TrainConfig(**{**keep, "device": given.device, "amp": given.amp, "compile": given.compile})


def _run(config, dataset, device, dist, run_dir, checkpoint, progress, on_epoch, step_hook, loss_factory):
    cuda = device.type == "cuda"
    if not cuda and os.environ.get(THREADS_ENV):
        torch.set_num_threads(cpu_threads())  # CALIB_THREADS=1 on a busy machine: no spinning threads
    torch.manual_seed(config.seed)
    model = build_model(config.model, dataset.sample_shape, dataset.num_classes)
    loss_fn = loss_factory(config.loss, dataset.num_classes, **config.loss_params)
    image = dataset.is_image
    memory = torch.channels_last if (cuda and image) else torch.contiguous_format
    model = model.to(device, memory_format=memory)
    loss_fn = loss_fn.to(device)
    if cuda:
        torch.backends.cudnn.benchmark = True

    def put(x):
        t = torch.from_numpy(np.ascontiguousarray(x)).to(device)
        return t.contiguous(memory_format=memory) if t.ndim == 4 else t

    x_train, y_train = put(dataset.x_train), put(dataset.y_train)
    x_val, x_test = put(dataset.x_val), put(dataset.x_test)
    y_val_t = put(dataset.y_val)
    pad_value = torch.from_numpy(dataset.pad_value).to(device)
    n_shard = len(shard_indices(torch.arange(len(y_train)), dist.world, dist.rank))
    steps = int(math.ceil(n_shard / config.batch_size))
    opt, sched, per_step, clip = _optimizer(config, model, steps)

    history: list[EpochRecord] = []
    start = 0
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        opt.load_state_dict(checkpoint["optimizer"])
        sched.load_state_dict(checkpoint["scheduler"])
        loss_fn.load_state_dict(checkpoint["loss"])
        torch.set_rng_state(checkpoint["rng"]["torch"].cpu())
        if cuda and checkpoint["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(checkpoint["rng"]["cuda"].cpu(), device)
        history = [EpochRecord(**r) for r in checkpoint["history"]]
        start = int(checkpoint["epoch"])

    train_model = model
    if dist.world > 1:
        train_model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    if config.compile:
        train_model = torch.compile(train_model)

    total_steps = config.epochs * steps
    augment = config.augment == "on"
    for epoch in range(start, config.epochs):
        began = time.perf_counter()
        loss_fn.start_epoch(epoch, config.epochs)
        lr = opt.param_groups[0]["lr"]  # the learning rate the epoch starts with (history.csv)
        model.train()
        cpu_gen = _epoch_generator(config.seed, epoch, 0, torch.device("cpu"))
        perm = shard_indices(torch.randperm(len(y_train), generator=cpu_gen), dist.world, dist.rank).to(device)
        aug_gen = _epoch_generator(config.seed, epoch, 1 + dist.rank, device)
        total = torch.zeros((), dtype=torch.float64, device=device)
        seen = 0
        for step in range(steps):
            idx = perm[step * config.batch_size:(step + 1) * config.batch_size]
            xb, yb = x_train[idx], y_train[idx]
            if augment:
                xb = random_crop_flip(xb, aug_gen, pad=4, pad_value=pad_value)
            if xb.ndim == 4:
                xb = xb.contiguous(memory_format=memory)  # a no-op when the layout is already right
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.amp):
                logits = train_model(xb)
            loss = loss_fn(logits.float(), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            if per_step:
                sched.step()
            total += loss.detach()
            seen += len(idx)
            if progress is not None:
                progress(epoch * steps + step + 1, total_steps)
            if step_hook is not None:
                step_hook(epoch, step)
        if not per_step:
            sched.step()
        if dist.world > 1:  # BatchNorm's running statistics: each process kept its own; average them
            for buffer in model.buffers():
                if buffer.is_floating_point():
                    torch.distributed.all_reduce(buffer)
                    buffer /= dist.world
        metrics, val_logits_t = validate(model, x_val, y_val_t, n_bins=config.n_bins, amp=config.amp,
                                         keep_logits=loss_fn.needs_validation)
        if loss_fn.needs_validation:
            loss_fn.end_epoch(val_logits_t, y_val_t)
        del val_logits_t
        train_loss = float(total.item()) / max(seen, 1)  # the one read of the step totals per epoch
        record = EpochRecord(epoch + 1, train_loss, *(metrics[m] for m in TRAIN_HISTORY),
                             float(lr), time.perf_counter() - began)
        history.append(record)
        if dist.main:
            state = {
                "format": CHECKPOINT_FORMAT,
                "epoch": epoch + 1,
                "config": config.to_dict(),
                "model": model.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(),
                "loss": loss_fn.state_dict(),
                "rng": {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state(device) if cuda else None},
                "history": [asdict(r) for r in history],
            }
            _save_checkpoint(run_dir / "checkpoint.pt", state)
            write_text(run_dir / "history.csv", _history_csv(history), force=True)
        if dist.world > 1:
            torch.distributed.barrier()
        if on_epoch is not None:
            on_epoch(record, config.epochs)

    val_logits = predict(model, x_val, amp=config.amp).cpu().numpy().astype(np.float32)
    test_logits = predict(model, x_test, amp=config.amp).cpu().numpy().astype(np.float32)
    summary = _summary(config, dataset, val_logits, test_logits, history, count_parameters(model), start)
    if dist.main:
        for name, array in (("val_logits", val_logits), ("val_labels", dataset.y_val),
                            ("test_logits", test_logits), ("test_labels", dataset.y_test)):
            write_array(run_dir / f"{name}.npy", array, force=True)
        write_text(run_dir / "summary.json", json.dumps(_json_ready(summary), indent=2) + "\n", force=True)
    if dist.world > 1:
        torch.distributed.barrier()
    return TrainResult(run_dir, summary, history, model, start, val_logits, test_logits)


def _json_ready(obj):
    if isinstance(obj, dict):
        return {str(k): _json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_ready(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    return obj
