"""Mutation check: plant each curated one-line bug, run the tests that should catch it, report.

    uv run python scripts/mutants.py              # every mutant in scripts/mutants.toml
    uv run python scripts/mutants.py --list       # names, files and what each would let through
    uv run python scripts/mutants.py --only NAME  # one mutant (repeat the option for more)

The mutants live in `scripts/mutants.toml` (file, exact original text, replacement, the test files that
cover it, what the bug would let through). Each is applied in a scratch copy of the tree, never in the
checkout: `src/` is not written to, so Ctrl-C or a crash cannot leave a bug behind. The copy is imported
first (PYTHONPATH), and the script checks that it is before it trusts any result. Before the mutants, the
selected tests run once unmutated (a test already failing would make every mutant look caught); CI, where
pytest has just passed on the same tree, skips that with --no-baseline.

Exit status: 0 when every mutant was caught; 1 when one survived, its run went wrong or the baseline failed;
2 when the list itself is broken (an original text missing or not unique, i.e. the code moved under the mutant).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from mutants_zygote import CREWAI_ENV

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "scripts" / "mutants.toml"
PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider"]
ZYGOTE = ROOT / "scripts" / "mutants_zygote.py"
_FAILED_LINE = re.compile(r"^(FAILED|ERROR) (\S+)")


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    original: str
    replacement: str
    tests: tuple[str, ...]
    lets_through: str


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # caught | survived | timeout | error
    seconds: float
    detail: str


class CatalogueError(Exception):
    pass


def load_catalogue(path: Path = CATALOGUE) -> list[Mutant]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    mutants = []
    for entry in data.get("mutant", []):
        missing = {"name", "file", "original", "replacement", "tests", "lets_through"} - entry.keys()
        if missing:
            raise CatalogueError(f"{path}: mutant {entry.get('name', '?')!r} lacks {sorted(missing)}")
        mutants.append(
            Mutant(
                name=entry["name"],
                file=entry["file"],
                original=entry["original"],
                replacement=entry["replacement"],
                tests=tuple(entry["tests"]),
                lets_through=entry["lets_through"],
            )
        )
    names = [m.name for m in mutants]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise CatalogueError(f"{path}: duplicate mutant names {duplicates}")
    return mutants


def check_applies(mutants: list[Mutant], root: Path = ROOT) -> list[str]:
    """Every problem that would make a result meaningless: drifted originals, missing files or tests."""
    problems = []
    for mutant in mutants:
        target = root / mutant.file
        if not target.is_file():
            problems.append(f"{mutant.name}: {mutant.file} does not exist")
            continue
        count = target.read_text(encoding="utf-8").count(mutant.original)
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times"
            problems.append(f"{mutant.name}: original text {where} in {mutant.file} (the code moved: update it)")
        if Path(mutant.file) == CREWAI_ENV:
            problems.append(f"{mutant.name}: {mutant.file} is loaded unmutated by the zygote (mutants_zygote.py)")
        if mutant.original == mutant.replacement:
            problems.append(f"{mutant.name}: replacement equals the original")
        for test in mutant.tests:
            if not (root / test.split("::", 1)[0]).exists():
                problems.append(f"{mutant.name}: test path {test} does not exist")
    return problems


_NOT_COPIED = {
    *(".git", ".venv", ".env", ".data", "node_modules", "__pycache__"),
    *(".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"),
}


def tree_files(root: Path = ROOT) -> list[str]:
    """The checkout's files as git sees them (tracked, plus new files not ignored): uncommitted work counts.
    Without git (an unpacked archive), every file outside the usual caches and environments."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            check=True,
            capture_output=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        names = []
        for directory, subdirs, files in os.walk(root):
            subdirs[:] = [d for d in subdirs if d not in _NOT_COPIED]
            names += [str(Path(directory, f).relative_to(root)) for f in files if f not in _NOT_COPIED]
        return sorted(names)
    return [name for name in listed.split("\0") if name and (root / name).is_file()]


def make_scratch(parent: Path, index: int, files: list[str]) -> Path:
    scratch = parent / f"tree{index}"
    for name in files:
        target = scratch / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    modules = ROOT / "tests" / "conformance" / "node_modules"
    if modules.is_dir():
        (scratch / "tests" / "conformance" / "node_modules").symlink_to(modules)
    return scratch


