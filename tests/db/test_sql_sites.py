"""SQL lives in repositories: a SQL literal anywhere in `src/` outside a `repository.py` or `agent_runtime/db/`
fails here (docs: ../shared/design/STYLE.md, "SQL by domain").

A literal is SQL when it starts like a statement (SELECT, INSERT, UPDATE, DELETE, WITH) and either spells that
keyword in capitals followed by more text (`SELECT 1`) or holds a clause in capitals (FROM, INTO, SET, VALUES,
RETURNING) or a `$n` parameter. Prose that starts with "Update the ..." or "with ..." is not; neither is a lone
"DELETE" (an HTTP method); docstrings are skipped. f-strings count by their constant parts, a placeholder
standing for each `{...}`. Not caught: SQL in lower case without a parameter (the house writes keywords in
capitals), and SQL glued together at run time from pieces that are not statements by themselves.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import agent_runtime

PACKAGE = Path(agent_runtime.__file__).parent
_START = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b", re.IGNORECASE)
_CAPITAL_START = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\s+\S")
_CLAUSE = re.compile(r"\b(FROM|INTO|SET|VALUES|RETURNING)\b|\$\d")


def looks_like_sql(text: str) -> bool:
    return bool(_START.match(text)) and bool(_CAPITAL_START.match(text) or _CLAUSE.search(text))


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _literals(tree: ast.Module) -> list[tuple[int, str]]:
    """Every string literal with its line: f-strings whole, their parts not again."""
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    skip = parts | _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
            found.append((node.lineno, text))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found.append((node.lineno, node.value))
    return found


def sql_sites(source: str, path: str) -> list[str]:
    """`path:line` of each SQL literal in `source`."""
    return [f"{path}:{line}" for line, text in _literals(ast.parse(source)) if looks_like_sql(text)]


def allowed(relative: Path) -> bool:
    return relative.name == "repository.py" or relative.parts[0] == "db"


def test_sql_stands_only_in_repositories_and_db() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100  # the walk found the source tree
    sites = [
        site
        for path in modules
        if not allowed(path.relative_to(PACKAGE))
        for site in sql_sites(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE)))
    ]
    assert sites == []


def test_the_repositories_hold_sql_the_check_recognises() -> None:
    """The check would pass on an empty net: the repositories' statements must be seen as SQL."""
    repositories = sorted(PACKAGE.rglob("repository.py"))
    assert len(repositories) >= 8
    without = [str(p) for p in repositories if not sql_sites(p.read_text(encoding="utf-8"), str(p))]
    assert without == []


def test_a_planted_sql_literal_is_reported_and_prose_is_not() -> None:
    planted = '''
"""Module docstring: SELECT the best WITH care, UPDATE SET ..."""

PROSE = ("Update the profile bio", "with arguments that are not a JSON object", "Delete the session from the list")
METHODS = ("DELETE", "GET")


async def f(pool, user_id, table):
    """SELECT * FROM docstrings is prose."""
    await pool.fetch("SELECT id FROM agent_chat_sessions WHERE user_id = $1", user_id)
    await pool.fetchval("SELECT 1")
    await pool.execute(f"""
        UPDATE {table} SET title = $2 WHERE id = $1""")
    await pool.execute("delete from x where id = $1")
'''
    assert sql_sites(planted, "engine/x.py") == ["engine/x.py:10", "engine/x.py:11", "engine/x.py:12", "engine/x.py:14"]


def test_repositories_and_db_are_allowed_anywhere_else_is_not() -> None:
    assert allowed(Path("engine/runs/ledger/repository.py"))
    assert allowed(Path("db/pool.py"))
    assert not allowed(Path("engine/runs/ledger/store.py"))
    assert not allowed(Path("engine/db_helpers.py"))
