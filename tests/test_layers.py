"""The layers, guarded: every import of the package (module-level and inside functions, plus
the tool table's handler strings) is parsed with `ast` and checked against the layers, and the
graph between packages must have no cycle. A module's layer is its top-level package: the
folder tree is the layer diagram (`LAYERS` orders the packages), and a module cannot sit
loose beside them."""

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "agent_run"
TOOL_TABLE = PACKAGE / "tools" / "table.py"
ARCHITECTURE = SRC.parent / "docs" / "architecture.md"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(tree: ast.AST, module: str) -> set[str]:
    """Every project module `tree` names in an import statement anywhere (function bodies too),
    resolved to absolute names; `from X import Y` counts X and, when it is a module, X.Y."""
    found: set[str] = set()
    package = module if module_is_package(module) else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "agent_run" or name.startswith("agent_run.")}


def module_is_package(module: str) -> bool:
    return (SRC / Path(*module.split(".")) / "__init__.py").exists()


def existing(name: str) -> str | None:
    """The project module `name` refers to (a `from pkg import function` names no module)."""
    path = SRC / Path(*name.split("."))
    if path.with_suffix(".py").exists() or (path / "__init__.py").exists():
        return name
    return None


def handler_strings(tree: ast.AST) -> set[str]:
    """Modules named by handler strings ("agent_run.x.y:function") and by the module-name
    constants they are built from ("agent_run.x.y")."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.split(":")[0]
            if text.startswith("agent_run.") and " " not in text and existing(text):
                names.add(text)
    return names


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        names = imported_modules(tree, module)
        if path == TOOL_TABLE:
            names |= handler_strings(tree)
        graph[module] = {m for n in names if (m := existing(n)) and m != module}
    return graph


GRAPH = import_graph()


def package_of(module: str) -> str:
    """`agent_run.store.db` -> `store`; the package's own `__init__` and `__main__` -> `agent_run`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] != "__main__" else "agent_run"


# The layers, lowest first. The top-level packages of src/agent_run/ are the layers' members,
# so the folder tree is the layer diagram. A package imports only packages of lower layers, or
# of its own layer without a cycle. docs/architecture.md draws the same order.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("domain",),
    ("system",),
    ("store",),
    ("engines",),
    ("config",),
    ("worker_tools", "supervisor"),
    ("executors",),
    ("services",),
    ("batches",),
    ("tools",),
    ("rpc", "text"),
    ("daemon",),
    ("mcp", "web", "cli"),
)
LAYER_OF = {package: rank for rank, members in enumerate(LAYERS) for package in members}
# Front-ends reach the daemon through `rpc.client` and never open the database.
FRONT_END_PACKAGES = ("rpc", "text", "mcp", "web", "cli")


def is_front_end(module: str) -> bool:
    return package_of(module) in FRONT_END_PACKAGES


def tree_packages() -> set[str]:
    return {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}


def test_the_folder_tree_is_the_layers():
    """Every top-level package is in one layer, and no module sits loose beside them."""
    assert tree_packages() == set(LAYER_OF), "a new top-level package needs its place in LAYERS"
    loose = {p.name for p in PACKAGE.glob("*.py")} - {"__init__.py", "__main__.py"}
    assert loose == set(), "put each module in the package of its layer"


def test_architecture_md_draws_the_same_layers():
    drawn = " < ".join(" ".join(members) for members in LAYERS)
    assert drawn in ARCHITECTURE.read_text(), f"docs/architecture.md should state: {drawn}"


def test_no_package_imports_a_higher_layer():
    def upward(module: str, target: str) -> bool:
        low, high = package_of(module), package_of(target)
        return "agent_run" not in (low, high) and LAYER_OF[high] > LAYER_OF[low]

    assert violations(upward) == []


def test_every_client_of_the_daemon_is_a_front_end():
    # Sharpness: the front-end rules are only as good as this set.
    front_ends = {m for m in GRAPH if is_front_end(m)}
    assert {"agent_run.cli.main", "agent_run.mcp.server", "agent_run.web.pages"} <= front_ends
    clients = {m for m, targets in GRAPH.items() if "agent_run.rpc.client" in targets}
    assert sorted(m for m in clients if not is_front_end(m) and package_of(m) != "daemon") == []


