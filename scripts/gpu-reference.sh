#!/usr/bin/env bash
# The GPU reference run (docs/reference.md): llama.cpp built with CUDA, a random 8B-shaped f16 model,
# scenarios/gpu-reference.toml swept, verified, merged and reported, and the GPU's own ceilings measured.
#
#   gpu-reference.sh stage DIR     (on a machine with this repo) pack what a bare GPU machine needs into DIR:
#                                  scripts, scenario, a stripped target/release/bench, trimmed llama.cpp source
#   gpu-reference.sh build         build llama-server with CUDA (sm_90 only, target llama-server, -j16)
#   gpu-reference.sh model         generate the llama8b model (8B-shaped f16, GQA, tiled random layers)
#   gpu-reference.sh prepare       build and model, in parallel
#   gpu-reference.sh smoke         start llama-server (left running for sweep) and measure 1K and 16K cold once:
#                                  the server loads the model, and the replies pass bench's quality gate
#   gpu-reference.sh sweep         measure the GPU's ceilings (scripts/gpu_probe.py, idle GPU), start
#                                  llama-server on it and sweep scenarios/gpu-reference.toml, with the
#                                  measured ceilings as the physics of every record
#   gpu-reference.sh finish DEST   verify (measured and datasheet ceilings), merge --expect, report with
#                                  plots; copy everything worth keeping to DEST
#   gpu-reference.sh parity DEST   parity of bench with a raw client (scripts/parity.py, docs/reference.md):
#                                  bench's own request bodies replayed from Python's http.client on the
#                                  same server, interleaved with bench, per context, cold and warm;
#                                  the table and the pairs go to DEST (PARITY_CONTEXTS, PARITY_ROUNDS)
#   gpu-reference.sh all DEST      prepare, sweep, finish in one go (no time limit)
#   gpu-reference.sh stop          stop the llama-server this script started
#
# Split for machines that cap one command at 10 minutes (and keep /tmp only while busy): run
# `prepare && smoke`, then `sweep && finish DEST`, as two back-to-back commands. `build`, `model`, `prepare`
# and `sweep` start their work detached (setsid), so it survives the end of a command, and wait for
# it at most STEP_BUDGET_S seconds (default 540); if the work is not done by then they exit 75 and
# the SAME step is simply run again: it re-attaches (a cut-off sweep is finished with --resume)
# instead of starting over.
#
# Environment:
#   GPU_REF_WORK    work directory [/tmp/ttft-gpu-reference]; everything lands here
#   STEP_BUDGET_S   how long a step waits before exit 75 [540]; 0 = no limit
#   BENCH           the bench binary [DIR/bin/bench when staged, else target/release/bench]
#   LLAMA_SRC       llama.cpp source tree [the staged tarball, else ~/.cache/ttft-bench/llama.cpp-*/src]
#   LLAMA_SERVER    a llama-server to use instead of building one [WORK/llama-server]
#   CUDA            1 = build with CUDA [1]; 0 builds for the CPU (to try the script without a GPU)
#   CUDA_ARCH       CMAKE_CUDA_ARCHITECTURES [90: Hopper]
#   BUILD_JOBS      parallel compile jobs [16]
#   MODEL_VARIANT   scripts/gen_model.py variant [llama8b]; gqa-tiny runs the same recipe on a CPU
#   HARDWARE        bench --hardware profile [from nvidia-smi: h100-sxm, h100-pcie or h200; none without a GPU]
#   SCENARIO        the scenario [scenarios/gpu-reference.toml]
#   PARALLEL        server slots [4]; SLOT_CTX tokens per slot [34816: a 32K hot turn 3 plus replies]
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$SCRIPT_DIR")
SELF=$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")
WORK=${GPU_REF_WORK:-/tmp/ttft-gpu-reference}
STEP_BUDGET_S=${STEP_BUDGET_S:-540}
SCENARIO=${SCENARIO:-$ROOT/scenarios/gpu-reference.toml}
RUN_ID=gpu-reference
RESULTS=$WORK/results
RUN_DIR=$RESULTS/$RUN_ID
CANONICAL=$RESULTS/gpu-reference.json
PORT=${PORT:-8080}
URL=http://127.0.0.1:$PORT
PARALLEL=${PARALLEL:-4}
SLOT_CTX=${SLOT_CTX:-34816}
MODEL_VARIANT=${MODEL_VARIANT:-llama8b}
MODEL=$WORK/$MODEL_VARIANT.gguf
SERVER_BIN=${LLAMA_SERVER:-$WORK/llama-server}
JOBS=$WORK/jobs
# Still running at the end of the budget: run the same step again.
EX_AGAIN=75

