#!/usr/bin/env bash
# Build, provision and run a local llama.cpp `llama-server` for ttft-bench.
#
#   llama-server.sh build                 find or build llama-server; prints its path
#   llama-server.sh model [tiny|medium]   find or generate a random-weight model; prints its path
#   llama-server.sh available             exit 0 iff binary + tiny model are cached (never builds)
#   llama-server.sh start [--model tiny|medium|PATH] [--port N] [--state-dir DIR]
#                         [--ctx N] [--parallel N] [--threads N] [-- extra llama-server args]
#                                         start in the background, wait for /health; last stdout line = URL
#   llama-server.sh stop  [--state-dir DIR]   stop the server of that state dir (no error if none)
#   llama-server.sh url   [--state-dir DIR]   print the URL of a running server, or exit 1
#
# Human-facing messages go to stderr; machine-readable results to stdout.
# Cache: ${TTFT_BENCH_CACHE:-$HOME/.cache/ttft-bench}
#   llama.cpp-<ver>/src/                  llama.cpp source (from the llama-cpp-python sdist)
#   llama.cpp-<ver>/bin/llama-server      static binary
#   models/<variant>.gguf (+ .key)        generated models, keyed on GENERATOR_VERSION
#   run/default/                          default state dir: pid, url, server.log, slots/
set -euo pipefail

# llama.cpp is taken from the llama-cpp-python sdist on PyPI (it vendors the
# full llama.cpp tree); there is no Debian package and GitHub may be unreachable.
LLAMA_CPP_PYTHON_VERSION=0.3.36

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${TTFT_BENCH_CACHE:-$HOME/.cache/ttft-bench}
LDIR=$CACHE/llama.cpp-$LLAMA_CPP_PYTHON_VERSION
SRC=$LDIR/src
BIN=$LDIR/bin/llama-server
MODELS=$CACHE/models
DEFAULT_STATE_DIR=$CACHE/run/default
GEN=$SCRIPT_DIR/gen_model.py

