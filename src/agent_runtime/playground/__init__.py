"""The /playground page: a chat against this service, built once from scripts/playground/ into `static/`.

The built files are committed and shipped in the wheel, so the page works offline with no Node at run time;
StaticFiles is a plain ASGI app (no BaseHTTPMiddleware in the streaming path)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"
MOUNT_PATH = "/playground"


def mount_playground(app: FastAPI) -> None:
    """Serves `static/` at /playground/ (index.html for the directory; /playground redirects there)."""
    app.mount(MOUNT_PATH, StaticFiles(directory=STATIC_DIR, html=True), name="playground")


__all__ = ["MOUNT_PATH", "STATIC_DIR", "mount_playground"]
