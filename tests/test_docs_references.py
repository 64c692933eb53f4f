"""The README and docs/*.md name only what exists: headings they link to, files, settings, and the statement
count of a run that tests/runs/test_runs_statements.py pins.

Each check is a function of the text, so its own test plants a violation and shows that it is reported; the
last tests run every check on the real files. What counts as a reference:
- a Markdown link `[text](target#anchor)` outside code blocks: the target exists (relative to the linking file)
  and, for a Markdown target, has a heading with that anchor (GitHub's rule: lower case, punctuation dropped,
  spaces to hyphens, `-1`, `-2` for repeated headings);
- a path starting with one of the repository's folders (`docs/`, `src/`, `scripts/`, `tests/`, ...), anywhere,
  code blocks included; `path::name` also needs `def name` in that file;
- a file name in backticks (`flow.py`, `runs/store.py`): the end of some file's path in the repository;
- an UPPER_CASE name with an underscore: a field of `Settings` (as its environment variable), an AG-UI event
  type, a constant defined in src/, or one of the few names in ELSEWHERE (each checked to occur where it says);
- "N statements" after "full run" or "short-circuit"/"direct run": the number the pinning test asserts.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
from ag_ui.core import EventType
from tests.support.settings_names import settings_env_names

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
STATEMENTS_TEST = ROOT / "tests" / "runs" / "test_runs_statements.py"
TOP_FOLDERS = ("docs", "src", "scripts", "tests", "config", "migrations", "docker", ".ci")
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".bench"}

# UPPER_CASE names the docs use that are not our settings, with the file that reads or defines them.
ELSEWHERE = {
    "TEST_DATABASE_URL": "tests/support/database.py",  # the test suite's PostgreSQL
    "SCHEMATHESIS_SEED": "tests/server/test_schemathesis.py",  # the seeds of the CI fuzzing run
    "BENCH_ADMIN_URL": "scripts/bench/load_kit.py",  # the benchmarks' PostgreSQL
    "BIND_ADDRESS": "docker/docker-compose.yml",  # a compose variable
    "POSTGRES_PASSWORD": "docker/docker-compose.yml",
    "AGENT_RUNTIME_PORT": "docker/docker-compose.yml",  # the compose service's host port
    "PIP_INDEX_URL": "docker/Dockerfile",  # a build argument
    "UV_PYTHON": "pyproject.toml",  # uv's interpreter choice (pyproject sets python-downloads)
    "PYENV_VERSION": "pyproject.toml",
    "CREWAI_DISABLE_TELEMETRY": "src/agent_runtime/engine/flow/crewai/env.py",  # set for CrewAI before its import
    "OTEL_SDK_DISABLED": "src/agent_runtime/engine/flow/crewai/env.py",  # deliberately not set
    "DIRECT_EXECUTION": "src/agent_runtime/engine/flow/crewai/flow.py",  # the intent stage's routes
    "BACKEND_AGENT_TOKEN": "config/tools.yaml",  # the example tool's header, read from the environment
    "RECALLED_MEMORIES_JSON": "src/agent_runtime/engine/user_memories/block.py",  # the recall block's markers
    "NEEDS_EXECUTION": "src/agent_runtime/engine/flow/crewai/flow.py",
    "PLAYGROUND_SCREENSHOT": "tests/browser/test_playground.py",  # where the browser test saves the docs' screenshot
    "RECORD_REQUESTS": "tests/runs/test_recorded_requests.py",  # writes the recorded model requests again
}
# Files of other projects that the docs name (CrewAI's and LiteLLM's sources, the benchmark peer's).
FOREIGN_FILES = {
    "agents/agent_executor.py",
    "utilities/agent_utils.py",
    "router_rust/invoke/streaming.py",
    "stub.py",
}

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(
    r"(?<![\w./-])((?:" + "|".join(re.escape(f) for f in TOP_FOLDERS) + r")/[\w./*{},-]*[\w*}/])(?:::(\w+))?"
)
BACKTICKED_FILE = re.compile(r"`([\w./-]*\w\.(?:py|md|yaml|toml|sql))`")
UPPER_NAME = re.compile(r"(?<![\w$.-])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?![\w-])")
STATEMENTS = re.compile(
    r"(?<![\w.])(\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\*{0,2} (?:SQL )?statements?\b",
    re.IGNORECASE,
)
NUMBER_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
WORDS = {word: number for number, word in enumerate(NUMBER_WORDS, 1)}


def _outside_code(text: str) -> list[str]:
    """The lines of `text` outside fenced code blocks (code lines become empty, so numbering is kept)."""
    lines, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            lines.append("")
        else:
            lines.append("" if inside else line)
    return lines


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: links reduced to their text, lower case, everything but letters,
    digits, spaces, hyphens and underscores dropped, each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _outside_code(text):
        match = HEADING.match(line)
        if match:
            base = github_anchor(match[2])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def headings(text: str) -> list[str]:
    return [m[2] for line in _outside_code(text) if (m := HEADING.match(line))]


def repo_files(root: Path) -> set[str]:
    files = set()
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in SKIP_DIRS]
        base = Path(directory).relative_to(root)
        files.update((base / name).as_posix() for name in names)
    return files


def _expand_braces(path: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", path)
    if not match:
        return [path]
    head, tail = path[: match.start()], path[match.end() :]
    return [p for part in match[1].split(",") for p in _expand_braces(head + part + tail)]


def dangling_links(doc: Path, text: str) -> list[str]:
    """Links to files that do not exist, and to headings their target does not have."""
    problems = []
    for line in _outside_code(text):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if path and not file.exists():
                problems.append(f"{target}: no such file")
                continue
            if anchor and file.suffix == ".md":
                target_text = file.read_text(encoding="utf-8") if path else text
                if anchor not in anchors(target_text):
                    problems.append(f"{target}: {file.name} has no heading with the anchor #{anchor}")
    return problems


def dangling_paths(text: str, root: Path, files: Iterable[str]) -> list[str]:
    """Repository paths that name nothing, `path::name` whose file defines no `name`, and backticked file
    names that are the end of no file's path."""
    problems = []
    for match in PATH.finditer(text):
        written, name = match[1], match[2]
        for path in _expand_braces(written.rstrip("/")):
            hits = list(root.glob(path)) if "*" in path else [root / path] if (root / path).exists() else []
            if not hits:
                problems.append(f"{written}: no such file or folder")
                break
            if name and hits[0].is_file():
                source = hits[0].read_text(encoding="utf-8")
                if not re.search(rf"^\s*(async\s+)?def {re.escape(name)}\b|^class {re.escape(name)}\b", source, re.M):
                    problems.append(f"{written}::{name}: {path} defines no {name}")
    for written in BACKTICKED_FILE.findall(text):
        if written.startswith(TOP_FOLDERS) or written in FOREIGN_FILES:
            continue  # the first kind is checked above
        if not any(f == written or f.endswith("/" + written) for f in files):
            problems.append(f"`{written}`: no file of the repository ends with this path")
    return problems