log() { printf '%s\n' "llama-server.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# with_lock NAME CMD...: run CMD holding $CACHE/.lock-NAME, so parallel
# `start`s (e.g. concurrent tests) don't build or generate the same thing twice.
with_lock() {
    local name=$1
    shift
    mkdir -p "$CACHE"
    (
        flock 9
        "$@"
    ) 9>"$CACHE/.lock-$name"
}

# --------------------------------------------------------------------- build
ensure_cmake() {
    command -v cmake >/dev/null 2>&1 && return 0
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "installing cmake via apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake >&2
    else
        die "cmake not found; install it (apt-get install cmake, or: python3 -m pip install cmake)"
    fi
}

ensure_src() {
    [[ -f $SRC/CMakeLists.txt ]] || with_lock src fetch_src
}

fetch_src() {
    [[ -f $SRC/CMakeLists.txt ]] && return 0
    command -v python3 >/dev/null 2>&1 || die "python3 is required to download llama.cpp"
    mkdir -p "$LDIR"
    local tmp
    tmp=$(mktemp -d "$LDIR/.src.XXXXXX")
    log "downloading llama.cpp source (llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist, ~76 MB)"
    # --no-binary for this one package only (":all:" would also try to build pip's build deps)
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$tmp" >&2 \
        || { rm -rf "$tmp"; die "pip download of llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION failed"; }
    tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp" \
        || { rm -rf "$tmp"; die "could not unpack the sdist"; }
    rm -rf "$SRC"
    mv "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$SRC"
    rm -rf "$tmp"
}

do_build() {
    if [[ -x $BIN ]]; then
        printf '%s\n' "$BIN"
        return 0
    fi
    ensure_src
    ensure_cmake
    command -v c++ >/dev/null 2>&1 || die "no C++ compiler (apt-get install build-essential)"
    log "building llama.cpp $LLAMA_CPP_PYTHON_VERSION, ~8 min on 2 cores, once"
    local jobs build start
    jobs=$(nproc 2>/dev/null || echo 2)
    build=$(mktemp -d "$LDIR/.build.XXXXXX")
    start=$SECONDS
    # LLAMA_USE_PREBUILT_UI=OFF: otherwise configure downloads the web UI (fails offline).
    # GGML_NATIVE=OFF: the binary may be cached and reused on another CPU.
    if ! { cmake -S "$SRC" -B "$build" \
            -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
            -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >&2 &&
           cmake --build "$build" --target llama-server -j "$jobs" >&2; }; then
        rm -rf "$build"
        die "llama.cpp build failed"
    fi
    mkdir -p "$LDIR/bin"
    # copy + rename: a killed build never leaves a half-written binary in place
    cp "$build/bin/llama-server" "$LDIR/bin/.llama-server.tmp.$$"
    mv -f "$LDIR/bin/.llama-server.tmp.$$" "$BIN"
    rm -rf "$build"
    log "built $BIN in $((SECONDS - start)) s"
    printf '%s\n' "$BIN"
}

# --------------------------------------------------------------------- model
gen_version() {
    sed -n 's/^GENERATOR_VERSION = "\(.*\)"$/\1/p' "$GEN"
}

model_ok() { # variant -> 0 iff cached model matches the generator version
    local m=$MODELS/$1.gguf
    [[ -f $m && -f $m.key && $(cat "$m.key") == "$(gen_version)" ]]
}

ensure_python_deps() {
    local missing=()
    python3 -c 'import numpy' 2>/dev/null || missing+=(numpy)
    python3 -c 'import yaml' 2>/dev/null || missing+=(pyyaml) # gguf-py imports yaml
    if ((${#missing[@]})); then
        log "pip install ${missing[*]}"
        python3 -m pip install --quiet --disable-pip-version-check "${missing[@]}" >&2 \
            || die "could not pip install ${missing[*]}"
    fi
}

do_model() {
    local variant=${1:-tiny}
    [[ $variant == tiny || $variant == medium ]] || die "unknown model variant '$variant' (tiny|medium)"
    local m=$MODELS/$variant.gguf
    if model_ok "$variant"; then
        printf '%s\n' "$m"
        return 0
    fi
    ensure_src
    ensure_python_deps
    mkdir -p "$MODELS"
    log "generating $variant model ($(gen_version)) -> $m"
    local start=$SECONDS
    rm -f "$m.key"
    PYTHONPATH="$SRC/gguf-py${PYTHONPATH:+:$PYTHONPATH}" python3 "$GEN" \
        --variant "$variant" --vocab "$SRC/models/ggml-vocab-llama-spm.gguf" --out "$m" >&2 \
        || die "model generation failed"
    gen_version >"$m.key.tmp.$$"
    mv -f "$m.key.tmp.$$" "$m.key"
    log "generated $m in $((SECONDS - start)) s"
    printf '%s\n' "$m"
}

# --------------------------------------------------------------------- server
SERVER_PROCESS=llama-server STOP_GRACE_S=10
# shellcheck source=scripts/server-state.sh
source "$SCRIPT_DIR/server-state.sh"

port_free() { # port -> 0 iff 127.0.0.1:port can be bound
    python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

# pid port -> 0 iff pid owns the listening socket on port (so a 200 from
# /health is from our server, not another one on the same port). Linux /proc;
# elsewhere it trusts the pid being alive.
listens_on() {
    python3 - "$1" "$2" <<'EOF'
import os, sys
pid, port = sys.argv[1], int(sys.argv[2])
try:
    fds = os.listdir(f"/proc/{pid}/fd")
except OSError:
    sys.exit(0 if not os.path.isdir("/proc/self/fd") else 1)
inodes = set()
for fd in fds:
    try:
        link = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        continue
    if link.startswith("socket:["):
        inodes.add(link[8:-1])
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    for row in rows:
        f = row.split()
        # f[1] local addr:port (hex), f[3] state (0A = LISTEN), f[9] inode
        if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port and f[9] in inodes:
            sys.exit(0)
sys.exit(1)
EOF
}

do_start() {
    local model=tiny port="" dir=$DEFAULT_STATE_DIR ctx=65536 parallel=2 threads extra=()
    threads=$(nproc 2>/dev/null || echo 2)
    while (($#)); do
        case $1 in
            --model) model=${2:?--model needs a value}; shift 2 ;;
            --port) port=${2:?--port needs a value}; shift 2 ;;
            --state-dir) dir=${2:?--state-dir needs a value}; shift 2 ;;
            --ctx) ctx=${2:?--ctx needs a value}; shift 2 ;;
            --parallel) parallel=${2:?--parallel needs a value}; shift 2 ;;
            --threads) threads=${2:?--threads needs a value}; shift 2 ;;
            --) shift; extra=("$@"); break ;;
            *) die "start: unknown argument '$1'" ;;
        esac
    done

    local bin model_path
    bin=$(with_lock build do_build)
    case $model in
        tiny | medium) model_path=$(with_lock "model-$model" do_model "$model") ;;
        *) [[ -f $model ]] || die "model file '$model' not found"; model_path=$model ;;
    esac

    mkdir -p "$dir/slots"
    dir=$(cd "$dir" && pwd)
    do_stop "$dir"
    rm -f "$dir/url"

    # If we pick the port ourselves, another process can grab it between our
    # probe and the server's bind: retry a few times with a new port.
    local attempts=1 attempt
    if [[ -z $port ]]; then
        attempts=3
    elif ! port_free "$port"; then
        die "port $port on 127.0.0.1 is already in use"
    fi
    for ((attempt = 1; attempt <= attempts; attempt++)); do
        local p=${port:-$(free_port)}
        local url="http://127.0.0.1:$p"
        local cmd=("$bin" -m "$model_path" --host 127.0.0.1 --port "$p"
            -c "$ctx" --parallel "$parallel" -t "$threads" --metrics
            --slot-save-path "$dir/slots/"
            # no host-RAM prompt cache: a repeated cold prompt must stay cold after a slot erase
            --cache-ram 0
            "${extra[@]}")
        printf '%q ' "${cmd[@]}" >"$dir/cmd"
        echo >>"$dir/cmd"
        log "starting llama-server on $url (model $model_path, ctx $ctx, parallel $parallel, log $dir/server.log)"
        # own session: survives this script and the caller's terminal/process group
        setsid "${cmd[@]}" </dev/null >"$dir/server.log" 2>&1 &
        local pid=$!
        echo "$pid" >"$dir/pid"

        local start=$SECONDS ready=0
        wait_ready "$dir" "$pid" "$url/health" 'bind|address already in use' "$((attempt < attempts))" listens_on "$pid" "$p" || ready=$?
        if ((ready == 2)); then
            log "port $p taken, retrying"
            continue
        fi
        echo "$url" >"$dir/url"
        log "llama-server healthy after $((SECONDS - start)) s (pid $pid)"
        printf '%s\n' "$url"
        return 0
    done
    die "could not start llama-server"
}

