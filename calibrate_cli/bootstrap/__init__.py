"""Bootstrap confidence intervals for every metric (docs/bootstrap.md), and paired comparisons of two models.

The package, by job: :mod:`.draws` (one random stream per resample, drawn and counted in a thread
pool), :mod:`.resampler` (the weighted-sum engine, on any device), :mod:`.intervals` (basic,
percentile, BCa and their warnings), :mod:`.jackknife` (the BCa acceleration), :mod:`.selection`
(built-in and custom metrics), :mod:`.estimate` (one model) and :mod:`.paired` (two models).

A resample draws N of the N (score, label) pairs with replacement. Its metrics depend on the draw
only through the multiplicities w_i (how often sample i was drawn), so calib never builds resampled
score arrays: one :func:`~calibrate_cli.engine.summary.summarize` pass gives the per-sample quantities
(confidence, correctness, NLL, Brier term, top-5 hit, classwise bin of every p_ik) and each resample
is a weighted sum over them:

- the samples are sorted once by confidence, so every equal-width bin and every equal-mass bin is a
  contiguous range; per-bin count, Σconf and Σcorrect are differences of the weighted cumulative
  sums at the bin boundaries;
- equal-mass edges are recomputed per resample: the resampled sorted confidences are the sorted
  confidences repeated w_i times, so the value at position t is the sample whose cumulative weight
  first exceeds t, and ``np.interp``'s formula is applied to those values (bit-identical to
  :func:`~calibrate_cli.engine.binning.equal_mass_edges` on the explicitly resampled array);
- classwise-ECE sums w_i ([y_i = k] − p_ik) per (class, bin); the most populated bin of each class
  is obtained as the class total minus the other bins, so only the few (i, k) outside it are touched;
- NLL, Brier, accuracy, top-5, mean confidence and S99 are weighted means (matrix products).
- KS-CE and SmoothECE read the sorted samples with each resample's multiplicities
  (``MetricSums.samples``): a weighted cumulative sum, and relplot's grids spread with weights.

Resamples are processed in batches of ``batch_size`` rows of N multiplicities (two buffers of
8 bytes × batch_size × N; the default keeps each near 64 MB); the results do not depend on the
batch size.

Resample r draws from its own stream (:func:`resample_streams`), so the draws and counts of the
next batch run in a thread pool while the metrics of the current batch are computed.

``device`` chooses where the per-batch work runs (:mod:`calibrate_cli.engine.devices`): ``"cpu"``
(default) numpy; ``"cuda"`` torch on the GPU; ``"torch-cpu"`` the same torch code on the CPU (to
test it without a GPU); ``"auto"`` cuda when torch and a GPU are available, else numpy. The
per-batch math is written once against the device's array namespace (``Resampler.use``). The
draws, multiplicity counts and classwise sparse sums are always made in numpy, and the set-up is
shared, so a torch device computes on the very same multiplicity rows (in float64): results equal
the numpy path's up to float64 summation order.

Intervals (θ̂ the metric on the data, q_a the a-quantile of the B bootstrap values, computed by
``np.percentile`` with its default linear interpolation, α = 1 − level):

- ``auto`` (default): each metric's ``ci_method`` in the metric registry: basic for the calibration
  errors, percentile for the means (accuracy, NLL, Brier, mean confidence, S99, …)
- ``basic`` (Kumar et al. 2019):           [2θ̂ − q_{1−α/2}, 2θ̂ − q_{α/2}]
- ``percentile``:                          [q_{α/2}, q_{1−α/2}]
- ``bca`` (Efron 1987):                    [q_{a1}, q_{a2}], levels corrected for bias (z0) and
  skewness (the acceleration, from a delete-a-group jackknife: :func:`jackknife_values`)

An interval's ``low``/``high`` are the method's raw ends (a basic interval may reach below 0); tables
show it clipped to the metric's range (:data:`METRIC_RANGES`; ``clipped_low``/``clipped_high``,
marked ‡ when ``clipped``). Each carries ``warnings`` when it reaches outside that range, excludes its
point estimate (the mark of a biased estimator: binned calibration errors are biased upward), or
rests on too few resamples. Basic stays the method of the calibration errors: on simulated models it
covers the true binned ECE far more often than percentile or BCa (benchmarks/coverage_bootstrap.py);
for the means, which have no binning bias, percentile covers as often or more often and never leaves
the range (benchmarks/coverage_means.py; both in docs/bootstrap.md).
"""


from __future__ import annotations

from ..engine.devices import DEVICES, resolve_device
from .draws import DEFAULT_SEED, resample_streams
from .estimate import bootstrap, bootstrap_prepared, bootstrap_values
from .intervals import (
    CI_METHODS,
    DEFAULT_CI_LEVEL,
    DEFAULT_CI_METHOD,
    DEFAULT_N_RESAMPLES,
    METRIC_RANGES,
    ConfidenceInterval,
    clip_to_range,
    confidence_interval,
    difference_range,
    end_noise,
    method_for,
    min_resamples,
)
from .jackknife import jackknife_acceleration, jackknife_values
from .paired import Comparison, MetricDifference, compare

__all__ = [
    "DEFAULT_N_RESAMPLES",
    "DEFAULT_CI_LEVEL",
    "DEFAULT_CI_METHOD",
    "DEFAULT_SEED",
    "CI_METHODS",
    "DEVICES",
    "ConfidenceInterval",
    "Comparison",
    "MetricDifference",
    "bootstrap",
    "bootstrap_prepared",
    "bootstrap_values",
    "compare",
    "clip_to_range",
    "confidence_interval",
    "difference_range",
    "method_for",
    "end_noise",
    "jackknife_acceleration",
    "jackknife_values",
    "min_resamples",
    "METRIC_RANGES",
    "resample_streams",
    "resolve_device",
]