def in_package(module: str, *packages: str) -> bool:
    return package_of(module) in packages


def violations(rule) -> list[str]:
    return sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        for target in targets
        if rule(module, target)
    )


def test_the_graph_sees_function_level_imports_and_handler_strings():
    # Sharpness: a parser that missed these would pass every rule below vacuously.
    assert "agent_run.services.agents" in GRAPH["agent_run.tools.table"]  # a handler string
    assert "agent_run.batches.service" in GRAPH["agent_run.tools.table"]
    assert (
        "agent_run.system.git" in GRAPH["agent_run.worker_tools.server"]
    )  # imported inside a function
    assert "agent_run.store.db" in GRAPH["agent_run.supervisor.run"]
    assert len(GRAPH) > 80


def test_front_ends_never_import_the_store():
    assert violations(lambda m, t: is_front_end(m) and in_package(t, "store")) == []


def test_domain_imports_nothing_of_the_project():
    assert violations(lambda m, t: in_package(m, "domain") and not in_package(t, "domain")) == []


def test_the_process_table_imports_nothing_of_the_project():
    """`processes` sits beside the domain: the supervisor, the daemon and reconciliation use it."""
    assert (
        violations(lambda m, t: in_package(m, "processes") and not in_package(t, "processes")) == []
    )


def test_engines_import_no_supervisor_services_or_batches():
    assert (
        violations(
            lambda m, t: (
                in_package(m, "engines") and in_package(t, "supervisor", "services", "batches")
            )
        )
        == []
    )


def test_supervisor_imports_no_services_batches_or_front_ends():
    assert (
        violations(
            lambda m, t: (
                in_package(m, "supervisor")
                and (in_package(t, "services", "batches", "tools") or is_front_end(t))
            )
        )
        == []
    )


def test_executors_import_no_services_batches_or_front_ends():
    """The executor seam sits between the supervisor and the services (docs/architecture.md)."""
    assert GRAPH["agent_run.executors.mirror"]  # sharpness: the package is in the graph
    assert (
        violations(
            lambda m, t: (
                in_package(m, "executors")
                and (in_package(t, "services", "batches", "tools") or is_front_end(t))
            )
        )
        == []
    )


def test_worker_tools_import_no_batches_or_services():
    assert (
        violations(
            lambda m, t: (
                in_package(m, "worker_tools") and in_package(t, "batches", "services", "supervisor")
            )
        )
        == []
    )


def package_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan), each sorted."""
    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        for target in targets:
            low, high = package_of(module), package_of(target)
            # The root (`__version__`, `python -m agent_run`) is no layer: it is above and below all.
            if low != high and "agent_run" not in (low, high):
                edges[low].add(high)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(set(edges) | {t for ts in edges.values() for t in ts}):
        if node not in index:
            visit(node)
    return cycles


def test_no_cycle_between_packages():
    assert package_cycles(GRAPH) == []


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"agent_run.a.x": {"agent_run.b.y"}, "agent_run.b.y": {"agent_run.a.z"}}, [["a", "b"]]),
        ({"agent_run.a.x": {"agent_run.b.y"}, "agent_run.b.y": {"agent_run.c.z"}}, []),
        (
            {"agent_run.a.x": {"agent_run.a.y"}, "agent_run.a.y": {"agent_run.a.x"}},
            [],
        ),  # inside a package
    ],
)
def test_cycle_finder_finds_cycles_and_only_cycles(graph, expected):
    assert package_cycles(graph) == expected


def test_the_old_runtime_cycle_would_be_caught():
    """supervisor -> worker_tools -> batches -> services -> supervisor, as it was."""
    graph = {
        **GRAPH,
        "agent_run.worker_tools.server": GRAPH["agent_run.worker_tools.server"]
        | {"agent_run.batches.scheduler"},
    }
    assert any(
        {"supervisor", "worker_tools", "batches", "services"} <= set(c)
        for c in package_cycles(graph)
    )