log() { printf '%s\n' "gpu-reference.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

llama_version() { sed -n 's/^LLAMA_CPP_PYTHON_VERSION=//p' "$SCRIPT_DIR/llama-server.sh" 2>/dev/null || true; }

bench_bin() {
    local b=${BENCH:-}
    [[ -n $b ]] || { [[ -x $ROOT/bin/bench ]] && b=$ROOT/bin/bench; } || b=$ROOT/target/release/bench
    [[ -x $b ]] || die "no bench binary at $b (cargo build --release, or set BENCH)"
    printf '%s\n' "$b"
}

# ------------------------------------------------------------------ stage (runs where the repo is)
do_stage() {
    local dir=${1:?stage needs a directory}
    local ver src
    ver=$(llama_version)
    src=${LLAMA_SRC:-${TTFT_BENCH_CACHE:-$HOME/.cache/ttft-bench}/llama.cpp-$ver/src}
    [[ -f $src/CMakeLists.txt ]] || die "no llama.cpp source at $src (bash scripts/llama-server.sh build fetches it)"
    local bench=${BENCH:-${CARGO_TARGET_DIR:-$ROOT/target}/release/bench}
    [[ -x $bench ]] || die "$bench missing: cargo build --release first (or set BENCH)"
    mkdir -p "$dir/scripts" "$dir/scenarios" "$dir/bin"
    cp "$SELF" "$SCRIPT_DIR/gen_model.py" "$SCRIPT_DIR/gpu_probe.py" "$SCRIPT_DIR/llama-server.sh" \
        "$SCRIPT_DIR/server-state.sh" "$SCRIPT_DIR/parity.py" "$dir/scripts/"
    cp "$SCENARIO" "$dir/scenarios/"
    strip -o "$dir/bin/bench" "$bench"
    # Only what a CUDA llama-server build and the generator need (the full tree is ~180 MB, mostly
    # docs and test vocabularies; this is ~10 MB compressed).
    local tmp
    tmp=$(mktemp -d)
    mkdir -p "$tmp/llama.cpp/models"
    (cd "$src" && cp -a CMakeLists.txt LICENSE cmake ggml src include common tools vendor gguf-py app licenses scripts \
        "$tmp/llama.cpp/")
    cp "$src/models/ggml-vocab-llama-spm.gguf" "$tmp/llama.cpp/models/"
    tar -czf "$dir/llama.cpp-src.tar.gz" -C "$tmp" llama.cpp
    rm -rf "$tmp"
    log "staged into $dir ($(du -sh "$dir" | cut -f1)); on the GPU machine: bash $dir/scripts/gpu-reference.sh prepare"
}

# ------------------------------------------------------------------ detached jobs
# A job runs in its own session (it outlives the command that started it) and leaves
# $JOBS/NAME.done = "exit-code seconds" when it ends; its output is in $JOBS/NAME.log.
job_start() {
    local name=$1
    shift
    mkdir -p "$JOBS"
    rm -f "$JOBS/$name.done"
    setsid bash "$SELF" _job "$name" "$@" </dev/null >"$JOBS/$name.log" 2>&1 &
    echo $! >"$JOBS/$name.pid"
    log "started $name (log $JOBS/$name.log)"
}

job_body() { # name cmd... (inside the detached session; -e does not apply under `||`, so the
    # job functions return their first failure themselves)
    local name=$1 start=$SECONDS rc=0
    shift
    "$@" || rc=$?
    echo "$rc $((SECONDS - start))" >"$JOBS/$name.done.tmp"
    mv -f "$JOBS/$name.done.tmp" "$JOBS/$name.done"
}

job_running() { local p; p=$(cat "$JOBS/$1.pid" 2>/dev/null) && kill -0 "$p" 2>/dev/null; }
job_rc() { cut -d' ' -f1 "$JOBS/$1.done"; }
job_secs() { cut -d' ' -f2 "$JOBS/$1.done"; }

# wait_jobs NAME...: until every job has ended, or the step's budget is spent (exit 75).
wait_jobs() {
    local start=$SECONDS last=0 name pending
    while :; do
        pending=()
        for name in "$@"; do
            [[ -f $JOBS/$name.done ]] && continue
            job_running "$name" || die "$name died without finishing (log: $JOBS/$name.log)"
            pending+=("$name")
        done
        ((${#pending[@]} == 0)) && return 0
        if ((STEP_BUDGET_S > 0 && SECONDS - start >= STEP_BUDGET_S)); then
            log "still running after ${STEP_BUDGET_S}s: ${pending[*]}; run the same step again to wait for it"
            exit "$EX_AGAIN"
        fi
        if ((SECONDS - last >= 30)); then
            last=$SECONDS
            for name in "${pending[@]}"; do log "$name: $(tail -n 1 "$JOBS/$name.log" 2>/dev/null | cut -c1-160)"; done
        fi
        sleep 2
    done
}

# ------------------------------------------------------------------ prepare
ensure_src() {
    if [[ -n ${LLAMA_SRC:-} ]]; then
        printf '%s\n' "$LLAMA_SRC"
    elif [[ -f $ROOT/llama.cpp-src.tar.gz ]]; then
        [[ -f $WORK/llama.cpp/CMakeLists.txt ]] || tar -xzf "$ROOT/llama.cpp-src.tar.gz" -C "$WORK"
        printf '%s\n' "$WORK/llama.cpp"
    else
        local src=${TTFT_BENCH_CACHE:-$HOME/.cache/ttft-bench}/llama.cpp-$(llama_version)/src
        [[ -f $src/CMakeLists.txt ]] || die "no llama.cpp source: set LLAMA_SRC, stage one, or run scripts/llama-server.sh build"
        printf '%s\n' "$src"
    fi
}

build_server() { # src
    local build=$WORK/build gen=() cuda=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}")
    command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
    [[ ${CUDA:-1} == 0 ]] && cuda=(-DGGML_CUDA=OFF)
    # Static llama/ggml, CUDA for Hopper only (every extra architecture multiplies the build time);
    # offline: no curl, no prebuilt web UI download.
    cmake -S "$1" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF "${cuda[@]}" \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON || return 1
    cmake --build "$build" --target llama-server -j "${BUILD_JOBS:-16}" || return 1
    cp "$build/bin/llama-server" "$SERVER_BIN.tmp" && mv -f "$SERVER_BIN.tmp" "$SERVER_BIN"
}

gen_model() { # src
    # Fewer threads than cores: the CUDA build runs beside it.
    PYTHONPATH="$1/gguf-py${PYTHONPATH:+:$PYTHONPATH}" python3 "$SCRIPT_DIR/gen_model.py" --variant "$MODEL_VARIANT" \
        --vocab "$1/models/ggml-vocab-llama-spm.gguf" --out "$MODEL" --threads "${GEN_THREADS:-6}"
}

# prepare_jobs NAME...: start what is not done yet (build, model), wait, report.
prepare_jobs() {
    mkdir -p "$WORK"
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >&2
    local src name jobs=()
    src=$(ensure_src)
    for name in "$@"; do
        case $name in
            build) [[ -x $SERVER_BIN ]] && continue
                [[ -f $JOBS/build.done ]] || job_running build || job_start build build_server "$src" ;;
            model) [[ -f $MODEL ]] && continue
                [[ -f $JOBS/model.done ]] || job_running model || job_start model gen_model "$src" ;;
        esac
        jobs+=("$name")
    done
    ((${#jobs[@]})) || { log "nothing to do: $SERVER_BIN and $MODEL are there"; return 0; }
    wait_jobs "${jobs[@]}"
    for name in "${jobs[@]}"; do
        if [[ $(job_rc "$name") != 0 ]]; then
            tail -n 40 "$JOBS/$name.log" >&2
            rm -f "$JOBS/$name.done" # a fixed retry starts it again
            die "$name failed; log: $JOBS/$name.log"
        fi
        log "$name done in $(job_secs "$name") s"
    done
    [[ " ${jobs[*]} " != *" build "* || -x $SERVER_BIN ]] || die "build finished without $SERVER_BIN"
    [[ " ${jobs[*]} " != *" model "* || -f $MODEL ]] || die "model finished without $MODEL"
    [[ -f $MODEL ]] && log "model: $MODEL ($(du -h "$MODEL" | cut -f1))"
    return 0
}

# ------------------------------------------------------------------ server
healthy() {
    if command -v curl >/dev/null 2>&1; then
        [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/health" || true) == 200 ]]
    else
        python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$URL/health" 2>/dev/null
    fi
}

start_server() {
    healthy && return 0
    mkdir -p "$WORK/slots"
    # --slot-save-path: warm saves/restores slots there; --cache-ram 0: no host-RAM prompt cache that
    # would serve a 'cold' prompt after an erase; --metrics: the cache evidence counters.
    # --alias: records name the model, not a /tmp path.
    local cmd=("$SERVER_BIN" -m "$MODEL" --alias "$MODEL_VARIANT-random-f16" --host 127.0.0.1 --port "$PORT" -ngl 99
        -c $((PARALLEL * SLOT_CTX)) --parallel "$PARALLEL" --metrics
        --slot-save-path "$WORK/slots/" --cache-ram 0)
    printf '%q ' "${cmd[@]}" >"$WORK/server.cmd"
    echo >>"$WORK/server.cmd"
    log "starting llama-server: $(cat "$WORK/server.cmd")"
    local start=$SECONDS
    setsid "${cmd[@]}" </dev/null >"$WORK/server.log" 2>&1 &
    echo $! >"$WORK/server.pid"
    until healthy; do
        kill -0 "$(cat "$WORK/server.pid")" 2>/dev/null || { tail -n 30 "$WORK/server.log" >&2; die "llama-server exited"; }
        ((SECONDS - start < 300)) || { tail -n 30 "$WORK/server.log" >&2; die "llama-server not healthy after 300 s"; }
        sleep 1
    done
    echo "$((SECONDS - start))" >"$WORK/server_load_s"
    log "llama-server healthy after $((SECONDS - start)) s"
}

do_stop() {
    local pid
    pid=$(cat "$WORK/server.pid" 2>/dev/null) || return 0
    kill -TERM "$pid" 2>/dev/null || true
    rm -f "$WORK/server.pid"
}

# ------------------------------------------------------------------ smoke
do_smoke() {
    [[ -x $SERVER_BIN && -f $MODEL ]] || die "run 'prepare' first"
    local bench rc=0
    bench=$(bench_bin)
    start_server
    rm -rf "$WORK/smoke"
    "$bench" sweep --server "$URL" --preset llama.cpp --contexts "${SMOKE_CONTEXTS:-1k,16k}" --cache-states cold --runs 1 \
        --output-tokens 64 --thermal off --out "$WORK/smoke" --run-id smoke --quiet || rc=$?
    python3 - "$WORK/smoke/smoke/measurements.jsonl" <<'PY' >&2 || true
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"smoke: {r['context_tokens']:>6} tokens: ttft {r['ttft_ms']} ms, decode {r['decode_tps']} tok/s, "
          f"quality_ok {r['quality_ok']} {r['quality_flags']}: {r['output_sample'][:70]!r}")
PY
    ((rc == 0)) || die "the smoke sweep exited $rc: the model or the server is not fit for the reference run"
    log "smoke passed; llama-server stays up for 'sweep'"
}

# ------------------------------------------------------------------ sweep
hardware() {
    if [[ -n ${HARDWARE:-} ]]; then printf '%s\n' "$HARDWARE"; return; fi
    command -v nvidia-smi >/dev/null 2>&1 || return 0 # no GPU: no profile (verify says so)
    local name
    name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
    case $name in
        *H200*) echo h200 ;;
        *H100*PCIe*) echo h100-pcie ;;
        *H100*) echo h100-sxm ;;
        *) die "no bench hardware profile for GPU '$name': set HARDWARE (see crates/results/src/physics/hardware.toml)" ;;
    esac
}

