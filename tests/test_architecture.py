"""The house rules of docs/contributing.md, read from the source with ``ast``: at most 10 modules at the
package root, no import circle (every import counts, also those inside functions), and no private name
imported from another module (a compiled extension only through its one handle)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "calibrate_cli"
#: private modules and who may import them: the compiled extensions have one handle each
PRIVATE_MODULE_HANDLES = {
    "calibrate_cli._version": {"calibrate_cli"},
    "calibrate_cli._console": {"calibrate_cli"},
    "calibrate_cli.engine._ckernel": {"calibrate_cli.engine.kernels"},
    "calibrate_cli.data._sigbus": {"calibrate_cli.data.pages"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    for so in PACKAGE.rglob("*.so"):  # compiled extensions are modules too
        found.setdefault(module_name(so.with_name(so.name.split(".")[0] + ".py")), so)
    return found


def type_checking_only(node: ast.AST, parents: dict) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports(name: str, path: Path, known: set[str]):
    """(target module, imported name or None, line) for every import in ``path``."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("calibrate_cli"):
                    yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("calibrate_cli"):
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in known:
                    yield sub, None, node.lineno
                else:
                    yield source, alias.name, node.lineno


def graph():
    found = modules()
    known = set(found)
    edges: dict[str, set[str]] = {m: set() for m in found}
    private = []
    for name, path in found.items():
        if path.suffix != ".py":
            continue
        for target, imported, line in imports(name, path, known):
            if target != name and target in known:
                edges[name].add(target)
            leaf = target.rsplit(".", 1)[1] if "." in target else target
            if imported is None and leaf.startswith("_") and name not in PRIVATE_MODULE_HANDLES.get(target, ()):
                private.append(f"{name}:{line} imports the private module {target}")
            if imported and imported.startswith("_") and not imported.startswith("__") and target != name:
                private.append(f"{name}:{line} imports the private name {target}.{imported}")
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def without_package_inits(edges):
    """A package's ``__init__`` re-exporting its own submodules is not a circle: drop the arrows from a
    package to its own submodules (the arrows from a submodule up to its package stay)."""
    return {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in edges.items()}


def test_package_root_holds_at_most_ten_modules():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 10, root


def test_no_import_circle():
    edges, _ = graph()
    assert cycles(without_package_inits(edges)) == []


def test_no_private_name_imported_across_modules():
    _, private = graph()
    assert private == []


def test_the_checker_sees_a_circle_and_a_private_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
