#!/usr/bin/env bash
# Install, provision and run the agent-memory server (the origin benchmark's MLX server) on a CPU.
#
#   agent-memory.sh setup [--source PATH]   venv + installs + generated model (idempotent, cached);
#                                           prints the venv's directory
#   agent-memory.sh available [--source PATH]  exit 0 iff setup is cached (never installs)
#   agent-memory.sh start [--source PATH] [--state-dir DIR] [--port N] [--log-level LEVEL]
#                                           start in the background, wait for /health/ready;
#                                           last stdout line = URL
#   agent-memory.sh stop  [--state-dir DIR] stop the server of that state dir (no error if none)
#   agent-memory.sh url   [--state-dir DIR] print the URL of a running server, or exit 1
#   agent-memory.sh source [--source PATH]  print the unpacked source directory (its benchmarks/)
#
# --source (or $AGENT_MEMORY_SOURCE): a checkout of the server or a .tar.gz of one; default: the
# first agent-memory-*.tar.gz in shared/seed-server/ beside the checkout, where the project's test
# machines keep a snapshot (docs/agent-memory.md).
# The admin key (DELETE /admin/caches) is $AGENT_MEMORY_ADMIN_KEY, the variable presets/agent-memory.toml
# reads; when it is unset, start makes a random one and keeps it in DIR/admin-key (mode 600) only.
# Human-facing messages go to stderr; machine-readable results to stdout.
# Cache: ${TTFT_BENCH_CACHE:-$HOME/.cache/ttft-bench}
#   agent-memory-<key>/src/         the unpacked source (key: the source's sha256 + this file's PIN)
#   agent-memory-<key>/venv/        its Python environment (~420 MB)
#   agent-memory-<key>/model/       the generated model (+ .key = scripts/gen_mlx_model.py's version)
#   run/agent-memory/               default state dir: pid, url, server.log, caches/, admin-key
# Facts behind each setting: docs/agent-memory.md.
set -euo pipefail

# What the server's own setup pins; bump PIN when the install steps change (a new venv is made).
MLX_VERSION=0.30.3
MLX_LM_VERSION=0.30.4
PIN="mlx$MLX_VERSION-mlxlm$MLX_LM_VERSION-v1"

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
CACHE=${TTFT_BENCH_CACHE:-$HOME/.cache/ttft-bench}
DEFAULT_STATE_DIR=$CACHE/run/agent-memory
GEN=$SCRIPT_DIR/gen_mlx_model.py
SOURCE=${AGENT_MEMORY_SOURCE:-}

