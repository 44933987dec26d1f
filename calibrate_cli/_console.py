"""Ctrl-C while the ``calib`` console script is still starting (issue 32).

The script's first line imports this package, and the imports (numpy, scipy, click, …) take 50 to
several hundred milliseconds, before :class:`calibrate_cli.cli.CalibGroup` installs its own signal
handling: a Ctrl-C there printed a ``KeyboardInterrupt`` traceback. The package's ``__init__`` calls
:func:`quiet_interrupts_while_starting` before anything else, so Ctrl-C during the imports ends
the process at once with 130, quietly (there are no temporaries yet), as it does later.

Only the console script (``sys.argv[0]`` is ``calib``) is affected: a program or a test that imports
calibrate_cli keeps Python's KeyboardInterrupt, and so does ``CALIB_DEBUG=1`` (its traceback is
wanted there). A SIGINT that is ignored (a background job, ``nohup``) stays ignored. What is left
unguarded is the interpreter's own start before the script runs (``site`` and its ``.pth`` files;
longer with an editable install, whose import finder loads pathlib there: docs/performance.md).
"""

from __future__ import annotations

import os
import signal
import sys

#: the names of the console script (pip writes ``calib``; ``calib.exe`` on Windows)
CONSOLE_NAMES = ("calib", "calib.exe")


def _quit_quietly(signum, frame) -> None:
    os._exit(128 + signum)


def quiet_interrupts_while_starting() -> None:
    """Make Ctrl-C end the ``calib`` console script quietly with 130 while it imports (see the module)."""
    if os.environ.get("CALIB_DEBUG"):
        return
    argv = getattr(sys, "argv", None) or [""]
    if os.path.basename(str(argv[0])) not in CONSOLE_NAMES:
        return
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _quit_quietly)
    except (ValueError, OSError):  # not the main thread, or no SIGINT here
        pass
