"""Writing results safely: atomic writes, checks of output paths before long work, temporaries, and
reading back the JSON that calib wrote (docs/conventions.md).

An output is written to a temporary ``.NAME.calib-tmp-PID`` in the same folder, which then takes the
final name: readers never see a half-written file, and nothing is overwritten without ``force``.
Every problem is an :class:`~calibrate_cli.errors.OutputError` (or, reading, an
:class:`~calibrate_cli.errors.InputError`) whose one line starts with the path.
"""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np

from ..errors import InputError, OutputError
from .formats import one_line, os_reason
from .io import check_readable

__all__ = [
    "TEMP_MARK",
    "is_sink",
    "check_output_path",
    "check_array_path",
    "temporary_name",
    "remove_stale_temporaries",
    "remove_live_temporaries",
    "atomic_write",
    "write_text",
    "write_array",
    "read_json",
]

#: temporaries are named ``.NAME.calib-tmp-PID`` (see :func:`temporary_name`)
TEMP_MARK = ".calib-tmp-"
#: temporaries of this process not yet placed or removed; the CLI removes them on SIGTERM
_LIVE_TEMPS: set[str] = set()
_KINDS = {
    "S_ISDIR": "a directory",
    "S_ISFIFO": "a FIFO (named pipe)",
    "S_ISCHR": "a character device",
    "S_ISBLK": "a block device",
    "S_ISSOCK": "a socket",
}


def _name_max(folder: Path) -> int:
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def _not_regular(mode: int) -> str | None:
    """What a file of this ``st_mode`` is, when it is not a regular file."""
    import stat

    for test, what in _KINDS.items():
        if getattr(stat, test)(mode):
            return what
    return None if stat.S_ISREG(mode) else "not a regular file"


def _descriptor_link(path: Path) -> bool:
    """Whether the symbolic link ``path`` is, or leads through, ``/proc`` or ``/dev`` (such as
    /dev/stdout → /proc/self/fd/1): its "target" is whatever the process has open there, which
    calib must not replace."""
    current = os.path.abspath(path)
    for _ in range(40):
        if current.startswith(("/proc/", "/dev/")):
            return True
        if not os.path.islink(current):
            return False
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    return False


def is_sink(path: str | os.PathLike) -> bool:
    """Whether ``path`` itself (not through a symbolic link) is a character device such as
    ``/dev/null``: an output that calib writes straight into (no temporary, no rename, no --force:
    nothing is replaced), so that a script can throw a report away with ``-o /dev/null``."""
    import stat

    try:
        return stat.S_ISCHR(os.lstat(os.fspath(path)).st_mode)
    except (OSError, ValueError):
        return False


def check_output_path(path: str | os.PathLike, *, force: bool = False) -> Path:
    """Check before any work that ``path`` may receive an output; return where it will be written.

    Refused: an empty name; a missing or unwritable folder; a name longer than the file system's
    NAME_MAX; an existing file unless ``force``; and, even with ``force``, anything that is not a
    regular file (a directory, FIFO, device, socket), a symbolic link whose target is not one, and
    a link into /proc or /dev (/dev/stdout). A symbolic link to a regular file is written through:
    its target is replaced, the link stays (the returned path is the target's). Call it before long work so the user learns early;
    :func:`atomic_write` calls it again when it places the file.
    """
    text = os.fspath(path)
    if not text:
        raise OutputError("output file name is empty")
    if text.endswith(("/", os.sep)) or os.path.basename(text) == ".":  # Path("x.json/") is x.json
        trailing = "/" if text.endswith(("/", os.sep)) else "/."
        raise OutputError(f"{text}: names a folder (a trailing '{trailing}'), not a file; give a file name")
    path = Path(text)
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            size = len(os.fsencode(path.name))
            raise OutputError(f"{path}: file name too long ({size} bytes; the file system allows fewer)") from None
        raise OutputError(f"{path}: cannot write ({exc.strerror or one_line(exc)})") from None
    target = path
    if st is not None:
        import stat

        if stat.S_ISLNK(st.st_mode):
            if _descriptor_link(path):
                raise OutputError(
                    f"{path}: is a link to a process's file descriptor (/dev/stdout, /proc/self/fd/N); "
                    "calib does not write through it (-o - writes the report to stdout)"
                )
            try:
                target = path.resolve(strict=True)
                what = _not_regular(target.stat().st_mode)
            except (OSError, RuntimeError):
                raise OutputError(f"{path}: is a symbolic link to a missing file; calib does not write through it") from None
            if what:
                raise OutputError(f"{path}: is a symbolic link to {what}; calib writes only regular files")
        elif stat.S_ISCHR(st.st_mode):  # /dev/null: written into directly (atomic_write), never replaced
            return path
        else:
            what = _not_regular(st.st_mode)
            if what:
                raise OutputError(f"{path}: is {what}; calib writes only regular files")
        if not force:
            raise OutputError(f"{path}: already exists; use --force to overwrite")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"{path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: cannot write in folder {folder} (permission denied)")
    name_max = _name_max(folder)
    size = len(os.fsencode(target.name))
    if size > name_max:
        raise OutputError(f"{path}: file name too long ({size} bytes; this file system allows {name_max})")
    return target


def check_array_path(path: str | os.PathLike, *, force: bool = False) -> Path:
    """:func:`check_output_path` for :func:`write_array`: the name must end in ``.npy`` (or be a
    sink such as /dev/null, :func:`is_sink`)."""
    if Path(os.fspath(path)).suffix.lower() != ".npy" and not is_sink(path):
        raise OutputError(f"{path}: arrays are written as .npy; give a file name ending in .npy")
    return check_output_path(path, force=force)


