"""The training loop: recipes' schedules, the run folder, checkpoints and resume, DDP on CPU."""

import json
import socket

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from train_helpers import StandInCE, ddp_worker, loss_factory  # noqa: E402

from calibrate_cli.errors import InputError, OutputError  # noqa: E402
from calibrate_cli import evaluate  # noqa: E402
from calibrate_cli.training.loop import (  # noqa: E402
    HISTORY_COLUMNS, TrainConfig, load_checkpoint, milestones, one_cycle, predict, shard_indices, train, validate,
)
from libm import assert_agree  # noqa: E402

DIGITS = dict(loss="ce", data="digits", device="cpu", recipe="fast", batch_size=128)


def test_paper_milestones_scale_with_the_epochs():
    assert milestones(350) == [150, 250]
    assert milestones(5) == [2, 4]  # round(150·5/350) = round(2.14), round(3.57)
    assert milestones(700) == [300, 500]


@pytest.mark.parametrize("n, world", [(10, 2), (11, 2), (7, 3), (5, 1)])
def test_shards_are_distributed_samplers(n, world):
    from torch.utils.data import DistributedSampler

    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    for rank in range(world):
        expected = list(DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False))
        assert shard_indices(perm, world, rank).tolist() == perm[expected].tolist()


def test_one_cycle_warms_up_then_anneals():
    factors = [one_cycle(s, 20) for s in range(21)]
    assert factors[0] == pytest.approx(0.04) and factors[5] == 1.0 and factors[20] == pytest.approx(0.0)
    assert all(a < b for a, b in zip(factors[:5], factors[1:6]))
    assert all(a > b for a, b in zip(factors[5:20], factors[6:21]))
    assert [round(one_cycle(s, 1), 6) for s in range(2)] == [0.04, 1.0]  # a one-step run works


def test_fast_recipe_on_a_few_steps(tmp_path):
    # 4 steps in all: torch's OneCycleLR raised ZeroDivisionError here
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(50, 6)).astype(np.float32), np.arange(50) % 2
    np.savez(tmp_path / "d.npz", x_train=x[:40], y_train=y[:40], x_test=x[40:], y_test=y[40:])
    result = train(TrainConfig(**{**DIGITS, "data": f"npz:{tmp_path / 'd.npz'}", "batch_size": 10}, epochs=1), tmp_path / "r",
                   loss_factory=loss_factory)
    assert len(result.history) == 1


def test_run_folder_and_history(tmp_path):
    calls = []
    factory = lambda name, k, **p: StandInCE(name, k, **p)  # noqa: E731  (counts end_epoch)
    result = train(TrainConfig(**DIGITS, epochs=3), tmp_path / "run", loss_factory=factory,
                   on_epoch=lambda r, total: calls.append((r.epoch, total)))
    run = tmp_path / "run"
    assert calls == [(1, 3), (2, 3), (3, 3)]
    lines = (run / "history.csv").read_text().splitlines()
    assert lines[0].split(",") == list(HISTORY_COLUMNS) and len(lines) == 4
    ckpt = load_checkpoint(run / "checkpoint.pt")  # weights_only: no pickle
    assert ckpt["epoch"] == 3 and int(ckpt["loss"]["calls"]) == 3  # end_epoch once per epoch, state saved
    val = np.load(run / "val_logits.npy")
    assert val.dtype == np.float32 and np.array_equal(val, result.val_logits)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs_done"] == 3 and summary["temperature"] > 0
    # the summary's test error is the error of the saved logits (independent numpy)
    test, labels = np.load(run / "test_logits.npy"), np.load(run / "test_labels.npy")
    assert summary["test"]["before"]["error"] == pytest.approx(float(np.mean(test.argmax(1) != labels)))
    # the last history row (a Meter fed on the device) holds the final model's validation metrics: those
    # of evaluate on the saved logits, within the numeric contract, and the error by numpy
    y_val = np.load(run / "val_labels.npy")
    last, whole = result.history[-1], evaluate(val, y_val, n_bins=TrainConfig(**DIGITS).n_bins).metrics
    assert_agree({"error": last.val_error, "ece": last.val_ece, "nll": last.val_nll},
                 {m: whole[m] for m in ("error", "ece", "nll")})
    assert last.val_error == pytest.approx(float(np.mean(val.argmax(1) != y_val)), abs=1e-15)


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))])
def test_validate_feeds_a_meter_batch_by_batch(device):
    # several batches of the evaluation size; the logits kept only when asked, equal to predict's
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
    x, y = torch.randn(70, 5).to(device), torch.randint(0, 4, (70,)).to(device)
    metrics, kept = validate(model, x, y, n_bins=10, batch=16)
    assert kept is None and model.training  # the model's mode is restored
    logits = predict(model, x, batch=16)
    whole = evaluate(logits.cpu().numpy(), y.cpu().numpy(), n_bins=10).metrics
    assert_agree(metrics, {m: whole[m] for m in ("error", "ece", "nll")})
    _, kept = validate(model, x, y, n_bins=10, batch=16, keep_logits=True)
    assert torch.equal(kept, logits)
    # a diverged model: NaN metrics, no error
    with torch.no_grad():
        model[2].bias[1] = float("nan")
    metrics, _ = validate(model, x, y, n_bins=10, batch=16)
    assert all(np.isnan(v) for v in metrics.values())


