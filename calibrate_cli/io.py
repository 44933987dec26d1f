"""Reading model outputs from files and writing results, safely (SPEC §1).

Sources are paths with an optional key: ``logits.npy``, ``outputs.npz:logits``, ``run.pt:logits``,
``preds.csv``. Nothing is ever unpickled: ``.npy``/``.npz`` load with ``allow_pickle=False``, ``.pt``
with ``torch.load(weights_only=True)`` (torch is optional and imported only for ``.pt``). Large
``.npy`` files are memory-mapped. Every problem is an :class:`InputError` whose one-line message
starts with the file's path. Outputs are written atomically and never overwrite without ``force``.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import zipfile
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np

from .errors import InputError, OutputError

__all__ = [
    "load_array",
    "load_scores",
    "load_labels",
    "load_temperature",
    "write_text",
    "write_array",
    "check_output_path",
    "check_array_path",
    "atomic_write",
    "split_source",
    "SUFFIXES",
]

SUFFIXES = (".npy", ".npz", ".pt", ".pth", ".csv")
_KEYED = (".npz", ".pt", ".pth")
MMAP_THRESHOLD_BYTES = 256 << 20
_NPY_MAGIC = b"\x93NUMPY"


def split_source(source: str | os.PathLike) -> tuple[Path, str | None]:
    """``"run.npz:logits"`` → (Path("run.npz"), "logits"); keys only follow .npz/.pt/.pth."""
    text = os.fspath(source)
    head, sep, key = text.rpartition(":")
    if sep and head.lower().endswith(_KEYED) and key and "/" not in key and "\\" not in key:
        return Path(head), key
    return Path(text), None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _check_readable(path: Path, label: str) -> None:
    if not path.exists():
        raise InputError(f"{label}: no such file")
    if path.is_dir():
        raise InputError(f"{label}: is a directory, expected a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{label}: permission denied")


def _load_npy(path: Path, label: str) -> np.ndarray:
    with open(path, "rb") as f:
        head = f.read(6)
    if head != _NPY_MAGIC:
        if head[:1] == b"\x80":
            raise InputError(f"{label}: contains a pickled object, which calib never loads; save arrays with np.save")
        raise InputError(f"{label}: not a .npy file (bad header)")
    mmap = "r" if path.stat().st_size > MMAP_THRESHOLD_BYTES else None
    try:
        return np.load(path, mmap_mode=mmap, allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc).lower() or "object arrays" in str(exc).lower():
            raise InputError(f"{label}: holds Python objects (pickled), which calib never loads") from None
        raise InputError(f"{label}: truncated or corrupt .npy file ({_one_line(exc)})") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"{label}: truncated or corrupt .npy file ({_one_line(exc)})") from None
    except MemoryError:
        raise
    except Exception as exc:  # a mangled header: numpy's parser raises TokenError, SyntaxError, ...
        raise InputError(f"{label}: corrupt .npy header ({type(exc).__name__}: {_one_line(exc)})") from None


def _pick_key(mapping_keys: list[str], key: str | None, label: str, path: Path) -> str:
    if key is None:
        if len(mapping_keys) == 1:
            return mapping_keys[0]
        names = ", ".join(mapping_keys) or "none"
        raise InputError(f"{label}: holds several arrays ({names}); name one as {path}:KEY")
    if key not in mapping_keys:
        names = ", ".join(mapping_keys) or "none"
        raise InputError(f"{label}: no array named {key!r} (found: {names})")
    return key


def _load_npz(path: Path, key: str | None, label: str) -> np.ndarray:
    try:
        with np.load(path, allow_pickle=False) as archive:
            name = _pick_key(list(archive.files), key, label, path)
            return np.asarray(archive[name])
    except InputError:
        raise
    except ValueError as exc:
        if "pickle" in str(exc).lower() or "object arrays" in str(exc).lower():
            raise InputError(f"{label}: holds Python objects (pickled), which calib never loads") from None
        raise InputError(f"{label}: corrupt .npz file ({_one_line(exc)})") from None
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise InputError(f"{label}: truncated or corrupt .npz file ({_one_line(exc)})") from None


def _load_torch(path: Path, key: str | None, label: str) -> np.ndarray:
    try:
        import torch
    except ImportError:
        raise InputError(
            f"{label}: reading .pt/.pth files needs PyTorch: pip install torch==2.13.0 "
            "(the pinned version; an unpinned torch pulls a multi-GB CUDA build), or save the arrays with np.save"
        ) from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for bad files
        text = _one_line(exc)
        if "weights_only" in text or "Unsupported global" in text or "GLOBAL" in text:
            raise InputError(
                f"{label}: holds objects other than tensors; calib loads only tensors (weights_only=True)"
            ) from None
        raise InputError(f"{label}: cannot read as a torch file ({text})") from None
    if isinstance(obj, dict):
        tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        obj = tensors[_pick_key(list(tensors), key, label, path)]
    elif key is not None:
        raise InputError(f"{label}: holds a single tensor, not a dict; drop ':{key}'")
    if not isinstance(obj, torch.Tensor):
        raise InputError(f"{label}: expected a tensor or a dict of tensors, got {type(obj).__name__}")
    tensor = obj.detach().cpu()
    if tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.float()
    return tensor.numpy()


def _parse_float(cell: str, label: str, line: int) -> float:
    try:
        return float(cell)
    except ValueError:
        raise InputError(f"{label}: line {line}: {cell.strip()!r} is not a number") from None


def _read_csv(path: Path, label: str) -> tuple[list[str] | None, np.ndarray]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = [row for row in csv.reader(f) if row and any(c.strip() for c in row)]
    except UnicodeDecodeError:
        raise InputError(f"{label}: not a text CSV file") from None
    except (OSError, csv.Error) as exc:
        raise InputError(f"{label}: cannot read CSV ({_one_line(exc)})") from None
    if not rows:
        raise InputError(f"{label}: empty CSV file (N = 0)")
    header = None
    try:
        [float(c) for c in rows[0]]
    except ValueError:
        header, rows = [c.strip() for c in rows[0]], rows[1:]
    width = len(header) if header else len(rows[0]) if rows else 0
    values = np.empty((len(rows), width), dtype=np.float64)
    first_line = 2 if header else 1
    for i, row in enumerate(rows):
        if len(row) != width:
            raise InputError(f"{label}: line {i + first_line} has {len(row)} columns, expected {width}")
        values[i] = [_parse_float(c, label, i + first_line) for c in row]
    return header, values


def _column_index(header: list[str] | None, column: str, width: int, label: str) -> int:
    if header is not None and column in header:
        return header.index(column)
    try:
        index = int(column)
    except ValueError:
        names = ", ".join(header) if header else "no header row"
        raise InputError(f"{label}: no column named {column!r} ({names})") from None
    if not -width <= index < width:
        raise InputError(f"{label}: column {index} is out of range ({width} columns)")
    return index % width


def load_array(source: str | os.PathLike) -> np.ndarray:
    """Load one array from ``source`` (.npy, .npz[:key], .pt/.pth[:key], .csv), never unpickling."""
    path, key = split_source(source)
    label = os.fspath(source)
    _check_readable(path, label)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"{label}: unknown file type {suffix or '(none)'!r}; expected one of {', '.join(SUFFIXES)}")
    if suffix == ".npy":
        return _load_npy(path, label)
    if suffix == ".npz":
        return _load_npz(path, key, label)
    if suffix in (".pt", ".pth"):
        return _load_torch(path, key, label)
    _, values = _read_csv(path, label)
    return values[:, 0] if values.shape[1] == 1 else values


def load_scores(source: str | os.PathLike, *, label_col: str | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Load scores; with ``label_col`` (CSV only: a column name or index) also the labels column."""
    if label_col is None:
        return load_array(source), None
    path, _ = split_source(source)
    label = os.fspath(source)
    if path.suffix.lower() != ".csv":
        raise InputError(f"{label}: --label-col works with .csv files only")
    _check_readable(path, label)
    header, values = _read_csv(path, label)
    col = _column_index(header, label_col, values.shape[1], label)
    labels = values[:, col]
    scores = np.delete(values, col, axis=1)
    return (scores[:, 0] if scores.shape[1] == 1 else scores), labels


