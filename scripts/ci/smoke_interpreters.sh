#!/usr/bin/env bash
# Smoke run on every supported interpreter other than the baseline: `bash scripts/ci/smoke_interpreters.sh`.
#
# The baseline (`.python-version`, 3.11) gets the whole suite in .ci/run. Every other minor version that
# `requires-python` admits (3.12-3.14 today) and that this machine has gets: install (`uv sync --frozen` into
# .venvs/py3.X, so the main .venv is left alone), migrate, one streamed run, the AG-UI conformance tests.
# A version the machine lacks is reported and skipped; one that fails fails the script, after the others ran.
# Python is never downloaded (UV_PYTHON_DOWNLOADS=never): only what is installed counts.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# install: the sync below; migrate: the migration files applied by the session fixture and `agent-runtime
# migrate` in 8 racing processes; stream: one run streamed through LiteLLM from a stub provider; conformance:
# the official @ag-ui/client against `agent-runtime serve` processes (needs Node.js and npm, as the suite).
SMOKE_TESTS=(
    tests/db/test_migrations.py
    "tests/runs/test_runs_direct.py::test_direct_route_is_one_streamed_call_billed_on_the_reply"
    tests/conformance
)

export UV_PYTHON_DOWNLOADS=never

if ! command -v uv >/dev/null 2>&1; then
    uv() { python3 -m uv "$@"; }
fi

# The versions to smoke, from pyproject.toml and .python-version (read by the baseline's environment).
supported=$(uv run --frozen python - <<'EOF'
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet

supported = SpecifierSet(tomllib.loads(Path("pyproject.toml").read_text())["project"]["requires-python"])
baseline = Path(".python-version").read_text().split()[0]
print(" ".join(f"3.{minor}" for minor in range(11, 40) if f"3.{minor}" != baseline and f"3.{minor}.0" in supported))
EOF
)
read -r -a versions <<<"${supported}"

# Prints the interpreter for one minor version ("3.12"), or nothing.
find_python() {
    local minor=$1 prefix path
    # pyenv first: with .python-version at 3.11, pyenv's shim `python3.12` does not run 3.12 (it answers
    # "version `3.11' is not installed" or "command not found"), and `uv python find` stops at that shim.
    if command -v pyenv >/dev/null 2>&1 && prefix=$(pyenv prefix "${minor}" 2>/dev/null); then
        if [ -x "${prefix}/bin/python${minor}" ]; then
            echo "${prefix}/bin/python${minor}"
            return
        fi
    fi
    # Then uv's own search (PATH, uv-managed installations), without the shims.
    path=$(printf '%s' "${PATH}" | tr ':' '\n' | grep -v '/shims$' | paste -sd: -)
    PATH="${path}" uv python find --system --no-project "${minor}" 2>/dev/null || true
}

failed=()
ran=0
for minor in "${versions[@]}"; do
    python=$(find_python "${minor}")
    if [ -z "${python}" ]; then
        echo "-- Python ${minor}: not installed here, skipped"
        continue
    fi
    echo "-- Python ${minor}: ${python}"
    venv=".venvs/py${minor}"
    started=${SECONDS}
    if UV_PROJECT_ENVIRONMENT="${venv}" uv sync --frozen --quiet --python "${python}" \
        && "${venv}/bin/python" -m pytest -q -p no:cacheprovider "${SMOKE_TESTS[@]}"; then
        echo "-- Python ${minor}: passed in $((SECONDS - started)) s"
    else
        echo "-- Python ${minor}: FAILED after $((SECONDS - started)) s" >&2
        failed+=("${minor}")
    fi
    ran=$((ran + 1))
done

if [ "${#failed[@]}" -ne 0 ]; then
    echo "smoke run failed on Python ${failed[*]}" >&2
    exit 1
fi
echo "smoke run passed on ${ran} interpreter(s) besides the baseline"
