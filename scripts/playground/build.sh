#!/usr/bin/env bash
# Rebuilds the /playground page into src/agent_runtime/playground/static/ (committed: the service needs no Node).
# Needs Node.js 20+ and npm; `npm ci` installs exactly package-lock.json.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
npm ci --no-audit --no-fund
npm run build
python3 digest.py > ../../src/agent_runtime/playground/static/source.sha256