def src_constants(root: Path) -> set[str]:
    names: set[str] = set()
    for path in (root / "src").rglob("*.py"):
        names.update(re.findall(r"^\s*([A-Z][A-Z0-9_]*)\s*(?::[^=\n]+)?=", path.read_text(encoding="utf-8"), re.M))
    return names


def unknown_names(text: str, known: Iterable[str]) -> list[str]:
    """UPPER_CASE names with an underscore that are not settings nor anything else we know of."""
    allowed = set(known)
    return sorted({name for name in UPPER_NAME.findall(text) if name not in allowed})


def known_names(root: Path) -> set[str]:
    return settings_env_names() | {e.value for e in EventType} | src_constants(root) | set(ELSEWHERE)


def pinned_statement_counts(test_source: str) -> dict[str, int]:
    """What the pinning test asserts: the length of the list each kind of run is compared with
    (`assert full == [...]`, `assert direct == [...]`)."""
    counts = {}
    for node in ast.walk(ast.parse(test_source)):
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare):
            left, (right, *_) = node.test.left, node.test.comparators
            if isinstance(left, ast.Name) and left.id in ("full", "direct") and isinstance(right, ast.List):
                counts[left.id] = len(right.elts)
    return counts


def statement_claims(text: str) -> list[tuple[str, int, str]]:
    """(kind, number, excerpt) for each "N statements" that follows a mention of a full or a direct run in the
    same paragraph (the nearest mention before it decides); counts of anything else are not claims."""
    claims = []
    for paragraph in re.split(r"\n\s*\n", text):
        flat = " ".join(paragraph.split())
        for match in STATEMENTS.finditer(flat):
            before = flat[max(0, match.start() - 160) : match.start()].lower()
            full, direct = before.rfind("full run"), max(before.rfind("short-circuit"), before.rfind("direct run"))
            if full < 0 and direct < 0:
                continue
            word = match[1].lower()
            number = int(word) if word.isdigit() else WORDS[word]
            excerpt = flat[max(0, match.start() - 60) : match.end()]
            claims.append(("full" if full > direct else "direct", number, excerpt))
    return claims


