"""The layering of the code holds: every import, relative or absolute, at module level or inside
a function, flows down the layers below, and no module imports itself back through others.

    callgate.cli        the applications: use the server library and the client library
    callgate.client     the Python client: nothing of the server or the applications
    callgate.server     the server library: nothing of the client or the applications
      app, config, ... the composition root and its settings (may use everything below)
      rpc              the gRPC services: the core
      tools            the tool families: the core, the sandbox, the network, command analysis
      storage          SQLite behind the core's interfaces: the core
      sandbox          how a command or helper is confined: the core, the network
      net              addresses the server may reach, the sandboxes' egress proxy: nothing
      core             lifecycle, gate, approvals, models: command analysis, the network
      commands         shell parse, rule matching, program tables: nothing else of the server
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_ROOT = ROOT / "src"

S = "callgate.server"
# Each layer, by module prefix, and the prefixes it may import besides itself and callgate.v1.
# The longest prefix a module starts with is its layer.
LAYERS: Mapping[str, tuple[str, ...]] = {
    "callgate.cli": ("callgate.server", "callgate.client"),
    "callgate.client": (),
    S: ("callgate.server",),
    f"{S}.rpc": (f"{S}.core",),
    f"{S}.tools": (f"{S}.core", f"{S}.sandbox", f"{S}.net", f"{S}.commands"),
    f"{S}.storage": (f"{S}.core",),
    f"{S}.sandbox": (f"{S}.core", f"{S}.net"),
    f"{S}.net": (),
    f"{S}.core": (f"{S}.commands", f"{S}.net"),
    f"{S}.commands": (),
    # The settings and what only reads them sit below the composition root (`app`).
    f"{S}.config": (f"{S}.core", f"{S}.sandbox", f"{S}.net"),
    f"{S}.credentials": (f"{S}.config", f"{S}.core"),
    f"{S}.state_directory": (f"{S}.config",),
    f"{S}.metrics": (f"{S}.config", f"{S}.core"),
    f"{S}.logs": (),
}
ALWAYS_ALLOWED = ("callgate.v1",)


def module_files(package_root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module under `package_root` (symlinked packages followed): name -> (file, is
    package)."""
    modules: dict[str, tuple[Path, bool]] = {}
    for directory, _, names in os.walk(package_root, followlinks=True):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = Path(directory) / name
            parts = list(path.relative_to(package_root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            modules[".".join(parts)] = (path, is_package)
    return modules


def import_graph(modules: Mapping[str, tuple[Path, bool]], top: str) -> dict[str, set[str]]:
    """Module -> the modules of `top` it imports, relative imports resolved against its package;
    `from package import name` counts as importing the submodule when `name` is one."""
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    targets.add(submodule if submodule in modules else source)
        graph[name] = {
            target
            for target in targets
            if target != name and (target == top or target.startswith(top + "."))
        }
    return graph


def layer_of(module: str, layers: Iterable[str]) -> str | None:
    matching = [layer for layer in layers if module == layer or module.startswith(layer + ".")]
    return max(matching, key=len) if matching else None


def layering_violations(
    graph: Mapping[str, set[str]], layers: Mapping[str, tuple[str, ...]]
) -> list[str]:
    """`module imports target` for each import outside the module's own layer and the layers
    it may use (a layer's prefix covers the layers nested in it, as `callgate.server` does for
    the composition root)."""
    violations: list[str] = []
    for module, targets in sorted(graph.items()):
        layer = layer_of(module, layers)
        if layer is None:
            continue
        allowed = (layer, *layers[layer], *ALWAYS_ALLOWED)
        violations.extend(
            f"{module} imports {target}"
            for target in sorted(targets)
            if layer_of(target, allowed) is None
        )
    return violations


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(module_files(PACKAGE_ROOT), "callgate")


def test_every_import_flows_down_the_layers(graph: dict[str, set[str]]) -> None:
    assert layering_violations(graph, LAYERS) == []


def test_no_module_imports_itself_back_through_others(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_the_graph_sees_every_package(graph: dict[str, set[str]]) -> None:
    """The walk follows src/callgate's links: every layer has modules and imports to check."""
    for layer in ("callgate.cli", "callgate.client", f"{S}.core", f"{S}.commands", f"{S}.tools"):
        assert any(module.startswith(layer + ".") for module in graph), layer
    assert "callgate.server.core.gate" in graph["callgate.server.core.lifecycle"] or any(
        target.startswith(f"{S}.core.") for target in graph["callgate.server.core.lifecycle"]
    )


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    """The same checks on a made-up tree: a relative import up from the bottom layer, an
    absolute one from the server into the client, and a two-module cycle are all reported."""
    tree = {
        "callgate/__init__.py": "",
        "callgate/server/__init__.py": "",
        "callgate/server/commands/__init__.py": "",
        "callgate/server/commands/parse.py": "from ..core import gate\n",
        "callgate/server/core/__init__.py": "",
        "callgate/server/core/gate.py": "from ..commands import parse\n",
        "callgate/server/tools/__init__.py": "",
        "callgate/server/tools/a.py": "def f():\n    import callgate.client.models\n",
        "callgate/client/__init__.py": "",
        "callgate/client/models.py": "",
    }
    for name, text in tree.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    made_up = import_graph(module_files(tmp_path), "callgate")
    assert layering_violations(made_up, LAYERS) == [
        "callgate.server.commands.parse imports callgate.server.core.gate",
        "callgate.server.tools.a imports callgate.client.models",
    ]
    assert cycles(made_up) == [["callgate.server.commands.parse", "callgate.server.core.gate"]]


@pytest.mark.parametrize(
    ("imported", "forbidden"),
    [
        ("callgate.client", ("callgate.server", "callgate.cli")),
        ("callgate.server.app", ("callgate.client", "callgate.cli")),
    ],
)
def test_importing_a_library_loads_nothing_above_it(
    imported: str, forbidden: tuple[str, ...]
) -> None:
    """In a fresh interpreter, the client loads nothing of the server, and the server library
    (its composition root included) nothing of the client or the applications."""
    probe = (
        f"import sys, {imported}\n"
        f"above = {forbidden!r}\n"
        "loaded = sorted(m for m in sys.modules if m in above or m.startswith(\n"
        "    tuple(prefix + '.' for prefix in above)))\n"
        "print(','.join(loaded))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert completed.stdout.strip() == ""
