"""``calib train``: train a classifier with a calibration loss into a run folder (docs/training.md)."""

from __future__ import annotations

import click

from . import render
from .options import FLOAT, INT, PlainIntRange, force_option, plain_float_text

#: calibrate_cli.training's MODEL_NAMES and RECIPES, repeated so that loading the CLI imports nothing
#: of the training room (a test checks they agree)
MODEL_NAMES = ("mlp", "cnn", "resnet50", "resnet110", "resnet110-he", "wrn-26-10", "densenet121")
RECIPES = ("paper", "fast")
TORCH_INSTALL = "pip install torch==2.13.0 && pip install 'calibrate-cli[train]'"


def _alpha(ctx, param, value):
    """``--alpha 0.25`` (binary) or ``--alpha 1,2,1`` (one weight per class)."""
    if value is None:
        return None
    try:
        parts = [plain_float_text(v, "--alpha") for v in value.split(",")]
    except click.BadParameter:
        raise click.BadParameter(f"{value!r} is not a number or a comma-separated list of numbers") from None
    return parts[0] if len(parts) == 1 else parts


def _val_size(ctx, param, value):
    if value is None:
        return None
    try:
        number = plain_float_text(value, "--val-size")
    except click.BadParameter:
        raise click.BadParameter(f"{value!r} is not a count or a fraction") from None
    if not number > 0 or (number >= 1 and number != int(number)):
        raise click.BadParameter(f"{value!r}: give a whole count (5000) or a fraction below 1 (0.1)")
    return number


@click.command("train", short_help="Train a classifier with a calibration loss (focal, Brier, MMCE, …), then measure it.")
@click.option("--loss", metavar="NAME", help="Training loss: ce, focal, flsd53, flsd532, flsc531, flsc532, ls, "
              "brier, mmce, adafocal (docs/losses.md; required unless --resume).")
@click.option("--gamma", type=FLOAT, help="γ of the focal loss (focal, and α-balanced focal with --alpha).")
@click.option("--alpha", callback=_alpha, metavar="A|A1,…,AK",
              help="α of the α-balanced focal loss: one weight per class, or (binary) one number A "
              "weighting the positive class 1 by A and class 0 by 1−A, as Lin et al. and torchvision.")
@click.option("--eps", type=FLOAT, help="ε of label smoothing (ls; default 0.05).")
@click.option("--lam", type=FLOAT, help="λ of MMCE (mmce; default 2) or AdaFocal's update rate (adafocal; default 1).")
@click.option("--data", metavar="SOURCE", help="digits | imagefolder:DIR | npz:FILE | cifar10:DIR "
              "(required unless --resume; nothing is downloaded).")
@click.option("--model", default=None, metavar="NAME",
              help=f"Network: auto (default: mlp for small images, else cnn), {', '.join(MODEL_NAMES)}.")
@click.option("--recipe", type=click.Choice(RECIPES), default=None,
              help="paper (default): SGD 0.9, wd 5e-4, lr 0.1 ×0.1 at 150/250 of 350 epochs, batch 128, "
              "clip 2; fast: AdamW + one-cycle, batch 64, for small CPU runs.")
@click.option("--epochs", type=PlainIntRange(min=1), help="Epochs (paper: 350, fast: 30); lr steps scale with it.")
@click.option("--batch-size", type=PlainIntRange(min=1), help="Batch size per process (paper: 128, fast: 64).")
@click.option("--lr", type=FLOAT, help="Learning rate (paper: 0.1, fast: 3e-3, the one-cycle peak).")
@click.option("--val-size", callback=_val_size, metavar="N|FRACTION",
              help="Validation set split off the training set: a count (5000) or a fraction (default 0.1).")