log() { printf '%s\n' "agent-memory.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

with_lock() {
    local name=$1
    shift
    mkdir -p "$CACHE"
    (
        flock 9
        "$@"
    ) 9>"$CACHE/.lock-$name"
}

# ------------------------------------------------------------------ source
default_source() {
    local d=$ROOT/../shared/seed-server f
    for f in "$d"/agent-memory-*.tar.gz; do
        [[ -f $f ]] && { printf '%s\n' "$f"; return 0; }
    done
    die "no agent-memory source: pass --source PATH or set AGENT_MEMORY_SOURCE (a checkout or a .tar.gz); looked for $d/agent-memory-*.tar.gz"
}

source_path() {
    local s=${SOURCE:-$(default_source)}
    [[ -e $s ]] || die "agent-memory source '$s' not found (--source / AGENT_MEMORY_SOURCE)"
    if [[ -d $s ]]; then
        [[ -f $s/pyproject.toml ]] || die "'$s' (--source / AGENT_MEMORY_SOURCE) has no pyproject.toml: not an agent-memory checkout"
    fi
    printf '%s\n' "$(cd "$(dirname "$s")" && pwd)/$(basename "$s")"
}

# sha256 of the source: the tarball's bytes, or a checkout's tracked files (names and contents)
source_hash() {
    local s=$1
    if [[ -f $s ]]; then
        sha256sum "$s" | cut -c1-16
    else
        (cd "$s" && find pyproject.toml src benchmarks -type f ! -name '*.pyc' ! -path '*/__pycache__/*' 2>/dev/null \
            | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
    fi
}

# sets DIR (cache dir of this source), SRC (the unpacked source)
resolve() {
    local s key
    s=$(source_path)
    key=$(printf '%s %s\n' "$(source_hash "$s")" "$PIN" | sha256sum | cut -c1-12)
    DIR=$CACHE/agent-memory-$key
    SRC=$DIR/src
    SRC_ORIGIN=$s
}

unpack_src() {
    [[ -f $SRC/pyproject.toml ]] && return 0
    mkdir -p "$DIR"
    local tmp
    tmp=$(mktemp -d "$DIR/.src.XXXXXX")
    if [[ -f $SRC_ORIGIN ]]; then
        tar -xzf "$SRC_ORIGIN" -C "$tmp" || { rm -rf "$tmp"; die "could not unpack $SRC_ORIGIN"; }
    else
        mkdir -p "$tmp/x"
        (cd "$SRC_ORIGIN" && tar -cf - --exclude=.git --exclude=.venv --exclude=__pycache__ .) | tar -xf - -C "$tmp/x" \
            || { rm -rf "$tmp"; die "could not copy $SRC_ORIGIN"; }
    fi
    local top
    top=$(dirname "$(find "$tmp" -maxdepth 3 -name pyproject.toml | head -n1)")
    [[ -f $top/pyproject.toml ]] || { rm -rf "$tmp"; die "no pyproject.toml in $SRC_ORIGIN"; }
    rm -rf "$SRC"
    mv "$top" "$SRC"
    rm -rf "$tmp"
}

# ------------------------------------------------------------------ setup
venv_ok() { [[ -x $DIR/venv/bin/agent-memory && -f $DIR/venv/.complete ]]; }

openblas_lib() {
    local f
    f=$(find "$DIR/venv" -path '*cmeel.prefix/lib/libopenblas*.so*' -print 2>/dev/null | head -n1)
    [[ -n $f ]] && printf '%s\n' "$f"
}

make_venv() {
    venv_ok && return 0
    command -v python3 >/dev/null 2>&1 || die "python3 (>= 3.11) is required"
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "python3 >= 3.11 is required (the server's requires-python)"
    rm -rf "$DIR/venv"
    log "creating venv $DIR/venv"
    python3 -m venv "$DIR/venv" >&2 || die "python3 -m venv failed (apt-get install python3-venv)"
    local pip=("$DIR/venv/bin/python" -m pip --disable-pip-version-check --quiet)
    # mlx[cpu]: the CPU wheels for Linux. The package brings its own pins (transformers 4.57.6, ...).
    # jinja2: without it the chat template fails and the server falls back to raw text, silently.
    # cmeel-openblas: mlx's bundled BLAS is the slow reference one; start preloads this one.
    log "pip install mlx[cpu]==$MLX_VERSION, the server ($SRC_ORIGIN), jinja2, cmeel-openblas"
    "${pip[@]}" install "mlx[cpu]==$MLX_VERSION" "$SRC" jinja2 cmeel-openblas >&2 \
        || die "pip install of the server and its dependencies failed"
    # mlx-lm without its dependencies, as the server's own setup does (its transformers pin differs).
    log "pip install --no-deps mlx-lm==$MLX_LM_VERSION"
    "${pip[@]}" install --no-deps "mlx-lm==$MLX_LM_VERSION" >&2 || die "pip install mlx-lm==$MLX_LM_VERSION failed"
    openblas_lib >/dev/null || die "cmeel-openblas installed no libopenblas under $DIR/venv"
    # cmeel's libopenblas needs libgfortran.so.5, which a bare Debian lacks; the mlx CPU wheel
    # vendors one (under a hashed name): start puts a link to it, by the name the loader looks
    # for, on LD_LIBRARY_PATH.
    local gf
    gf=$(find "$DIR/venv" -path '*/mlx_cpu.libs/libgfortran*.so*' -print | head -n1)
    [[ -n $gf ]] || die "no libgfortran in the mlx CPU wheel under $DIR/venv"
    mkdir -p "$DIR/venv/blas-libs"
    ln -sf "$gf" "$DIR/venv/blas-libs/libgfortran.so.5"
    touch "$DIR/venv/.complete"
}

gen_version() { sed -n 's/^GENERATOR_VERSION = "\(.*\)"$/\1/p' "$GEN"; }

model_ok() { [[ -f $DIR/model/config.json && -f $DIR/model.key && $(cat "$DIR/model.key") == "$(gen_version)" ]]; }

make_model() {
    model_ok && return 0
    local corpus=$SRC/benchmarks/data/prefill_corpus.txt
    [[ -f $corpus ]] || corpus=$ROOT/docs
    log "generating model ($(gen_version)) -> $DIR/model (tokenizer trained on $corpus)"
    rm -rf "$DIR/model" "$DIR/model.key" "$DIR/.model.tmp"
    "$DIR/venv/bin/python" "$GEN" --out "$DIR/.model.tmp" --corpus "$corpus" >&2 || die "model generation failed"
    mv "$DIR/.model.tmp" "$DIR/model"
    gen_version >"$DIR/model.key"
}

do_setup_locked() {
    local start=$SECONDS
    unpack_src
    make_venv
    make_model
    ((SECONDS - start < 2)) || log "set up $DIR in $((SECONDS - start)) s"
}

do_setup() {
    resolve
    with_lock "agent-memory" do_setup_locked
    printf '%s\n' "$DIR"
}

do_available() {
    resolve
    if venv_ok && model_ok; then
        return 0
    fi
    log "agent-memory not set up under $DIR (run: bash scripts/agent-memory.sh setup)"
    exit 1
}

# ------------------------------------------------------------------ server
# SIGTERM: the server drains and persists its hot caches (about 1 s).
SERVER_PROCESS=agent-memory STOP_GRACE_S=15
# shellcheck source=scripts/server-state.sh
source "$SCRIPT_DIR/server-state.sh"

do_start() {
    local port="" dir=$DEFAULT_STATE_DIR level=INFO
    while (($#)); do
        case $1 in
            --source) SOURCE=${2:?--source needs a value}; shift 2 ;;
            --state-dir) dir=${2:?--state-dir needs a value}; shift 2 ;;
            --port) port=${2:?--port needs a value}; shift 2 ;;
            --log-level) level=${2:?--log-level needs a value}; shift 2 ;;
            *) die "start: unknown argument '$1'" ;;
        esac
    done
    do_setup >/dev/null
    mkdir -p "$dir/caches" "$dir/cwd"
    dir=$(cd "$dir" && pwd)
    do_stop "$dir"

    local key=${AGENT_MEMORY_ADMIN_KEY:-}
    if [[ -z $key ]]; then
        key=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
        (umask 077 && printf '%s\n' "$key" >"$dir/admin-key")
        log "AGENT_MEMORY_ADMIN_KEY unset: admin key written to $dir/admin-key"
    fi

    local blas
    blas=$(openblas_lib) || die "no libopenblas in $DIR/venv (rerun setup)"
    local libs
    libs=$DIR/venv/blas-libs:$(dirname "$(readlink "$DIR/venv/blas-libs/libgfortran.so.5")")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    local attempts=1 attempt
    [[ -n $port ]] || attempts=3
    for ((attempt = 1; attempt <= attempts; attempt++)); do
        local p=${port:-$(free_port)}
        local url="http://127.0.0.1:$p"
        log "starting agent-memory on $url (model $DIR/model, caches $dir/caches, log $dir/server.log)"
        # cwd: an empty directory, so no stray .env is read (the settings read ./.env).
        # The rate limits: the defaults (60 requests per minute per agent) throttle a sweep.
        (
            cd "$dir/cwd"
            export SEMANTIC_MLX_MODEL_ID=$DIR/model
            export SEMANTIC_AGENT_CACHE_DIR=$dir/caches
            export SEMANTIC_MLX_CACHE_BUDGET_MB=512
            export SEMANTIC_MLX_MAX_BATCH_SIZE=2
            export SEMANTIC_SERVER_RATE_LIMIT_PER_AGENT=1000
            export SEMANTIC_SERVER_RATE_LIMIT_GLOBAL=10000
            export SEMANTIC_SERVER_LOG_LEVEL=$level
            export SEMANTIC_ADMIN_KEY=$key
            command -v g++ >/dev/null 2>&1 || export MLX_DISABLE_COMPILE=1
            # OpenBLAS with one thread instead of the mlx wheel's reference BLAS; the vendored
            # libgfortran (linked by make_venv) finds its own hashed libquadmath beside it.
            exec setsid env LD_PRELOAD="$blas" OPENBLAS_NUM_THREADS=1 LD_LIBRARY_PATH="$libs" \
                "$DIR/venv/bin/agent-memory" serve --host 127.0.0.1 --port "$p" \
                </dev/null >"$dir/server.log" 2>&1
        ) &
        local pid=$!
        echo "$pid" >"$dir/pid"
        local start=$SECONDS ready=0
        wait_ready "$dir" "$pid" "$url/health/ready" 'address already in use' "$((attempt < attempts))" || ready=$?
        if ((ready == 2)); then
            log "port $p taken, retrying"
            continue
        fi
        echo "$url" >"$dir/url"
        log "agent-memory ready after $((SECONDS - start)) s (pid $pid)"
        printf '%s\n' "$url"
        return 0
    done
    die "could not start agent-memory"
}

parse_state_dir() {
    local dir=$DEFAULT_STATE_DIR
    while (($#)); do
        case $1 in
            --state-dir) dir=${2:?--state-dir needs a value}; shift 2 ;;
            *) die "unknown argument '$1'" ;;
        esac
    done
    printf '%s\n' "$dir"
}

parse_source() {
    while (($#)); do
        case $1 in
            --source) SOURCE=${2:?--source needs a value}; shift 2 ;;
            *) die "unknown argument '$1'" ;;
        esac
    done
}

usage() { sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; }

cmd=${1:-}
(($#)) && shift
case $cmd in
    setup) parse_source "$@"; do_setup ;;
    available) parse_source "$@"; do_available ;;
    source) parse_source "$@"; do_setup >/dev/null; printf '%s\n' "$SRC" ;;
    start) do_start "$@" ;;
    stop) dir=$(parse_state_dir "$@"); do_stop "$dir" ;;
    url) dir=$(parse_state_dir "$@"); do_url "$dir" ;;
    -h | --help | help) usage ;;
    *) usage; exit 2 ;;
esac
