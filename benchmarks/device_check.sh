#!/usr/bin/env bash
# The GPU figures in one short run (about 8 minutes on one GPU), everything measured written to OUTDIR:
#   eval.json     every top-label metric of 10^8 x 10 float32 device tensors against one read pass and the
#                 float64 CPU result; `calib eval FILE --device cuda` on the same logits saved as a 4 GB .npy
#                 against the file's bare host-to-device copy (benchmarks/bench_gpu.py --file)
#   train.jsonl   calib train's step (ResNet-50, FLSD-53 and CE, batch 128) and the reference code's own step
#                 on the same GPU (benchmarks/bench_train.py, benchmarks/bench_reference_step.py)
#   cifar.json    short CIFAR-10 runs of CE and FLSD-53 (as many epochs as the time allows), with
#                 `calib temperature` on each run's validation/test logits
#   tests.txt     the torch tests, which run their CUDA cases where a GPU is present (pytest-xdist, 4 workers)
#   llm.json      vocabulary-scale logits (3,000 x 128,256) on the GPU: calib, torchmetrics and a plain pass in
#                 each dtype and format (benchmarks/bench_llm.py --device cuda)
#   log.txt       the console of all of it
#
#   bash benchmarks/device_check.sh OUTDIR REFDIR
# REFDIR holds focal_calibration/ (a checkout of torrvision/focal_calibration) and cifar10-jpeg.tar.gz;
# BUDGET (seconds, default 450) bounds the whole run: the CIFAR epochs are chosen to fit what is left.
set -u
OUTDIR=${1:?OUTDIR}
REFDIR=${2:?REFDIR}
BUDGET=${BUDGET:-450}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$OUTDIR"
T0=$(date +%s)
elapsed() { echo $(( $(date +%s) - T0 )); }
log() { echo "[$(elapsed) s] $*"; }
exec > >(tee -a "$OUTDIR/log.txt") 2>&1

log "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)"
log "CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
if ! $PY -m pip install -q --no-deps --no-build-isolation -e . >/tmp/install.log 2>&1; then
  log "pip install failed, building in place: $(tail -2 /tmp/install.log)"
  $PY setup.py -q build_ext --inplace >/tmp/build.log 2>&1 || log "build_ext failed: $(tail -2 /tmp/build.log)"
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
calib() { $PY -c "from calibrate_cli.cli import main; main()" "$@"; }
$PY -c "import calibrate_cli, numpy, torch; print('calib', calibrate_cli.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name(0))"

log "1. the eval figures"
timeout 200 $PY benchmarks/bench_gpu.py --file /tmp/figures --json "$OUTDIR/eval.json" || log "bench_gpu exit $?"
rm -rf /tmp/figures

log "2. the training step"
: > "$OUTDIR/train.jsonl"
for loss in flsd53 ce; do
  timeout 60 $PY benchmarks/bench_train.py --model resnet50 --loss "$loss" --device cuda --amp --steps 30 --warmup 10 \
    | tee -a "$OUTDIR/train.jsonl" || log "bench_train $loss exit $?"
done
timeout 60 $PY benchmarks/bench_train.py --model resnet50 --loss flsd53 --device cuda --steps 30 --warmup 10 --reference \
  | tee -a "$OUTDIR/train.jsonl" || log "bench_train fp32 exit $?"
timeout 90 $PY benchmarks/bench_reference_step.py --reference-dir "$REFDIR/focal_calibration" --device cuda --steps 30 \
  2> >(grep -v Warning >&2) | tee -a "$OUTDIR/train.jsonl" || log "reference step exit $?"

log "3. the torch tests (their CUDA cases run here)"
timeout 150 $PY -m pytest -q -p no:cacheprovider -rs --timeout 120 -n 4 \
  tests/test_device_eval.py tests/test_device_report.py tests/test_rows.py tests/cli/test_device.py \
  tests/bootstrap/test_torch.py tests/test_engines.py tests/test_losses.py tests/training/test_loop.py \
  tests/test_meter.py > "$OUTDIR/tests.txt" 2>&1
log "tests exit $?: $(tail -1 "$OUTDIR/tests.txt")"

log "4. vocabulary-scale logits on the GPU"
timeout 90 $PY benchmarks/bench_llm.py --device cuda --json "$OUTDIR/llm.json" || log "bench_llm exit $?"

log "5. CIFAR-10 runs of CE and FLSD-53 (two at once, float32), calib temperature on each"
mkdir -p /tmp/cifar && tar xzf "$REFDIR/cifar10-jpeg.tar.gz" -C /tmp/cifar
DATA=$(dirname "$(find /tmp/cifar -maxdepth 3 -type d -name train | head -1)")
STEP_MS=$($PY -c "
import json
rows = [json.loads(l) for l in open('$OUTDIR/train.jsonl') if l.startswith('{')]
ms = [r['ms_per_step'] for r in rows if r.get('variant') == 'calib' and not r.get('amp')]
print(max(ms) if ms else 40)")
LEFT=$(( BUDGET - $(elapsed) - 45 ))
EPOCHS=$($PY -c "
step, left = $STEP_MS / 1e3, $LEFT
epoch = step * 352 * 2.1 + 2    # 352 steps of 128 and validation, two runs sharing the GPU
print(max(2, min(60, int((left - 30) / epoch))))")
log "calib step ${STEP_MS} ms, ${LEFT} s left: ${EPOCHS} epochs each"
for loss in ce flsd53; do
  rm -rf "/tmp/runs/$loss"
  timeout $(( LEFT > 30 ? LEFT : 30 )) $PY -c "from calibrate_cli.cli import main; main()" train --loss "$loss" \
    --data "imagefolder:$DATA" --model resnet50 --epochs "$EPOCHS" --out "/tmp/runs/$loss" > "/tmp/train-$loss.log" 2>&1 &
done
wait
for loss in ce flsd53; do
  log "train $loss: $(tail -2 /tmp/train-$loss.log | tr '\n' ' ')"
  [ -f "/tmp/runs/$loss/test_logits.npy" ] && calib temperature "/tmp/runs/$loss/val_logits.npy" \
    "/tmp/runs/$loss/val_labels.npy" --test "/tmp/runs/$loss/test_logits.npy" "/tmp/runs/$loss/test_labels.npy" \
    --format json -o "/tmp/runs/$loss/temperature.json" --force || log "temperature $loss: no final logits"
done
$PY - "$OUTDIR/cifar.json" "$EPOCHS" <<'EOF'
import json, sys, pathlib
out = {"epochs": int(sys.argv[2])}
for loss in ("ce", "flsd53"):
    run = pathlib.Path("/tmp/runs") / loss
    entry = {}
    for name in ("temperature.json", "summary.json"):
        try:
            entry[name] = json.loads((run / name).read_text())
        except (OSError, ValueError) as exc:
            entry[name] = f"missing: {exc}"
    try:
        entry["history"] = (run / "history.csv").read_text().splitlines()
    except OSError:
        pass
    out[loss] = entry
pathlib.Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
EOF
log "done"
