"""The layers of pyproject.toml's import-linter contract, checked over every import, also those import-linter
cannot see: imports inside functions and ``TYPE_CHECKING`` blocks, modules named in strings
(``importlib.import_module``, ``python -m``, entry points), and test modules importing each other."""
from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("autotaccl", "runners", "dashboards")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
CONTRACT = next(c for c in PYPROJECT["tool"]["importlinter"]["contracts"] if c["name"] == "autotaccl layers")
# "-m autotaccl.x", import_module("autotaccl.x"), "runners.x" strings naming a module of ours
MODULE_STRING = re.compile(r"^(autotaccl|runners|dashboards)(\.[a-z_][a-z0-9_]*)+$")


def layer_table() -> dict[str, tuple[int, bool]]:
    """Module prefix -> (layer index counted from the top, independent of its siblings)."""
    table = {}
    for index, layer in enumerate(CONTRACT["layers"]):
        independent = "|" in layer
        for name in re.split(r"[|:]", layer):
            table[name.strip()] = (index, independent)
    return table


LAYERS = layer_table()


def layer_of(module: str) -> str | None:
    """The layer entry ``module`` belongs to (the longest listed prefix), None for the package faces."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in LAYERS:
            return prefix
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, text: str | None = None) -> list[tuple[str, int, str]]:
    """(imported module, line, how) for every import statement anywhere in the file and every module string."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text, str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno, "import") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                full = ".".join(base + ([node.module] if node.module else []))
            else:
                full = node.module or ""
            found += [(full, node.lineno, "import")]
            found += [(f"{full}.{a.name}", node.lineno, "import") for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.match(node.value):
            found.append((node.value, node.lineno, "string"))
    return found


def project_files() -> list[Path]:
    return [p for root in ROOTS for p in sorted((REPO / root).rglob("*.py"))]


def violations(planted: dict[Path, str] | None = None) -> list[str]:
    """Imports that point up the layers (``planted``: extra text appended to some files, for the self-test)."""
    planted = planted or {}
    problems = []
    for path in project_files():
        source = layer_of(module_name(path))
        if source is None:
            continue
        text = path.read_text() + planted.get(path, "")
        for target, line, how in imports_of(path, text):
            dest = layer_of(target)
            if dest is None or dest == source or target.split(".")[0] not in ROOTS:
                continue
            if source.startswith(dest + ".") or dest.startswith(source + "."):
                continue
            (s_index, s_indep), (d_index, _) = LAYERS[source], LAYERS[dest]
            if d_index < s_index or (d_index == s_index and s_indep):
                problems.append(f"{path.relative_to(REPO)}:{line}: {source} -> {target} ({how})")
    return problems


def test_every_import_points_down_the_layers():
    assert violations() == []


def test_entry_points_and_scripts_name_modules_that_exist():
    targets = [PYPROJECT["project"]["scripts"]["autotaccl"]]
    for group in PYPROJECT["project"].get("entry-points", {}).values():
        targets += list(group.values())
    for target in targets:
        module = target.split(":")[0]
        path = REPO / Path(*module.split("."))
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), target


def test_every_project_module_has_a_layer():
    faces = {"autotaccl"}          # the package face re-exports the public API lazily
    unplaced = [module_name(p) for p in project_files() if layer_of(module_name(p)) is None and
                module_name(p) not in faces]
    assert unplaced == []


def test_no_two_components_import_each_other():
    """The components of ``../shared/tools/import_cycles.py`` (autotaccl's children, runners, dashboards)."""
    def component(module: str) -> str | None:
        parts = module.split(".")
        if parts[0] not in ROOTS or parts == ["autotaccl"]:
            return None
        return ".".join(parts[:2]) if parts[0] == "autotaccl" else parts[0]

    edges = defaultdict(set)
    for path in project_files():
        src = component(module_name(path))
        for target, _, how in imports_of(path):
            dst = component(target)
            if src and dst and dst != src and how == "import":
                edges[src].add(dst)

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for n in edges.get(todo.pop(), ()):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    cycles = sorted(f"{a} <-> {b}" for a in list(edges) for b in edges[a] if a in reachable(b))
    assert cycles == []


def module_cycles(planted: dict[Path, str] | None = None) -> list[list[str]]:
    """Circles of modules (files) importing each other, ``TYPE_CHECKING`` imports included; a package's
    ``__init__`` is its face and is not counted (``planted`` as in ``violations``)."""
    planted = planted or {}
    modules = {module_name(p): p for p in project_files()}
    edges = defaultdict(set)
    for name, path in modules.items():
        if path.name == "__init__.py":
            continue
        for target, _, how in imports_of(path, path.read_text() + planted.get(path, "")):
            if how == "import" and target in modules and target != name and modules[target].name != "__init__.py":
                edges[name].add(target)
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for name in sorted(modules):
        if name not in state:
            visit(name, [name])
    return cycles


def test_no_two_modules_import_each_other():
    assert module_cycles() == []


def test_the_module_check_sees_a_type_checking_import_back():
    knobs = REPO / "autotaccl" / "tuning" / "space" / "knobs.py"
    planted = "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .schema import SearchSpace\n"
    assert any("autotaccl.tuning.space.schema" in c and "autotaccl.tuning.space.knobs" in c
               for c in module_cycles({knobs: planted}))


def test_test_modules_import_no_other_test_module():
    names = {p.stem for p in (REPO / "tests").rglob("test_*.py")}
    bad = []
    for path in (REPO / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in names | {"conftest"}:
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: from {node.module}")
            elif isinstance(node, ast.Import):
                bad += [f"{path.relative_to(REPO)}:{node.lineno}: import {a.name}" for a in node.names
                        if a.name.split(".")[-1] in names | {"conftest"}]
    assert bad == []


@pytest.mark.parametrize("planted, expected", [
    ("def f():\n    from autotaccl.tuning import sweep\n", "autotaccl.sizes -> autotaccl.tuning.sweep (import)"),
    ("CMD = ['-m', 'autotaccl.commands.tune']\n", "autotaccl.sizes -> autotaccl.commands.tune (string)"),
])
def test_the_check_sees_imports_inside_functions_and_module_strings(planted, expected):
    found = violations({REPO / "autotaccl" / "sizes.py": "\n" + planted})
    assert any(v.endswith(expected) for v in found), found