def child_env(scratch: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(scratch / "src"), *filter(None, [env.get("PYTHONPATH")])])
    # Bytecode in the usual __pycache__ directories: the venv's are warm from the pytest run before (CI) or any
    # earlier one, and the scratch tree's from its previous mutant. (PYTHONDONTWRITEBYTECODE is common in CI
    # images: without bytecode every pytest process recompiles LiteLLM and CrewAI, ~5 s of CPU each time.) A
    # cache under PYTHONPYCACHEPREFIX instead started cold in every new clone: ~80 s more for the 95 mutants.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # Data files must come from the copy (agent_runtime/resources.py falls back to the tree the package is
    # imported from); a setting pointing elsewhere would test the unmutated migrations or config.
    for name in ("MIGRATIONS_DIR", "CONFIG_DIR", "CREWAI_CONFIG_DIR", "PRICING_FILE"):
        env.pop(name, None)
    return env


def assert_scratch_is_imported(scratch: Path) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import agent_runtime; print(agent_runtime.__file__)"],
        cwd=scratch,
        env=child_env(scratch),
        check=True,
        capture_output=True,
        text=True,
    )
    loaded = Path(probe.stdout.strip()).resolve()
    if scratch.resolve() not in loaded.parents:
        raise SystemExit(f"mutants: the scratch copy is not what Python imports ({loaded}); refusing to run")


class Worker:
    """One scratch tree; applies one mutant at a time and always puts the original text back."""

    def __init__(self, scratch: Path, time_limit: float) -> None:
        self.scratch = scratch
        self.time_limit = time_limit
        self._writes = 0
        self.zygote: asyncio.subprocess.Process | None = None
        self.child: int | None = None

    async def run(self, mutant: Mutant) -> Outcome:
        target = self.scratch / mutant.file
        original = target.read_bytes()
        stat = target.stat()
        text = original.decode("utf-8")
        target.write_text(text.replace(mutant.original, mutant.replacement, 1), encoding="utf-8")
        # Bytecode is validated by source size and mtime (whole seconds): a same-length mutant written in the
        # same second as the original could otherwise run the original's cached bytecode. Every write gets
        # an mtime of its own.
        self._writes += 1
        bumped = int(stat.st_mtime) + 10_000 + self._writes
        os.utime(target, (bumped, bumped))
        started = time.monotonic()
        try:
            return await self._pytest(mutant, started)
        finally:
            target.write_bytes(original)
            os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    async def pytest(self, tests: list[str]) -> tuple[int | None, str]:
        """pytest on `tests` in this tree: (exit status, output); None when it ran past the time limit."""
        zygote = await self.start()
        assert zygote.stdin is not None and zygote.stdout is not None
        output = self.scratch.parent / f"{self.scratch.name}.out"
        request = {"args": [*PYTEST_ARGS, *tests], "output": str(output)}
        zygote.stdin.write(json.dumps(request).encode() + b"\n")
        await zygote.stdin.drain()
        self.child = int(await self._reply(zygote, "started"))
        try:
            code = int(await asyncio.wait_for(self._reply(zygote, "exited"), self.time_limit))
        except TimeoutError:
            self.kill()
            await self._reply(zygote, "exited")
            return None, ""
        finally:
            self.child = None
        return code, output.read_text(errors="replace")

    async def start(self) -> asyncio.subprocess.Process:
        """Start this worker's zygote (it preloads while the caller goes on); the running one if started."""
        if self.zygote is None:
            self.zygote = await asyncio.create_subprocess_exec(
                sys.executable,
                str(ZYGOTE),
                cwd=self.scratch,
                env=child_env(self.scratch),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        return self.zygote

    @staticmethod
    async def _reply(zygote: asyncio.subprocess.Process, word: str) -> str:
        assert zygote.stdout is not None
        line = (await zygote.stdout.readline()).decode().split()
        if len(line) != 2 or line[0] != word:
            raise RuntimeError(f"mutants: the zygote said {line!r} where {word!r} was expected (did it die?)")
        return line[1]

    async def _pytest(self, mutant: Mutant, started: float) -> Outcome:
        code, text = await self.pytest(list(mutant.tests))
        seconds = time.monotonic() - started
        if code is None:
            return Outcome(mutant, "timeout", seconds, f"no result after {self.time_limit:.0f} s")
        failed = [m.group(2) for m in map(_FAILED_LINE.match, text.splitlines()) if m]
        if code == 1:
            return Outcome(mutant, "caught", seconds, failed[0] if failed else "tests failed")
        if code == 0:
            return Outcome(mutant, "survived", seconds, "every selected test passed")
        return Outcome(mutant, "error", seconds, f"pytest exit {code}:\n{text[-3000:]}")

    def kill(self) -> None:
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.child, signal.SIGKILL)

    async def close(self) -> None:
        self.kill()
        if self.zygote is not None and self.zygote.returncode is None:
            self.zygote.kill()
            await self.zygote.wait()


