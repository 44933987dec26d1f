"""One-off: move calibrate_cli's root modules into folders and rewrite every import and reference.

Idempotent: run it again after new code lands with old import paths; it only rewrites names that
still point at an old module. Usage: python scripts/relayout.py [--move]
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = "calibrate_cli"

MOVES = {
    # engine: the pass, binning, sorting, shards, stream, devices, compiled kernels
    "binning": "engine.binning",
    "sorting": "engine.sorting",
    "class_samples": "engine.class_samples",
    "shards": "engine.shards",
    "stream": "engine.stream",
    "devices": "engine.devices",
    "parallel": "engine.parallel",
    "summary": "engine.summary",
    "kernels": "engine.kernels",
    "torch_engine": "engine.torch_pass",
    "device_eval": "engine.device_eval",
    "_fused_kernel": "engine.numba_rows",
    "_bin_kernel": "engine.numba_bins",
    "_grid_kernel": "engine.numba_grid",
    "_triton_pass": "engine.triton_pass",
    "_ckernel": "engine._ckernel",
    # data: files -> validated predictions
    "io": "data.io",
    "formats": "data.formats",
    "formats.arrays": "data.arrays",
    "formats.csvfast": "data.csvfast",
    "formats.tables": "data.tables",
    "predictions": "data.predictions",
    "probabilities": "data.probabilities",
    "pages": "data.pages",
    "number_text": "data.number_text",
    "_sigbus": "data._sigbus",
    # metrics
    "metric_registry": "metrics.registry",
    "metrics": "metrics.functional",
    "smooth_ece": "metrics.smooth_ece",
    "gates": "metrics.gates",
    # calibrators, plots, training
    "temperature": "calibrators.temperature_fit",
    "plots": "plots.diagram",
    "losses": "training.losses",
    "focal_gamma": "training.focal_gamma",
    "table": "training.paper_table",
}
FILE_MOVES = {  # source files that are not python modules
    "_ckernel.c": "engine/_ckernel.c",
    "_exp_table.h": "engine/_exp_table.h",
    "_sigbus.c": "data/_sigbus.c",
}
NEW_PACKAGES = ["engine", "data", "metrics", "plots"]

OLD = {f"{PKG}.{k}": f"{PKG}.{v}" for k, v in MOVES.items()}
NEW_NAMES = set(OLD.values())


def map_module(name: str) -> str:
    """The new dotted name of ``name`` (a module, or an attribute inside one); unchanged if not moved."""
    parts = name.split(".")
    for cut in range(len(parts), 1, -1):
        head = ".".join(parts[:cut])
        if head in NEW_NAMES:
            return name
        if head in OLD:
            return ".".join([OLD[head]] + parts[cut:])
    return name


def old_path_to_module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def package_of(module: str, is_init: bool) -> str:
    return module if is_init else module.rsplit(".", 1)[0]


def relative(target: str, package: str) -> str:
    """``target`` (absolute module) as a relative module name seen from ``package``."""
    t, p = target.split("."), package.split(".")
    common = 0
    while common < min(len(t), len(p)) and t[common] == p[common]:
        common += 1
    ups = len(p) - common
    return "." * (ups + 1) + ".".join(t[common:])


IMPORT = re.compile(r"^([ \t]*)from[ \t]+(\.+[\w.]*|calibrate_cli(?:\.[\w.]+)?)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)",
                    re.M)


def split_names(text: str):
    body = text.strip()
    if body.startswith("("):
        body = body[1:-1]
    comment = ""
    if "#" in body and not text.strip().startswith("("):
        body, comment = body.split("#", 1)
        comment = "  #" + comment
    names = []
    for line in body.split("\n"):
        line = line.split("#", 1)[0]
        for piece in line.split(","):
            piece = piece.strip()
            if piece:
                names.append(piece)
    return names, comment


def rewrite_imports(text: str, old_module: str | None, new_module: str | None, is_init: bool) -> str:
    old_pkg = package_of(old_module, is_init) if old_module else None
    new_pkg = package_of(new_module, is_init) if new_module else None

    def sub(m):
        indent, mod, names_text = m.group(1), m.group(2), m.group(3)
        if mod.startswith("."):
            if old_pkg is None:
                return m.group(0)
            dots = len(mod) - len(mod.lstrip("."))
            base = old_pkg.split(".")
            base = base[: len(base) - (dots - 1)]
            rest = mod.lstrip(".")
            absolute = ".".join(base + ([rest] if rest else []))
            style = "relative"
        else:
            absolute = mod
            style = "absolute"
        names, comment = split_names(names_text)
        if any(f"{absolute}.{n.split(' as ')[0].strip()}" in NEW_NAMES for n in names):
            return m.group(0)  # already the new layout: a submodule of a new package (metrics, plots)
        # names that are themselves moved modules
        moved = [n for n in names if f"{absolute}.{n.split(' as ')[0].strip()}" in OLD]
        emit_pkg = new_pkg if new_pkg else None

        def render(module: str) -> str:
            if style == "relative" and emit_pkg:
                return relative(module, emit_pkg)
            return module

        if not moved:
            target = map_module(absolute)
            if style == "relative" or target != absolute:
                new_mod = render(target)
                if new_mod == mod:
                    return m.group(0)
                return f"{indent}from {new_mod} import {names_text}"
            return m.group(0)
        lines = []
        rest = [n for n in names if n not in moved]
        if rest:
            lines.append(f"{indent}from {render(map_module(absolute))} import {', '.join(rest)}")
        for n in moved:
            leaf, _, alias = n.partition(" as ")
            leaf, alias = leaf.strip(), alias.strip() or leaf.strip()
            full = OLD[f"{absolute}.{leaf}"]
            parent, new_leaf = full.rsplit(".", 1)
            clause = new_leaf if new_leaf == alias else f"{new_leaf} as {alias}"
            lines.append(f"{indent}from {render(parent)} import {clause}")
        lines[-1] += comment
        return "\n".join(lines)

    return IMPORT.sub(sub, text)


DOTTED = re.compile(r"\bcalibrate_cli(?:\.\w+)+")
PATHS = re.compile(r"\bcalibrate_cli/([\w/]+)\.(py|c|h)\b")


NOW_PACKAGES = {f"{PKG}.{name}" for name in NEW_PACKAGES}


def rewrite_references(text: str) -> str:
    # an old module whose name is a package now (metrics, plots) is left alone when named alone
    text = DOTTED.sub(lambda m: m.group(0) if m.group(0) in NOW_PACKAGES else map_module(m.group(0)), text)

    def path_sub(m):
        rel, ext = m.group(1), m.group(2)
        if ext in ("c", "h"):
            key = f"{rel}.{ext}"
            return f"calibrate_cli/{FILE_MOVES[key]}" if key in FILE_MOVES else m.group(0)
        dotted = f"{PKG}." + rel.replace("/", ".")
        if dotted.endswith(".__init__"):
            return m.group(0)
        new = map_module(dotted)
        if new == dotted:
            return m.group(0)
        return "calibrate_cli/" + new[len(PKG) + 1:].replace(".", "/") + ".py"

    return PATHS.sub(path_sub, text)


def new_location(module: str) -> str:
    return map_module(module)


def main(move: bool):
    pkg_dir = ROOT / PKG
    changed = 0
    # package files: resolve relative imports from the old location, emit from the new one
    for path in sorted(pkg_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        module = old_path_to_module(path)
        is_init = path.name == "__init__.py"
        new_module = module if is_init else new_location(module)  # a new package's __init__ stays itself
        if module == "calibrate_cli.formats":  # the package becomes the module data.formats
            is_init_new = False
        else:
            is_init_new = is_init
        text = path.read_text()
        out = rewrite_imports_two(text, module, new_module, is_init, is_init_new)
        out = rewrite_references(out)
        if out != text:
            path.write_text(out)
            changed += 1
    others = [ROOT / "conftest.py", ROOT / "setup.py", ROOT / "MANIFEST.in", ROOT / "mkdocs.yml", ROOT / "README.md",
              ROOT / "pyproject.toml", ROOT / ".ci" / "run"]
    for folder in ("tests", "scripts", "benchmarks", "docs"):
        others += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".yml", ".sh", ".txt", ".json", ".toml")]
    for path in others:
        if not path.exists() or path.name == "relayout.py" or "__pycache__" in path.parts:
            continue
        text = path.read_text()
        out = rewrite_imports(text, None, None, False) if path.suffix == ".py" else text
        out = rewrite_references(out)
        if out != text:
            path.write_text(out)
            changed += 1
    print(f"rewrote {changed} files")
    if move:
        for pkg in NEW_PACKAGES:
            (pkg_dir / pkg).mkdir(exist_ok=True)
        for old, new in MOVES.items():
            src = pkg_dir / (old.replace(".", "/") + ".py")
            if old == "formats":
                src = pkg_dir / "formats" / "__init__.py"
            dst = pkg_dir / (new.replace(".", "/") + ".py")
            if src.exists():
                subprocess.run(["git", "mv", str(src), str(dst)], check=True, cwd=ROOT)
        for old, new in FILE_MOVES.items():
            src = pkg_dir / old
            if src.exists():
                subprocess.run(["git", "mv", str(src), str(pkg_dir / new)], check=True, cwd=ROOT)


def rewrite_imports_two(text, module, new_module, is_init, is_init_new):
    old_pkg = package_of(module, is_init)
    new_pkg = package_of(new_module, is_init_new)
    # reuse rewrite_imports with the two packages
    return _rewrite(text, old_pkg, new_pkg)


def _rewrite(text, old_pkg, new_pkg):
    fake_old = old_pkg + ".__x"
    fake_new = new_pkg + ".__x"
    return rewrite_imports(text, fake_old, fake_new, False)


if __name__ == "__main__":
    main("--move" in sys.argv)