do_sweep() {
    [[ -x $SERVER_BIN && -f $MODEL ]] || die "run 'prepare' first"
    local bench hw physics=()
    bench=$(bench_bin)
    hw=$(hardware)
    [[ -n $hw ]] && physics=(--hardware "$hw")
    if [[ -f $JOBS/sweep.done && $(job_rc sweep) =~ ^[01]$ ]]; then
        log "sweep already finished (exit $(job_rc sweep))"
        return 0
    fi
    # The GPU's own ceilings, measured while it is idle (before the server takes it), ~30 s.
    if [[ ! -f $WORK/probe.json ]] && command -v nvidia-smi >/dev/null 2>&1; then
        local start=$SECONDS
        python3 "$SCRIPT_DIR/gpu_probe.py" --out "$WORK/probe.json" || die "the GPU probe failed"
        echo "$((SECONDS - start))" >"$WORK/probe_s"
    fi
    # The sweep's physics: this card's measured ceilings (over the datasheet profile's numbers), so
    # every record's decode_fraction / prefill_fraction is a share of what this GPU did in the probe.
    if [[ -f $WORK/probe.json ]]; then
        physics+=(--bandwidth-gbps "$(json_get "$WORK/probe.json" 'd["ceilings"]["bandwidth_gbps"]')"
            --tflops "$(json_get "$WORK/probe.json" 'd["ceilings"]["tflops"]')")
    fi
    start_server
    if ! job_running sweep; then
        if [[ -f $RUN_DIR/run.json ]]; then
            # A sweep cut off with the machine's command: finish it (only cells not yet good run).
            job_start sweep "$bench" sweep --resume "$RUN_DIR" --server "$URL" --quiet
        else
            # --slot-dir: the server's save directory, so each warm restore reads the disk (bench drops
            # the saved file from the page cache first: records say page_cache "evicted") and each
            # saved session is removed once measured (a 32K one is 4.3 GB here).
            job_start sweep "$bench" sweep --scenario "$SCENARIO" --server "$URL" "${physics[@]}" \
                --slot-dir "$WORK/slots" --out "$RESULTS" --run-id "$RUN_ID" --quiet
        fi
    fi
    wait_jobs sweep
    # 0 = all good, 1 = some cell failed its checks (recorded; verify says which); else it broke.
    local rc
    rc=$(job_rc sweep)
    tail -n 20 "$JOBS/sweep.log" >&2
    [[ $rc =~ ^[01]$ ]] || die "bench sweep exited $rc (log $JOBS/sweep.log)"
    log "sweep done (exit $rc) in $(job_secs sweep) s"
}

