"""The import graph follows the data flow: trainer -> record -> format -> analysis -> report/CLI, with no cycles.

Every `import` of our own modules is read from the source (module level and inside functions: a lazy import is
still a dependency), so the checks see the code as written, not what one run happened to load.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainer", "gpt2trace", "analysis")

# Which of our layers each layer may import (its own layer always). A layer is a package or subpackage; the
# longest matching prefix decides. `gpt2trace` alone is the package's front door (`gpt2trace.load`).
ALLOWED = {
    "trainer": set(),
    "gpt2trace.format": set(),
    "gpt2trace.testing": {"gpt2trace.format"},
    "gpt2trace.record": {"gpt2trace.format", "trainer"},
    "gpt2trace.run": {"gpt2trace.record", "gpt2trace.format", "trainer"},
    "gpt2trace.interop": {"gpt2trace.format"},
    "gpt2trace": {"gpt2trace.interop"},
    "gpt2trace.__main__": {"gpt2trace.cli"},
    "analysis": {"gpt2trace.format"},
    "gpt2trace.report": {"analysis", "gpt2trace.format", "gpt2trace.interop"},
    "gpt2trace.cli": {"analysis", "gpt2trace", "gpt2trace.format", "gpt2trace.interop", "gpt2trace.record",
                      "gpt2trace.report", "gpt2trace.run", "trainer"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Our modules that `name` imports (`from a import b` counts as a.b when a.b is a module, else a)."""
    out = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] in PACKAGES)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                out.add(f"{mod}.{alias.name}" if f"{mod}.{alias.name}" in known else mod)
    return {m for m in out if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {name: _imports(name, path, known) for name, path in mods.items()}


def _layer(module: str) -> str:
    return max((layer for layer in ALLOWED if module == layer or module.startswith(layer + ".")), key=len)


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}          # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for dep in sorted(graph[m]):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_layers_import_only_their_own_layer_or_below():
    bad = []
    for module, deps in sorted(_graph().items()):
        layer = _layer(module)
        for dep in sorted(deps):
            dep_layer = _layer(dep)
            if dep_layer != layer and dep_layer not in ALLOWED[layer]:
                bad.append(f"{module} imports {dep} ({layer} may not import {dep_layer})")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_imports():
    """The graph is not empty by accident: known edges are found, lazy (function-level) ones included."""
    graph = _graph()
    assert "gpt2trace.format.schema" in graph["gpt2trace.format.reader"]
    assert "gpt2trace.interop.loader" in graph["gpt2trace"]            # imported inside gpt2trace.load()
    assert _layer("gpt2trace.format.reader") == "gpt2trace.format" and _layer("gpt2trace") == "gpt2trace"


@pytest.mark.parametrize("module", ["gpt2trace", "analysis", "analysis.analyze", "gpt2trace.format.reader",
                                    "gpt2trace.interop.loader"])
def test_reading_traces_does_not_import_the_trainer_or_numba(module):
    code = f"import sys, {module}; print(sorted(m for m in ('trainer', 'numba') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", f"import {module} loaded {out.stdout.strip()}"


def _third_party_imports() -> dict[str, str]:
    """Top-level third-party modules our packages import (module -> one file importing it)."""
    stdlib = set(sys.stdlib_module_names)
    out = {}
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for n in names:
                top = n.split(".")[0]
                if top not in stdlib and top not in PACKAGES and top != "__future__":
                    out.setdefault(top, str(path.relative_to(ROOT)))
    return out


def test_every_runtime_import_is_declared():
    """A module our packages import must come from a distribution pyproject.toml declares as a dependency
    (CI also runs the demo in a fresh virtual environment, which catches the same at run time)."""
    import re
    from importlib.metadata import packages_distributions

    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    declared = {re.split(r"[<>=!;\[ ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in deps}
    dists = packages_distributions()
    missing = []
    for module, where in sorted(_third_party_imports().items()):
        owners = {d.lower().replace("_", "-") for d in dists.get(module, [])}
        if not owners & declared:
            missing.append(f"{module} (imported by {where}; from {sorted(owners) or 'no installed distribution'})")
    assert not missing, "not declared in pyproject.toml dependencies: " + ", ".join(missing)


@pytest.mark.parametrize("sample,jits", [("tiny_2threads", False), ("tiny_2ranks_overlap", True)])
def test_analyze_imports_numba_only_for_a_replay(sample, jits):
    """One rank has no MPI calls to replay, so analyzing it never loads Numba; two ranks do."""
    code = ("import sys, gpt2trace; from analysis.analyze import analyze; "
            f"analyze(gpt2trace.load('sample_traces/{sample}.parquet')); print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == str(jits)
