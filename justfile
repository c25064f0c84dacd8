# ttft-bench task runner. Install just with: pip install rust-just
set shell := ["bash", "-euo", "pipefail", "-c"]

# list recipes
default:
    @just --list

# this machine class's measured ceilings (scripts/host_profile.py: 26-32 GB/s read, 166 GFLOP/s f32 GEMM)
host := "--bandwidth-gbps 32 --tflops 0.17"

# the whole job on a real llama-server: build it (once), sweep every scenario, verify, merge, report
demo: server-build server-model
    #!/usr/bin/env bash
    set -euo pipefail
    state="${TTFT_BENCH_CACHE:-$HOME/.cache/ttft-bench}/run/demo"
    cargo build --release --quiet
    url=$(bash scripts/llama-server.sh start --state-dir "$state")
    trap 'bash scripts/llama-server.sh stop --state-dir "$state"' EXIT
    echo "llama-server at $url" >&2
    # --slot-dir: the server saves slots there (scripts/llama-server.sh), so each warm restore reads the disk.
    run=$(./target/release/bench sweep --server "$url" --scenario scenarios/demo.toml {{host}} --slot-dir "$state/slots" --out results) || [ $? -eq 1 ]
    # Findings (exit 1) are the point of the demo, not a failure of it; anything else is.
    ./target/release/bench verify "$run" || [ $? -eq 1 ]
    ./target/release/bench merge "$run" -o results/demo.json --expect scenarios/demo.toml || [ $? -eq 1 ]
    ./target/release/bench report results/demo.json --plot results/demo-plots
    ./target/release/bench report results/demo.json --format html -o results/demo.html
    # Is the server stable and correct under 2 concurrent greedy clients? (a mismatch is a finding)
    ./target/release/bench soak --server "$url" --concurrency 2 --iterations 5 --contexts 512 --output-tokens 32 --out results || [ $? -eq 1 ]
    # A second, smaller sweep of some of the same cells, compared with the first cell by cell.
    again=$(./target/release/bench sweep --server "$url" --preset llama.cpp --contexts 512,1024 --modes streaming \
        --cache-states cold,warm --runs 3 --output-tokens 32 --thermal off --slot-dir "$state/slots" --quiet --out results) || [ $? -eq 1 ]
    ./target/release/bench compare "$run" "$again"
    # The prompts users bring: a ShareGPT file, each row at its own length, hot measured on its 4th turn.
    ./target/release/bench sweep --server "$url" --preset llama.cpp --dataset tests/fixtures/datasets/sharegpt.json --cache-states cold,hot --turns 4 --runs 1 --output-tokens 16 --thermal off --quiet --out results || [ $? -eq 1 ]
    # The curve serving papers show: 1, 2 and 4 closed-loop users, output tok/s against TTFT p50/p99.
    ./target/release/bench load --server "$url" --preset llama.cpp --concurrency 1,2,4 --duration 8s --mix cold=0.5,hot=0.5 --contexts 512 --output-tokens 16 --thermal off --out results || [ $? -eq 1 ]
    echo "records: $run   canonical: results/demo.json   plots: results/demo-plots/" >&2

# all tests: unit, scripted-server and real llama-server and agent-memory end to end (builds llama.cpp
# and installs agent-memory once, ~15 min). The real-program tests run one at a time: two servers
# decoding at once on a small machine starve each other's HTTP threads, and the streams they send then
# arrive in bursts.
test: server-build server-model agent-memory-setup
    cargo test --workspace --lib --bins
    cargo test --test it
    cargo test --test real -- --test-threads 1

# tests without building llama.cpp (real-server tests skip with a message)
test-fast:
    cargo test --workspace --lib --bins
    cargo test --test it
    cargo test --test real -- --test-threads 1

# the inner loop: fmt, clippy, unit tests and the in-process/scripted-server tests (tests/it), no real server
check:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    cargo test --workspace --lib --bins
    cargo test --test it

# break the line behind each guarantee (scripts/mutations.toml) and check its cited tests fail; refreshes docs/mutations.md
mutants *ARGS:
    python3 scripts/mutation-check.py --write docs/mutations.md {{ARGS}}