@click.option("--seed", type=INT, default=None, help="Seed of the split, the initial weights, batches and augmentation (default 0).")
@click.option("--augment", type=click.Choice(["auto", "on", "off"]), default=None,
              help="Random crop (pad 4) + flip: auto (default) for images of 32x32 or more.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="Where to train (auto: CUDA when available).")
@click.option("--amp", is_flag=True, help="bfloat16 autocast on CUDA.")
@click.option("--compile", "compile_", is_flag=True, help="torch.compile the model (CUDA; minutes of warm-up).")
@click.option("--out", "run_dir", required=True, metavar="RUN_DIR", help="Run folder: checkpoint, logits, history, summary.")
@click.option("--resume", is_flag=True, help="Continue the run in RUN_DIR from its last checkpoint.")
@force_option
def train_command(loss, gamma, alpha, eps, lam, data, model, recipe, epochs, batch_size, lr, val_size, seed,
                  augment, device, amp, compile_, run_dir, resume, force):
    """Train a classifier with a calibration loss (Mukhoti et al. 2020), then measure it.

    RUN_DIR gets a checkpoint after every epoch (a killed run continues with --resume and loses
    at most that epoch), history.csv (train loss, validation error, ECE, NLL per epoch), the
    final val/test logits and labels as .npy files for calib eval / temperature / fit, and
    summary.json with the metrics before and after temperature scaling. An existing RUN_DIR is
    refused without --resume or --force. Under torchrun every process trains on its share of
    each epoch (DistributedDataParallel); only rank 0 prints the progress and the table.
    Needs torch (the [train] extra).

    \b
    Examples:
      calib train --loss ce --data digits --epochs 5 --device cpu --out runs/digits-ce
      calib train --loss flsd53 --data digits --recipe fast --out runs/digits-flsd53
      calib eval runs/digits-ce/test_logits.npy runs/digits-ce/test_labels.npy
      calib temperature runs/digits-ce/val_logits.npy runs/digits-ce/val_labels.npy \\
          --test runs/digits-ce/test_logits.npy runs/digits-ce/test_labels.npy
      calib train --loss flsd53 --data imagefolder:cifar10 --model resnet50 --amp --out runs/r50-flsd53
      calib train --loss focal --gamma 3 --data npz:data.npz --model cnn --epochs 30 --out runs/fl3
      calib train --out runs/r50-flsd53 --resume            # after a crash or a time limit
      torchrun --nproc_per_node 4 "$(command -v calib)" train --loss flsd53 \\
          --data imagefolder:cifar10 --model resnet50 --amp --out runs/ddp
    """
    from . import UserError

    try:
        import torch  # noqa: F401
    except ImportError:
        raise UserError(f"calib train needs torch: {TORCH_INSTALL}") from None
    if not resume and (loss is None or data is None):
        raise UserError(f"give --{'loss' if loss is None else 'data'} (or --resume a run)")
    from ..training.loop import TrainConfig, train

    config = TrainConfig(
        loss=loss, data=data, loss_params={"gamma": gamma, "alpha": alpha, "eps": eps, "lam": lam},
        model=model or "auto", recipe=recipe or "paper", epochs=epochs, batch_size=batch_size, lr=lr,
        seed=0 if seed is None else seed, val_size=0.1 if val_size is None else val_size,
        augment=augment or "auto", device=device, amp=amp, compile=compile_,
    )
    console = render.stderr_console()
    if not _main_process():  # torchrun: the other ranks train in silence; rank 0 reports for all
        train(config, run_dir, resume=resume, force=force)
        return

    def on_epoch(record, total):
        console.print(
            f"epoch {record.epoch}/{total}  loss {record.train_loss:.4f}  val error {100 * record.val_error:.2f}%  "
            f"ECE {100 * record.val_ece:.2f}%  NLL {record.val_nll:.4f}  ({record.seconds:.1f} s)",
            highlight=False,
        )

    with render.progress_bar("training") as progress:
        result = train(config, run_dir, resume=resume, force=force, progress=progress, on_epoch=on_epoch)
    _report(result)


def _main_process() -> bool:
    """False in a process that torchrun started with a rank other than 0 (``RANK`` or ``LOCAL_RANK``
    set and not 0): only rank 0 prints the progress, the epochs and the final table."""
    import os

    for name in ("RANK", "LOCAL_RANK"):
        try:
            if int(os.environ.get(name, "0")) != 0:
                return False
        except ValueError:  # not torchrun's
            pass
    return True


def _report(result) -> None:
    summary = result.summary
    if "test" not in summary:
        for line in summary.get("warnings", []):
            render.warn([line])
        return
    columns = [render.Column("metric", justify="left", style="bold")]
    reports = []
    for name in ("val", "test"):
        columns += [render.Column(f"{name}\nPre T"), render.Column(f"{name}\nPost T ({summary['temperature']:.4g})")]
        reports += [summary[name]["before"], summary[name]["after"]]
    from ..metrics.registry import PAPER_COLUMNS as shown
    rows = [[render.PRETTY_NAMES[m], *(render.format_value(m, r.get(m)) for r in reports)] for m in shown]
    title = f"{summary['config']['model']} · {summary['config']['loss']} · {summary['epochs_done']} epochs → {result.run_dir}"
    render.write_report(render.render_rows("table", columns, rows, title=title), None, False)
    render.warn(summary.get("warnings", []))
