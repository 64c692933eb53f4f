"""Imports point one way: a module imports only from its own unit or from units in lower layers.

A unit is a top-level module or package of `agent_runtime`, a package of `agent_runtime.engine` (a domain),
or the engine's shared top-level modules together (`engine`: errors, context, text, money, ...). Units in
one layer sit side by side and import neither each other: two domains that need one small definition move
it down (docs: ../shared/design/STYLE.md, "Domains side by side"). Every import counts, also those inside
functions and under TYPE_CHECKING: a lazy import hides a cycle, it does not remove it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agent_runtime

# The allowed order, bottom first.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("resources",),
    ("settings",),
    ("logging_setup",),
    ("engine",),
    ("engine.billing",),
    ("observability",),  # a model call's metrics take billing's CostBreakdown
    ("db",),
    ("engine.llm", "engine.profiles"),
    ("engine.conversation", "engine.sessions", "engine.usage"),
    ("engine.user_memories",),  # long-term memories: the model (llm), profiles' setting, audit rows (conversation)
    ("engine.flow",),
    # The run engine's rooms: the events of a run, what a run takes in and its records (start, finish, holds,
    # leases), one model call, one turn and the AG-UI edge; `engine.runs` itself (service, job, admission, warm-up)
    # composes them.
    ("engine.runs.events",),
    ("engine.runs.request", "engine.runs.ledger"),
    ("engine.runs.gateway", "engine.runs.takeover"),
    ("engine.runs.turn", "engine.runs.agui"),
    ("engine.runs",),
    ("engine.tools_reload",),  # TOOLS_FILE's tools for the process's life: the run service takes new ones
    ("engine.runtime",),
    ("playground",),  # the page's built files and their mount
    ("api", "preflight"),
    ("cli",),
)
LAYER_OF = {unit: index for index, layer in enumerate(LAYERS) for unit in layer}
PACKAGE = Path(agent_runtime.__file__).parent


def unit_of(module: str) -> str | None:
    """The longest unit in LAYERS that `module` (dotted, without `agent_runtime.`) belongs to."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in LAYER_OF:
            return candidate
    return None


def imported_modules(source: str, module: str, *, is_package: bool) -> list[str]:
    """Every `agent_runtime` module `source` imports, without the `agent_runtime.` prefix."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = f"agent_runtime.{module}".split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from agent_runtime.engine import billing` imports the package `engine.billing`.
            found += [f"{base}.{alias.name}" for alias in node.names]
    return [name.removeprefix("agent_runtime.") for name in found if name.startswith("agent_runtime.")]


def upward_imports(source: str, module: str, *, is_package: bool = False) -> list[str]:
    unit = unit_of(module)
    assert unit is not None, f"agent_runtime.{module} is in no layer: add its unit to LAYERS"
    problems = []
    for target in imported_modules(source, module, is_package=is_package):
        target_unit = unit_of(target)
        assert target_unit is not None, f"agent_runtime.{module} imports {target}, which is in no layer"
        if target_unit != unit and LAYER_OF[target_unit] >= LAYER_OF[unit]:
            problems.append(f"{module} ({unit}) imports {target} ({target_unit})")
    return problems


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts == ("__init__",):
            continue
        found.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return found


def test_every_import_points_down() -> None:
    modules = _modules()
    assert len(modules) > 100  # the walk found the source tree
    problems = [
        problem
        for module, path in modules
        for problem in upward_imports(path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py")
    ]
    assert problems == []


def test_every_engine_package_has_its_own_layer() -> None:
    packages = {p.name for p in (PACKAGE / "engine").iterdir() if (p / "__init__.py").exists()}
    assert {f"engine.{name}" for name in packages} <= LAYER_OF.keys()
    rooms = {p.name for p in (PACKAGE / "engine" / "runs").iterdir() if (p / "__init__.py").exists()}
    assert {f"engine.runs.{name}" for name in rooms} <= LAYER_OF.keys()


def test_an_upward_or_sideways_import_is_reported() -> None:
    upward = "from agent_runtime.engine.conversation.metadata import CostSource\n"
    assert upward_imports(upward, "engine.billing.models") == [
        "engine.billing.models (engine.billing) imports engine.conversation.metadata.CostSource (engine.conversation)"
    ]
    sideways = "def f():\n    from agent_runtime.engine import sessions\n"
    assert upward_imports(sideways, "engine.conversation.store") == [
        "engine.conversation.store (engine.conversation) imports engine.sessions (engine.sessions)"
    ]
    assert upward_imports("from ..runs import store\n", "engine.billing.models") == [
        "engine.billing.models (engine.billing) imports engine.runs.store (engine.runs)"
    ]
    downward = "from agent_runtime.engine.errors import AppError\nfrom . import pricing\nfrom ..text import storable\n"
    assert upward_imports(downward, "engine.billing.models") == []


# The run engine's one public face: routes call `RunService` (`engine.runs`), never the stores it builds.
ROUTES = PACKAGE / "api" / "routes"
RUN_SERVICE = PACKAGE / "engine" / "runs" / "service.py"
STORE_CLASS_SUFFIXES = ("Store", "Keeper", "Hub", "Service")


def run_service_stores(source: str) -> set[str]:
    """The attributes `RunService.__init__` sets to a store, keeper, hub or service it builds (`self.store =
    RunStore(...)`)."""
    service = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == "RunService")
    init = next(n for n in service.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return {
        target.attr
        for node in ast.walk(init)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id.endswith(STORE_CLASS_SUFFIXES)
        for target in node.targets
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    }


def store_reaches(source: str, stores: set[str]) -> list[str]:
    """Each `<...>.runs.<store>` in `source`, with its line."""
    return sorted(
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr in stores
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "runs"
    )


def test_routes_call_the_run_service_not_its_stores() -> None:
    stores = run_service_stores(RUN_SERVICE.read_text(encoding="utf-8"))
    assert stores  # the service's stores were found
    routes = sorted(ROUTES.glob("*.py"))
    assert len(routes) > 5
    found = [f"{path.name} {reach}" for path in routes for reach in store_reaches(path.read_text("utf-8"), stores)]
    assert found == []


def test_a_route_reaching_into_a_run_store_is_reported() -> None:
    service = (
        "class RunService:\n    def __init__(self, pool):\n        self.store = RunStore(pool)\n"
        "        self.admission = Admission(4)\n        self._jobs = {}\n"
    )
    assert run_service_stores(service) == {"store"}
    route = (
        "async def f(engine, ctx):\n    await engine.runs.list_runs(ctx)\n"
        "    return await engine.runs.store.list_for_session(ctx)\n"
    )
    assert store_reaches(route, {"store"}) == ["line 3: engine.runs.store"]