# ------------------------------------------------------------------ parity
# Runs detached like the sweep (a cut-off command re-attaches); bench and the raw client take turns
# on the one server, so nothing else may use it meanwhile.
do_parity() {
    local dest=${1:?parity needs a destination directory}
    [[ -x $SERVER_BIN && -f $MODEL ]] || die "run 'prepare' first"
    local bench
    bench=$(bench_bin)
    start_server
    if [[ ! -f $JOBS/parity.done ]] && ! job_running parity; then
        rm -rf "$WORK/parity"
        job_start parity python3 "$SCRIPT_DIR/parity.py" --bench "$bench" --server "$URL" \
            --contexts "${PARITY_CONTEXTS:-1k,4k,16k,32k}" --states cold,warm --rounds "${PARITY_ROUNDS:-3}" \
            --slot-dir "$WORK/slots" --out "$WORK/parity"
    fi
    wait_jobs parity
    local rc
    rc=$(job_rc parity)
    tail -n 30 "$JOBS/parity.log" >&2
    mkdir -p "$dest"
    for f in parity.md parity.json pairs.jsonl; do
        [[ -f $WORK/parity/$f ]] && cp "$WORK/parity/$f" "$dest/"
    done
    {
        echo "parity_s $(job_secs parity)"
        echo "hardware $(hardware)"
        nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
        for name in build model; do [[ -f $JOBS/$name.done ]] && echo "${name}_s $(job_secs "$name")"; done
    } >"$dest/parity-timings.txt"
    cp "$WORK/server.cmd" "$dest/parity-server.cmd"
    [[ $rc == 0 ]] || die "parity.py exited $rc (log $JOBS/parity.log)"
    log "parity done in $(job_secs parity) s: $dest/parity.md"
}

