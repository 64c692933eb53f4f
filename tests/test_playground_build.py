"""The committed /playground build is the build of today's source: build.sh stores the digest of its inputs beside
the build, and an edit to scripts/playground/ without `bash scripts/playground/build.sh` fails here."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "scripts" / "playground"
BUILT_FROM = ROOT / "src" / "agent_runtime" / "playground" / "static" / "source.sha256"


def _digest(root: Path) -> str:
    digest: str = runpy.run_path(str(SOURCE / "digest.py"))["source_digest"](root)
    return digest


def test_the_committed_build_is_of_the_source_as_it_is() -> None:
    assert BUILT_FROM.read_text().strip() == _digest(SOURCE), "scripts/playground changed: run its build.sh"


def test_an_edit_to_the_source_changes_the_digest(tmp_path: Path) -> None:
    copy = tmp_path / "playground"
    shutil.copytree(SOURCE, copy, ignore=shutil.ignore_patterns("node_modules"))
    assert _digest(copy) == _digest(SOURCE)
    (copy / "node_modules").mkdir()
    (copy / "node_modules" / "x.js").write_text("ignored")
    assert _digest(copy) == _digest(SOURCE)
    app = copy / "src" / "App.jsx"
    app.write_text(app.read_text() + "\n")
    assert _digest(copy) != _digest(SOURCE)