def test_history_lr_is_the_rate_each_epoch_trained_with(tmp_path):
    result = train(TrainConfig(**{**DIGITS, "recipe": "paper"}, epochs=5), tmp_path / "p", loss_factory=loss_factory)
    # milestones(5) = [2, 4]: epochs 1-2 at 0.1, 3-4 at 0.01, 5 at 0.001 (the 2nd showed 0.01 before)
    assert [round(h.lr, 6) for h in result.history] == [0.1, 0.1, 0.01, 0.01, 0.001]


def test_existing_folder_needs_resume_or_force(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="not empty") as err:
        train(TrainConfig(**DIGITS, epochs=1), run, loss_factory=loss_factory)
    assert err.value.remedy == "resume-or-force"
    with pytest.raises(InputError, match="no checkpoint.pt to resume from"):
        train(TrainConfig(**DIGITS, epochs=1), run, resume=True, loss_factory=loss_factory)
    train(TrainConfig(**DIGITS, epochs=1), run, force=True, loss_factory=loss_factory)
    assert (run / "notes.txt").read_text() == "mine"  # force replaces calib's files only


class Killed(Exception):
    pass


def test_a_run_killed_mid_epoch_resumes_where_it_stopped(tmp_path):
    # adafocal: its per-bin γ, updated after every epoch, must come back from the checkpoint too
    config = TrainConfig(**{**DIGITS, "loss": "adafocal"}, epochs=4)
    whole = train(config, tmp_path / "whole", loss_factory=loss_factory)

    def kill(epoch, step):
        if epoch == 2 and step == 3:  # inside the third epoch
            raise Killed

    with pytest.raises(Killed):
        train(config, tmp_path / "cut", loss_factory=loss_factory, step_hook=kill)
    assert load_checkpoint(tmp_path / "cut" / "checkpoint.pt")["epoch"] == 2  # lost: the third epoch only
    assert not (tmp_path / "cut" / "summary.json").exists()
    # resume with the folder alone (no settings: they come from config.json)
    resumed = train(TrainConfig(loss=None, data=None, device="cpu"), tmp_path / "cut", resume=True,
                    loss_factory=loss_factory)
    assert resumed.started_at_epoch == 2 and len(resumed.history) == 4
    # same batches, same augmentation, same optimiser state: the run that never stopped, exactly
    assert [h.train_loss for h in resumed.history] == [h.train_loss for h in whole.history]
    assert np.array_equal(resumed.test_logits, whole.test_logits)
    gammas = load_checkpoint(tmp_path / "cut" / "checkpoint.pt")["loss"]["_extra_state"]["bin_gammas"]
    assert gammas == load_checkpoint(tmp_path / "whole" / "checkpoint.pt")["loss"]["_extra_state"]["bin_gammas"]
    assert gammas != [1.0] * len(gammas)  # four updates happened


def test_resume_refuses_other_settings(tmp_path):
    train(TrainConfig(**DIGITS, epochs=1), tmp_path / "r", loss_factory=loss_factory)
    with pytest.raises(InputError, match="started with epochs 1, not 7"):
        train(TrainConfig(**{**DIGITS, "epochs": 7}), tmp_path / "r", resume=True, loss_factory=loss_factory)
    with pytest.raises(InputError, match="started with loss 'ce', not 'brier'"):
        train(TrainConfig(**{**DIGITS, "loss": "brier"}), tmp_path / "r", resume=True, loss_factory=loss_factory)


def test_amp_needs_cuda(tmp_path):
    with pytest.raises(InputError, match="CUDA"):
        train(TrainConfig(**DIGITS, epochs=1, amp=True), tmp_path / "a", loss_factory=loss_factory)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_two_processes_gloo_agree(tmp_path):
    import torch.multiprocessing as mp

    # small synthetic images (no scikit-learn to import in the children); the CNN has BatchNorm buffers
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    x = rng.normal(size=(300, 1, 8, 8)).astype(np.float32) + y[:, None, None, None]
    np.savez(tmp_path / "d.npz", x_train=x[:240], y_train=y[:240], x_test=x[240:], y_test=y[240:])
    kwargs = dict(DIGITS, data=f"npz:{tmp_path / 'd.npz'}", epochs=1, model="cnn", batch_size=32)
    mp.spawn(ddp_worker, args=(2, _free_port(), str(tmp_path / "run"), str(tmp_path), kwargs), nprocs=2, join=True)
    r0, r1 = np.load(tmp_path / "rank0.npz"), np.load(tmp_path / "rank1.npz")
    # DistributedDataParallel keeps the replicas equal: same weights, same validation logits
    assert np.array_equal(r0["weights"], r1["weights"])
    assert np.array_equal(r0["val_logits"], r1["val_logits"])
    # each process saw its own half of the epoch (different losses), and rank 0 wrote the folder
    assert r0["history"][0, 0] != r1["history"][0, 0]
    assert (tmp_path / "run" / "summary.json").exists()
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["epoch"] == 1