# ------------------------------------------------------------------ finish
json_get() { # file python-expression-on-d
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

do_finish() {
    local dest=${1:?finish needs a destination directory}
    [[ -f $RUN_DIR/run.json ]] || die "no sweep at $RUN_DIR: run 'sweep' first"
    local bench hw rc
    bench=$(bench_bin)
    hw=$(hardware)
    mkdir -p "$dest/plots"
    # bench exits 1 on findings: record the code, keep going (the outputs say what was found).
    # The records carry the measured ceilings (see sweep); the datasheet's are checked beside them.
    rc=0; "$bench" verify "$RUN_DIR" >"$dest/verify.txt" 2>&1 || rc=$?
    echo "exit $rc" >>"$dest/verify.txt"
    "$bench" verify "$RUN_DIR" --format json >"$dest/verify.json" 2>/dev/null || true
    if [[ -n $hw ]]; then
        rc=0; "$bench" verify "$RUN_DIR" --hardware "$hw" >"$dest/verify-datasheet.txt" 2>&1 || rc=$?
        echo "exit $rc" >>"$dest/verify-datasheet.txt"
    fi
    rc=0; "$bench" merge "$RUN_DIR" -o "$CANONICAL" --expect "$SCENARIO" >"$dest/merge.txt" 2>&1 || rc=$?
    echo "exit $rc" >>"$dest/merge.txt"
    [[ -f $CANONICAL ]] || die "merge wrote nothing (see $dest/merge.txt)"
    "$bench" report "$CANONICAL" --format markdown --plot "$dest/plots" >"$dest/report.md"
    "$bench" report "$CANONICAL" --format csv >"$dest/report.csv"
    cp "$CANONICAL" "$RUN_DIR/run.json" "$WORK/server.cmd" "$dest/"
    [[ -f $WORK/probe.json ]] && cp "$WORK/probe.json" "$dest/"
    cp "$RUN_DIR/measurements.jsonl" "$dest/"
    local t=$dest/timings.txt
    : >"$t"
    for name in build model sweep; do
        [[ -f $JOBS/$name.done ]] && echo "${name}_s $(job_secs "$name")" >>"$t"
    done
    for name in probe server_load; do
        [[ -f $WORK/${name}_s ]] && echo "${name}_s $(cat "$WORK/${name}_s")" >>"$t"
    done
    echo "hardware ${hw:-none}" >>"$t"
    # Warm must have read the disk, and the sweep must have left no saved session behind.
    python3 - "$RUN_DIR/measurements.jsonl" >>"$t" <<'PY'
import json, sys
warm = [json.loads(l) for l in open(sys.argv[1]) if '"cache_state":"warm"' in l.replace(" ", "")]
warm = [r for r in warm if r.get("record_type", "measurement") == "measurement"]
evicted = sum(1 for r in warm if r.get("page_cache") == "evicted")
saved = [r["saved_bytes"] for r in warm if r.get("saved_bytes")]
print(f"warm_page_cache_evicted {evicted} of {len(warm)}")
print(f"warm_saved_bytes_max {max(saved) if saved else 0}")
PY
    echo "slot_files_left $(find "$WORK/slots" -type f 2>/dev/null | wc -l)" >>"$t"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$t" 2>/dev/null || true
    tail -n 200 "$WORK/server.log" >"$dest/server.log.tail" 2>/dev/null || true
    log "results in $dest: $(ls "$dest" | tr '\n' ' ')"
}

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$SELF"; }

cmd=${1:-}
(($#)) && shift
case $cmd in
    stage) do_stage "$@" ;;
    build) prepare_jobs build ;;
    model) prepare_jobs model ;;
    prepare) prepare_jobs build model ;;
    smoke) do_smoke ;;
    sweep) do_sweep ;;
    finish) do_finish "$@" ;;
    parity) do_parity "$@" ;;
    all)
        STEP_BUDGET_S=0
        prepare_jobs build model
        do_sweep
        do_finish "${1:?all needs a destination directory}"
        do_stop
        ;;
    stop) do_stop ;;
    _job) job_body "$@" ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
