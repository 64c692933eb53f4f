"""The SHA-256 of the playground's build inputs (every file here but node_modules), which build.sh stores beside
the build as `source.sha256`; tests/test_playground_build.py recomputes it, so a source edit without a rebuild
fails the suite. The build is reproducible (`npm ci` from package-lock.json, Vite's content-hashed names)."""

from __future__ import annotations

import hashlib
from pathlib import Path

HERE = Path(__file__).resolve().parent


def source_digest(root: Path = HERE) -> str:
    digest = hashlib.sha256()
    skipped = {"node_modules", "__pycache__"}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not skipped & set(p.relative_to(root).parts)):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


if __name__ == "__main__":
    print(source_digest())