class BaselineFailedError(Exception):
    """The selected tests fail on the unmutated tree: every mutant would look caught."""


def selected_tests(mutants: list[Mutant]) -> list[str]:
    """Every test the mutants name, once (a node inside a file that is selected whole is dropped)."""
    chosen = list(dict.fromkeys(t for m in mutants for t in m.tests))
    whole = {t for t in chosen if "::" not in t}
    return [t for t in chosen if "::" not in t or t.split("::", 1)[0] not in whole]


async def run_all(
    mutants: list[Mutant], jobs: int, time_limit: float, parent: Path, *, baseline: bool
) -> list[Outcome]:
    files = tree_files()
    workers = [Worker(make_scratch(parent, i, files), time_limit) for i in range(min(jobs, len(mutants)))]
    for worker in workers:
        assert_scratch_is_imported(worker.scratch)
        await worker.start()
    if baseline:
        started = time.monotonic()
        code, text = await workers[0].pytest(selected_tests(mutants))
        if code != 0:
            raise BaselineFailedError(text[-4000:] if code is not None else f"no result after {time_limit:.0f} s")
        print(f"  baseline: the selected tests pass unmutated ({time.monotonic() - started:.0f} s)", flush=True)
    queue: asyncio.Queue[Mutant] = asyncio.Queue()
    for mutant in mutants:
        queue.put_nowait(mutant)
    outcomes: list[Outcome] = []

    async def drain(worker: Worker) -> None:
        while not queue.empty():
            mutant = queue.get_nowait()
            outcome = await worker.run(mutant)
            outcomes.append(outcome)
            print(f"  {outcome.status:<8} {outcome.seconds:6.1f} s  {mutant.name}", flush=True)

    try:
        await asyncio.gather(*(drain(w) for w in workers))
    finally:
        for worker in workers:
            await worker.close()
    order = {m.name: i for i, m in enumerate(mutants)}
    return sorted(outcomes, key=lambda o: order[o.mutant.name])


def print_table(outcomes: list[Outcome], wall: float) -> None:
    width = max(len(o.mutant.name) for o in outcomes)
    print(f"\n{'mutant':<{width}}  {'result':<8}  {'seconds':>7}  caught by / detail")
    for o in outcomes:
        detail = o.detail.splitlines()[0] if o.detail else ""
        print(f"{o.mutant.name:<{width}}  {o.status:<8}  {o.seconds:7.1f}  {detail}")
    counts = {s: sum(o.status == s for o in outcomes) for s in ("caught", "timeout", "survived", "error")}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    print(f"\n{len(outcomes)} mutants: {summary}; wall time {wall:.0f} s")
    for o in outcomes:
        if o.status in ("survived", "error"):
            print(f"\n{o.status.upper()}: {o.mutant.name} ({o.mutant.file})")
            print(f"  would let through: {o.mutant.lets_through}")
            print(f"  tests run: {' '.join(o.mutant.tests)}")
            if o.status == "error":
                print(o.detail)


def print_list(mutants: list[Mutant]) -> None:
    width = max(len(m.name) for m in mutants)
    for m in mutants:
        print(f"{m.name:<{width}}  {m.file}\n{'':<{width}}  lets through: {m.lets_through}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this mutant (repeatable)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once, each in its own copy (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant before it is killed")
    parser.add_argument("--catalogue", type=Path, default=CATALOGUE, help="the mutant list (TOML)")
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="skip running the selected tests unmutated first (CI: pytest has just passed on the same tree)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        mutants = load_catalogue(args.catalogue)
    except (CatalogueError, tomllib.TOMLDecodeError) as exc:
        print(f"mutants: {exc}", file=sys.stderr)
        return 2
    if args.only:
        unknown = sorted(set(args.only) - {m.name for m in mutants})
        if unknown:
            print(f"mutants: unknown names {unknown} (see --list)", file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m.name in args.only]
    problems = check_applies(mutants)
    if problems:
        print("mutants: the list does not apply to this tree:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    if args.list:
        print_list(mutants)
        return 0
    if not mutants:
        print("mutants: nothing to run", file=sys.stderr)
        return 2
    print(f"mutants: {len(mutants)} to run, {args.jobs} at a time, each in a scratch copy of the tree", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="agent-runtime-mutants-") as parent:
        try:
            outcomes = asyncio.run(
                run_all(mutants, args.jobs, args.timeout, Path(parent), baseline=not args.no_baseline)
            )
        except BaselineFailedError as exc:
            print(f"mutants: the selected tests fail without any mutant; fix them first:\n{exc}", file=sys.stderr)
            return 1
    print_table(outcomes, time.monotonic() - started)
    return 0 if all(o.status in ("caught", "timeout") for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