def load_labels(source: str | os.PathLike) -> np.ndarray:
    """Load labels: (N,) integers or one-hot (N, K), from any supported file type."""
    return load_array(source)


# ----------------------------------------------------------------------------------------- outputs
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
    path = Path(text)
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            size = len(os.fsencode(path.name))
            raise OutputError(f"{path}: file name too long ({size} bytes; the file system allows fewer)") from None
        raise OutputError(f"{path}: cannot write ({exc.strerror or _one_line(exc)})") from None
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
    """:func:`check_output_path` for :func:`write_array`: the name must end in ``.npy``."""
    if Path(os.fspath(path)).suffix.lower() != ".npy":
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
        raise OutputError(f"{shown}: cannot write ({_one_line(exc)})") from None
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
    _check_readable(path, str(source))
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{source}: not {what} ({_one_line(exc)})") from None


def load_temperature(value: str) -> float:
    """A temperature given as a number (``"1.5"``) or as a JSON file of a saved temperature fit
    (what ``calib temperature --output t.json`` writes; an old file with only a ``"temperature"``
    key works too). Any saved calibration, Platt and vector included:
    :func:`calibrate_cli.calibrators.load_calibrator`."""
    from .calibrators import load_calibrator

    calibrator = load_calibrator(value)
    if calibrator.temperature is None:
        raise InputError(
            f"{value}: holds a {calibrator.name} calibration, not a temperature (load it with load_calibrator)"
        )
    return calibrator.temperature
