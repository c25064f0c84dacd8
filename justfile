# ttft-bench task runner. Install just with: pip install rust-just
set shell := ["bash", "-euo", "pipefail", "-c"]

# list recipes
default:
    @just --list

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