# fmt + clippy, as CI runs them
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# fuzz every target in fuzz/ for SECONDS each (cargo-fuzz/libFuzzer on stable via RUSTC_BOOTSTRAP)
fuzz seconds="60":
    #!/usr/bin/env bash
    set -euo pipefail
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    cd fuzz
    # libFuzzer needs nightly-only flags; RUSTC_BOOTSTRAP lets the one stable toolchain take them.
    export RUSTC_BOOTSTRAP=1
    for target in $(cargo fuzz list); do
        # New inputs go to a scratch dir; the committed corpus is only read (keep it small and reviewed).
        scratch=$(mktemp -d)
        echo "== $target ({{seconds}} s)" >&2
        cargo fuzz run -O "$target" "$scratch" "corpus/$target" -- -max_total_time={{seconds}} -max_len=65536 \
            || { echo "crash in $target: copy fuzz/artifacts/$target/* to fuzz/regressions/$target/" >&2; exit 1; }
        rm -rf "$scratch"
    done

# what bench adds (release build): in-process stamp overhead at 1/8/64 streams; against
# bench-scripted-server in another process: TTFT/ITL error at 1/64/256, client CPU, ingest capacity
# (table on stdout, JSON in target/bench-overhead.json); the highest rate bench load offers with
# send lag p99 < 1 ms
bench:
    cargo bench --bench overhead
    cargo bench --bench external
    cargo bench --bench load_rate

# the anchors (docs/anchors.md): AIPerf and GuideLLM (pinned, installed once into a cache) beside bench,
# each against its own bench-scripted-server (release) at concurrency 1 and 64 with the same prompts and
# output tokens: each client's TTFT error against the server's own log (p50/p99) and its CPU per 100 requests
bench-anchors:
    bash scripts/anchors.sh table

# deploy/slurm/sweep.sbatch on a real one-node Slurm (installs slurm-wlm and munge if missing; root):
# a 4-task array against bench-scripted-server, one task SIGKILLed mid-shard and requeued, resumed,
# merged with --expect; every daemon it starts is stopped (scripts/slurm-e2e.sh)
slurm-e2e:
    bash scripts/slurm-e2e.sh

# the Kubernetes manifests against the Kubernetes schemas (kubernetes-validate, strict; pip-installed if missing)
k8s-validate:
    bash scripts/k8s-validate.sh

# measure this machine's memory bandwidth and GEMM throughput (numpy) for --bandwidth-gbps/--tflops
host-profile:
    python3 scripts/host_profile.py

# the GPU reference run (docs/reference.md): build llama.cpp with CUDA, generate the 8B-shaped model,
# probe the GPU, sweep, verify, merge, report into DEST; `scripts/gpu-reference.sh help` for the steps
gpu-reference DEST="results/reference-new":
    cargo build --release
    bash scripts/gpu-reference.sh all {{DEST}}

# --- llama.cpp server (scripts/llama-server.sh) ---
# Local llama-server for tests/benchmarks. Cache: ${TTFT_BENCH_CACHE:-~/.cache/ttft-bench}

# find or build llama-server (~8 min on 2 cores, once); prints its path
server-build:
    @bash scripts/llama-server.sh build

# find or generate the random-weight model (tiny|medium); prints its path
server-model variant="tiny":
    @bash scripts/llama-server.sh model {{ variant }}

# start the default server in the background (extra args go to scripts/llama-server.sh start); prints its URL
server *args:
    @bash scripts/llama-server.sh start {{ args }}

# stop the default server
server-stop *args:
    @bash scripts/llama-server.sh stop {{ args }}

# print the URL of the running default server
server-url:
    @bash scripts/llama-server.sh url
# --- end llama.cpp server ---

# --- agent-memory, the origin benchmark's server (scripts/agent-memory.sh, docs/agent-memory.md) ---
# Its source: AGENT_MEMORY_SOURCE (a checkout or a .tar.gz), else the snapshot beside the checkout (docs/agent-memory.md).

# install it (venv, mlx CPU wheels, the package) and generate its model, once (~50 s); prints its cache dir
agent-memory-setup:
    @bash scripts/agent-memory.sh setup

# start it in the background (extra args go to scripts/agent-memory.sh start); prints its URL
agent-memory *args:
    @bash scripts/agent-memory.sh start {{ args }}

# stop it
agent-memory-stop *args:
    @bash scripts/agent-memory.sh stop {{ args }}
# --- end agent-memory ---
