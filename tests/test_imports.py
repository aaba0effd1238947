"""The package's import graph: layers import one way (docs/README.md, "Map of the package"), no module imports
itself through others (lazily inside a function or for type checking only, too), and every module imports on
its own in a fresh interpreter."""

import ast
import re
import sys
from pathlib import Path

from . import child_process

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "loglinear"
LAYERS = ("kernels", "models", "runs", "packing", "sweeps", "protocol", "reports", "cli", "__main__")
"""Each layer imports only the layers before it; synthetics is imported by runs and the layers after it, and
checks, identity, registry and targets (plain helpers) by any."""
HELPERS = ("checks", "identity", "registry", "targets")


def module_imports(path: Path, *, typing_only: bool = True) -> set[str]:
    """The `loglinear.*` modules a file imports, at the top or inside a function; with `typing_only` False,
    imports under `if TYPE_CHECKING:` left out."""
    tree = ast.parse(path.read_text())
    skipped = set() if typing_only else {
        id(n) for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING") for n in ast.walk(node)
    }
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.update(f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}") else node.module
                         for a in node.names)
    return {n for n in names if n.startswith("loglinear.")}


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (PACKAGE / relative).with_suffix(".py").is_file() or (PACKAGE / relative / "__init__.py").is_file()


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(("loglinear", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def top(name: str) -> str:
    return name.split(".")[1] if name.count(".") else name


MODULES = sorted(module_name(p) for p in PACKAGE.rglob("*.py") if p.name != "__main__.py")
"""Every module but `__main__`, which runs the command when imported."""


def test_imports_point_one_way():
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    for path in PACKAGE.rglob("*.py"):
        here = top(module_name(path))
        for imported in module_imports(path, typing_only=False):
            there = top(imported)
            if here == there or there in HELPERS:
                continue
            if there == "synthetics":
                assert here in ("synthetics", *LAYERS[2:]), f"{path} imports {imported}"
                continue
            assert here in rank and rank[there] < rank[here], f"{path.relative_to(ROOT)} imports {imported}"


def test_the_map_states_the_layers():
    text = (ROOT / "docs" / "README.md").read_text()
    stated = re.search(r"^Imports point one way: (.*?)[,.]", text, re.M)
    assert stated, "docs/README.md states the layering"
    assert stated.group(1).split(" <- ") == list(LAYERS[:-1])


def test_the_map_names_every_module_but_the_tasks():
    """docs/README.md's map of every module by layer; synthetics' task modules (one per task) are found by name in
    synthetics/registry.py instead."""
    text = (ROOT / "docs" / "README.md").read_text().split("Every module, by layer")[1].split("```")[1]
    named = set(re.findall(r"[a-z_0-9]+\.py", text))
    unnamed = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name not in named
               and p.name not in ("__init__.py", "__main__.py") and p.parent.name != "synthetics"]
    assert unnamed == []


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (module -> the modules it imports) as a path back to its start, or None."""
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name):], name]
        if name in done:
            return None
        for nxt in sorted(graph.get(name, ())):
            if nxt != name and not name.startswith(nxt + "."):  # a package's own __init__ is not a cycle
                cycle = visit(nxt, (*path, name))
                if cycle:
                    return cycle
        done.add(name)
        return None

    return next((c for name in sorted(graph) if (c := visit(name, ()))), None)


def test_find_cycle_finds_lazy_and_typing_only_circles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"p.x": {"p"}, "p": set()}) is None


def test_no_module_imports_itself_through_others():
    """Type-checking-only and in-function imports count: a circle hidden in them still ties the modules together
    (each needs the others to be read, type-checked or moved)."""
    graph = {module_name(p): module_imports(p) for p in PACKAGE.rglob("*.py")}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_module_imports_alone():
    """Each module imported first, in an interpreter whose `loglinear` modules are all forgotten before it (third-
    party packages stay loaded: they are not under test, and importing torch once per module would take minutes)."""
    script = (
        "import importlib, sys, torch, lightning, omegaconf, scipy\n"
        "failed = []\n"
        f"for name in {MODULES!r}:\n"
        "    for loaded in [m for m in sys.modules if m == 'loglinear' or m.startswith('loglinear.')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        failed.append(f'{name}: {type(e).__name__}: {e}')\n"
        "print('\\n'.join(failed))\n"
    )
    result = child_process.run([sys.executable, "-c", script], cwd=ROOT, cpu_s=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "", result.stdout
