"""The metrics: their registry (:mod:`.registry`: what each needs from the pass), the functions
(:mod:`.functional`: ``ece``, ``adaece``, …), SmoothECE (:mod:`.smooth_ece`) and CI gates (:mod:`.gates`).

``from calibrate_cli.metrics import ece`` keeps working: the functions are re-exported here."""

from .functional import *  # noqa: F401,F403
from .functional import __all__  # noqa: F401