do_available() {
    if [[ -x $BIN ]] && model_ok tiny; then
        return 0
    fi
    log "llama-server or tiny model not cached under $CACHE (run: bash scripts/llama-server.sh build && bash scripts/llama-server.sh model tiny)"
    exit 1
}

parse_state_dir() { # args -> prints state dir
    local dir=$DEFAULT_STATE_DIR
    while (($#)); do
        case $1 in
            --state-dir) dir=${2:?--state-dir needs a value}; shift 2 ;;
            *) die "unknown argument '$1'" ;;
        esac
    done
    printf '%s\n' "$dir"
}

usage() {
    sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

cmd=${1:-}
(($#)) && shift
case $cmd in
    build) (($# == 0)) || die "build takes no arguments"; with_lock build do_build ;;
    model)
        (($# <= 1)) && [[ ${1:-tiny} == tiny || ${1:-tiny} == medium ]] || die "usage: model [tiny|medium]"
        with_lock "model-${1:-tiny}" do_model "${1:-tiny}"
        ;;
    available) do_available ;;
    start) do_start "$@" ;;
    stop) dir=$(parse_state_dir "$@"); do_stop "$dir" ;;
    url) dir=$(parse_state_dir "$@"); do_url "$dir" ;;
    -h | --help | help) usage ;;
    *) usage; exit 2 ;;
esac
