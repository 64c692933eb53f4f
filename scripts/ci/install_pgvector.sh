#!/usr/bin/env bash
# Installs pgvector (migration 0011's `CREATE EXTENSION vector`) for PostgreSQL major $1 (default: the newest
# /usr/lib/postgresql/N there is), as root on Debian. Prefers the package postgresql-N-pgvector; Debian 12 has
# none, so then it builds Debian's own pgvector source package (from the next release's deb-src, the only
# place Debian carries it) against postgresql-server-dev-N, portable flags (no -march=native), and installs it.
# Does nothing when the extension is there already. Used by .ci/run and by the compose smoke's postgres stand-in.
set -euo pipefail

major="${1:-}"
if [ -z "${major}" ]; then
    major="$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1)"
fi
if [ -z "${major}" ]; then
    echo "install_pgvector: no PostgreSQL under /usr/lib/postgresql" >&2
    exit 1
fi
# PGVECTOR_FORCE_BUILD=1: build from source even when installed (to test the build path).
force="${PGVECTOR_FORCE_BUILD:-0}"
if [ "${force}" != 1 ] && [ -f "/usr/share/postgresql/${major}/extension/vector.control" ]; then
    echo "pgvector: already installed for PostgreSQL ${major}"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [ "${force}" != 1 ] && apt-get install -y -qq "postgresql-${major}-pgvector" >/dev/null 2>&1; then
    echo "pgvector: installed postgresql-${major}-pgvector"
    exit 0
fi
echo "pgvector: no postgresql-${major}-pgvector package; building Debian's pgvector source package"
apt-get install -y -qq --no-install-recommends "postgresql-server-dev-${major}" build-essential dpkg-dev >/dev/null
sources=/etc/apt/sources.list.d/agent-runtime-pgvector-src.sources
work="$(mktemp -d)"
trap 'rm -rf "${work}" "${sources}"; apt-get update -qq >/dev/null 2>&1 || true' EXIT
printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "${PGVECTOR_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"${sources}"
apt-get update -qq
(cd "${work}" && apt-get source --download-only -qq pgvector >/dev/null 2>&1)
tar -xzf "${work}"/pgvector_*.orig.tar.gz -C "${work}"
cd "${work}"/pgvector-*/
make -s -j"$(nproc)" PG_CONFIG="/usr/lib/postgresql/${major}/bin/pg_config" OPTFLAGS="" >/dev/null
make -s install PG_CONFIG="/usr/lib/postgresql/${major}/bin/pg_config" >/dev/null
echo "pgvector: built and installed $(basename "$PWD") for PostgreSQL ${major}"