def wrong_statement_counts(text: str, pinned: dict[str, int]) -> list[str]:
    return [
        f"{excerpt!r}: the test pins {pinned[kind]} for a {kind} run"
        for kind, number, excerpt in statement_claims(text)
        if number != pinned[kind]
    ]


def missing_settings(configuration: str) -> list[str]:
    return sorted(name for name in settings_env_names() if not re.search(rf"`{name}`", configuration))


# ---------------------------------------------------------------- each check reports a planted violation


def test_github_anchors_follow_githubs_rule() -> None:
    text = "# Models, thinking and prices\n## `agent-runtime serve`\n```\n# not a heading\n```\n## Limits\n## Limits\n"
    assert anchors(text) == {"models-thinking-and-prices", "agent-runtime-serve", "limits", "limits-1"}


def test_a_link_to_a_missing_heading_or_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "api.md").write_text("# API\n## Resuming a stream\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    good = "[a](docs/api.md#resuming-a-stream) [b](#quickstart) [c](https://example.com/#x)\n# Quickstart\n"
    assert dangling_links(readme, good) == []
    bad = "[a](docs/api.md#resuming-the-stream) [b](#start) [c](docs/gone.md)\n```\n[d](docs/in-code.md)\n```\n"
    assert dangling_links(readme, bad) == [
        "docs/api.md#resuming-the-stream: api.md has no heading with the anchor #resuming-the-stream",
        "#start: README.md has no heading with the anchor #start",
        "docs/gone.md: no such file",
    ]


def test_a_missing_file_test_or_short_file_name_is_reported(tmp_path: Path) -> None:
    (tmp_path / "tests" / "runs").mkdir(parents=True)
    (tmp_path / "tests" / "runs" / "test_a.py").write_text("async def test_one():\n    pass\n", encoding="utf-8")
    (tmp_path / "src" / "pkg" / "runs" / "lease").mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "runs" / "lease" / "store.py").write_text("", encoding="utf-8")
    files = repo_files(tmp_path)
    good = "see tests/runs/test_a.py::test_one, `tests/runs/`, `lease/store.py`, `store.py` and tests/*/test_a.py."
    assert dangling_paths(good, tmp_path, files) == []
    bad = "tests/runs/test_b.py, tests/runs/test_a.py::test_two, `runs/store.py`, src/pkg/runs/{lease,turn}/"
    assert dangling_paths(bad, tmp_path, files) == [
        "tests/runs/test_b.py: no such file or folder",
        "tests/runs/test_a.py::test_two: tests/runs/test_a.py defines no test_two",
        "src/pkg/runs/{lease,turn}/: no such file or folder",
        "`runs/store.py`: no file of the repository ends with this path",
    ]


def test_a_setting_that_is_not_a_field_is_reported() -> None:
    known = known_names(ROOT)
    text = (
        "Set `MEMORY_MAX_TOKENS` and DEEPSEEK_API_KEY; RUN_STARTED comes first; `$RUN_ID` and gc.DEBUG_SAVEALL are"
        " not settings; `MEMORY_WINDOW_SIZE` is gone."
    )
    assert unknown_names(text, known) == ["MEMORY_WINDOW_SIZE"]


def test_the_names_allowed_elsewhere_occur_where_they_are_said_to() -> None:
    for name, file in ELSEWHERE.items():
        assert name in (ROOT / file).read_text(encoding="utf-8"), f"{name} no longer occurs in {file}"
    assert not set(ELSEWHERE) & settings_env_names(), "a setting needs no entry in ELSEWHERE"


def test_the_pinned_statement_counts_are_read_from_the_test() -> None:
    source = "def test_x():\n    assert full == ['start', 'finish', 'events']\n    assert direct == ['start']\n"
    assert pinned_statement_counts(source) == {"full": 3, "direct": 1}
    assert set(pinned_statement_counts(STATEMENTS_TEST.read_text(encoding="utf-8"))) == {"full", "direct"}


def test_a_statement_count_that_disagrees_with_the_test_is_reported() -> None:
    pinned = {"full": 7, "direct": 5}
    text = (
        "A full run with one tool call costs 7 statements; a short-circuit run 5 statements.\n\n"
        "A full run costs six statements.\n\nA direct run is **4** statements.\n\nA cut costs two statements more."
    )
    assert wrong_statement_counts(text, pinned) == [
        "'A full run costs six statements': the test pins 7 for a full run",
        "'A direct run is **4** statements': the test pins 5 for a direct run",
    ]


def test_a_setting_missing_from_the_configuration_page_is_reported() -> None:
    documented = " ".join(f"`{name}`" for name in settings_env_names() if name != "RUN_TIMEOUT_SECONDS")
    assert missing_settings(documented) == ["RUN_TIMEOUT_SECONDS"]


# ---------------------------------------------------------------- the real files


@functools.cache
def _real_files() -> frozenset[str]:
    return frozenset(repo_files(ROOT))


@functools.cache
def _real_names() -> frozenset[str]:
    return frozenset(known_names(ROOT))


def _ids(paths: Iterable[Path]) -> list[str]:
    return [path.relative_to(ROOT).as_posix() for path in paths]


@pytest.mark.parametrize("doc", DOC_FILES, ids=_ids(DOC_FILES))
def test_links_point_at_files_and_headings_that_exist(doc: Path) -> None:
    assert dangling_links(doc, doc.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("doc", DOC_FILES, ids=_ids(DOC_FILES))
def test_named_files_exist(doc: Path) -> None:
    assert dangling_paths(doc.read_text(encoding="utf-8"), ROOT, _real_files()) == []


@pytest.mark.parametrize("doc", DOC_FILES, ids=_ids(DOC_FILES))
def test_named_settings_are_settings(doc: Path) -> None:
    assert unknown_names(doc.read_text(encoding="utf-8"), _real_names()) == []


@pytest.mark.parametrize("doc", DOC_FILES, ids=_ids(DOC_FILES))
def test_statement_counts_agree_with_the_pinning_test(doc: Path) -> None:
    pinned = pinned_statement_counts(STATEMENTS_TEST.read_text(encoding="utf-8"))
    assert wrong_statement_counts(doc.read_text(encoding="utf-8"), pinned) == []


def test_the_docs_state_the_statement_count_of_a_full_run() -> None:
    claims = [claim for doc in DOC_FILES for claim in statement_claims(doc.read_text(encoding="utf-8"))]
    assert any(kind == "full" for kind, _, _ in claims), "no doc states what a full run costs: the check is idle"


def test_every_setting_is_on_the_configuration_page() -> None:
    assert missing_settings((ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")) == []


def test_src_comments_link_to_docs_and_headings_that_exist() -> None:
    """`(docs/benchmarks.md, "Conversation cost")` in a comment: the file exists and has a heading that starts so."""
    problems = []
    for path in (ROOT / "src").rglob("*.py"):
        text = " ".join(path.read_text(encoding="utf-8").split()).replace(" # ", " ")
        for file, section in re.findall(r"(docs/[\w-]+\.md)(?:,? \"([^\"]+)\")?", text):
            target = ROOT / file
            if not target.is_file():
                problems.append(f"{path.relative_to(ROOT)}: {file}: no such file")
            elif section and not any(h.startswith(section) for h in headings(target.read_text(encoding="utf-8"))):
                problems.append(f'{path.relative_to(ROOT)}: {file} has no heading "{section}"')
    assert problems == []