def temporary_name(name: str, pid: int | None = None, name_max: int = 255) -> str:
    """The temporary of output ``name`` written by process ``pid``: ``.NAME.calib-tmp-PID``.

    When that exceeds ``name_max`` bytes, NAME is cut (on a character boundary) and followed by
    ``~`` and 12 hex digits of its SHA-1, so a legal 255-byte output name still gets a temporary.
    """
    import hashlib

    pid = os.getpid() if pid is None else pid
    tail = f"{TEMP_MARK}{pid}"
    full = f".{name}{tail}"
    if len(os.fsencode(full)) <= name_max:
        return full
    raw = os.fsencode(name)
    digest = hashlib.sha1(raw).hexdigest()[:12]
    budget = max(name_max - len(tail) - len(digest) - 2, 1)
    short = raw[:budget].decode("utf-8", "ignore")  # never half a character
    return f".{short}~{digest}{tail}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # a process of another user has it (or the number cannot be a process of ours)
    return True


def remove_stale_temporaries(folder: str | os.PathLike, name: str) -> list[Path]:
    """Remove temporaries of output ``name`` in ``folder`` left by calib processes that are gone
    (killed with SIGKILL, power loss): regular files of this user named by
    :func:`temporary_name` whose PID is not a running process. Returns what was removed.
    (A temporary written on another machine into a shared folder could look stale here; the
    other run then reports that its output could not be placed.)"""
    import re
    import stat

    folder = Path(folder)
    name_max = _name_max(folder)
    pattern = re.compile(re.escape(TEMP_MARK) + r"(\d+)$")
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = pattern.search(entry.name)
        if not match:
            continue
        pid = int(match.group(1))
        if entry.name != temporary_name(name, pid, name_max) or pid == os.getpid() or _pid_alive(pid):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


def remove_live_temporaries() -> None:
    """Remove this process's unplaced temporaries (the CLI's SIGTERM/SIGINT path)."""
    for tmp in list(_LIVE_TEMPS):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        _LIVE_TEMPS.discard(tmp)


def _place(tmp: str, target: Path, shown: Path, force: bool) -> None:
    """Give the finished temporary its final name without ever replacing a file that appeared
    while calib was working (unless ``force``): a hard link fails when the name exists."""
    if force:
        os.replace(tmp, target)
        return
    exists = OutputError(f"{shown}: appeared while calib was working; not replaced (use --force to overwrite)")
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise exists from None
    except OSError:
        # no hard links here (FAT, some network file systems): claim the name with O_EXCL instead
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            raise exists from None
        os.replace(tmp, target)
        return
    os.unlink(tmp)


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None], *, force: bool = False) -> Path:
    """Write a file atomically: ``write(f)`` fills a temporary ``.NAME.calib-tmp-PID`` in the same
    folder, which then takes the final name (readers never see a half-written file). Without
    ``force`` the final step is a hard link, which fails if a file of that name appeared in the
    meantime (nothing is ever replaced); with ``force`` a rename replaces the file (through a
    symbolic link, its target: see :func:`check_output_path`). Stale temporaries of the same name
    from killed runs are removed first. The file gets the usual permissions (0666 minus the umask).
    """
    target = check_output_path(path, force=force)
    shown = Path(os.fspath(path))
    if is_sink(target):  # /dev/null: nothing to replace atomically, written straight into
        try:
            with open(target, "wb") as f:
                write(f)
        except OSError as exc:
            raise OutputError(f"{shown}: cannot write ({one_line(exc)})") from None
        return shown
    folder = target.parent if str(target.parent) else Path(".")
    remove_stale_temporaries(folder, target.name)
    tmp = os.fspath(folder / temporary_name(target.name, name_max=_name_max(folder)))
    _LIVE_TEMPS.add(tmp)
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:  # left by a dead process that had our PID
            os.unlink(tmp)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        check_output_path(path, force=True)  # not turned into a FIFO meanwhile (existence: _place)
        _place(tmp, target, shown, force)
    except OutputError:
        Path(tmp).unlink(missing_ok=True)
        raise
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{shown}: cannot write ({one_line(exc)})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        _LIVE_TEMPS.discard(tmp)
    return shown


def write_text(path: str | os.PathLike, text: str, *, force: bool = False) -> Path:
    """Write ``text`` (UTF-8; file names that were not UTF-8 keep their bytes) to ``path``
    atomically; refuse to overwrite unless ``force``."""
    return atomic_write(path, lambda f: f.write(text.encode("utf-8", "surrogateescape")), force=force)


def write_array(path: str | os.PathLike, array: np.ndarray, *, force: bool = False) -> Path:
    """Save ``array`` as ``.npy`` at ``path`` atomically; refuse to overwrite unless ``force``."""
    check_array_path(path, force=force)
    return atomic_write(path, lambda f: np.save(f, np.asarray(array), allow_pickle=False), force=force)


def read_json(source: str | os.PathLike, *, what: str = "a readable JSON file"):
    """The JSON document in file ``source``; a missing or unreadable file, or invalid JSON, is one
    InputError starting with the path (``{source}: not {what} (...)``)."""
    path = Path(source)
    check_readable(path, str(source))
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:  # [[[[…]]]] deeper than Python's recursion limit
        raise InputError(f"{source}: not {what} (nested too deeply)") from None
    except OSError as exc:
        raise InputError(f"{source}: cannot read ({os_reason(exc)})") from None
    except ValueError as exc:  # invalid JSON, not UTF-8, an integer of more than 4300 digits
        reason = one_line(exc)
        if "integer string conversion" in reason:  # Python's advice to raise its limit is not the user's
            digits = re.search(r"value has (\d+) digits", reason)
            reason = f"a number of {digits.group(1) if digits else 'too many'} digits, more than Python reads"
        raise InputError(f"{source}: not {what} ({reason})") from None
