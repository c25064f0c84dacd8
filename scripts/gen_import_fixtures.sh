#!/usr/bin/env bash
# Regenerates tests/fixtures/import/ by running the real tools against a real llama-server.
# Not run in CI (it installs several GB of Python packages); run it by hand when a tool's format
# changes, then check `cargo test --test it import_tools::`.
#
# The committed fixtures were written on 2026-11-23 (CPython 3.11.7, llama-server from
# scripts/llama-server.sh, the generated `tiny` model) by:
#   vLLM 0.33.0 `vllm bench serve` (installed with --no-deps, plus torch 2.13.0, transformers
#     5.19.0, aiohttp 3.14.5, numpy 2.3.5 and the few modules its CLI imports; no GPU needed)
#   AIPerf 0.13.0 `aiperf profile`
#   GuideLLM 0.8.1 `guidellm run` (a scenario file)
# Each tool sent 4 streaming chat requests (64 prompt tokens, 16 output tokens by the tool's own
# tokenizer) at concurrency 2. Nothing in the outputs is edited.
#
# The tools need a tokenizer and cannot reach a model hub here: a tiny word-level tokenizer is
# built locally (its counts differ from the server's Llama tokenizer, which the AIPerf fixture
# shows as a prompt-size discrepancy, as AIPerf itself warns).
#
#   scripts/gen_import_fixtures.sh [WORK_DIR]     (default /tmp/ttft-import-fixtures)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${1:-/tmp/ttft-import-fixtures}
OUT=$ROOT/tests/fixtures/import
VLLM_VERSION=0.33.0
AIPERF_VERSION=0.13.0
GUIDELLM_VERSION=0.8.1
mkdir -p "$WORK" "$OUT/aiperf"

venv() { # venv NAME PACKAGES...: a virtual environment under $WORK with PACKAGES installed
    local dir=$WORK/venv-$1
    shift
    [[ -x $dir/bin/python ]] || python3 -m venv "$dir"
    "$dir/bin/pip" install -q "$@" >&2
    echo "$dir"
}

# --- the server (stopped on exit; its own state dir, so no one else's server is touched)
STATE=$WORK/llama
URL=$(bash "$ROOT/scripts/llama-server.sh" start --state-dir "$STATE" --parallel 2 | tail -n 1)
trap 'bash "$ROOT/scripts/llama-server.sh" stop --state-dir "$STATE"' EXIT
MODEL=$(curl -s "$URL/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')

# --- a local tokenizer (word level, from the Zen of Python and a few benchmark words)
VLLM=$(venv vllm "tokenizers" "transformers" aiohttp numpy tqdm regex pybase64 pillow)
TOK=$WORK/tokenizer
mkdir -p "$TOK"
"$VLLM/bin/python" - "$TOK" <<'EOF'
import codecs, contextlib, io, json, re, sys
with contextlib.redirect_stdout(io.StringIO()):
    import this
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
out = sys.argv[1]
words = set(re.findall(r"[a-z]+", codecs.decode(this.s, "rot13").lower()))
words |= set("the cache keeps keys and values of earlier tokens so a server can answer faster when "
             "the same prompt returns model memory bandwidth decode prefill batch request stream "
             "token time first second".split())
vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
for w in sorted(words):
    vocab.setdefault(w, len(vocab))
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.decoder = decoders.WordPiece(prefix="##")
tok.save(f"{out}/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "bos_token": "<s>",
           "eos_token": "</s>", "model_max_length": 65536,
           "chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"},
          open(f"{out}/tokenizer_config.json", "w"))
json.dump({"model_type": "llama"}, open(f"{out}/config.json", "w"))
EOF

# --- vLLM: the wheel without its GPU dependencies, then the modules `vllm bench serve` imports
"$VLLM/bin/pip" install -q --no-deps "vllm==$VLLM_VERSION" >&2
"$VLLM/bin/pip" install -q torch msgspec cbor2 psutil pyzmq requests openai openai-harmony orjson \
    fastapi uvicorn pydantic prometheus_client cachetools sentencepiece >&2 || true
vllm_bench() {
    "$VLLM/bin/python" -m vllm.entrypoints.cli.main bench serve --backend openai-chat \
        --base-url "$URL" --endpoint /v1/chat/completions --model "$MODEL" --tokenizer "$TOK" \
        --dataset-name random --random-input-len 64 --random-output-len 16 --num-prompts 4 \
        --max-concurrency 2 --save-result --result-dir "$WORK/vllm" "$@"
}
vllm_bench --save-detailed --result-filename vllm_detailed.json
vllm_bench --result-filename vllm_aggregate.json
cp "$WORK/vllm/vllm_detailed.json" "$WORK/vllm/vllm_aggregate.json" "$OUT/"

# --- AIPerf
AIPERF=$(venv aiperf "aiperf==$AIPERF_VERSION")
rm -rf "$WORK/aiperf"
"$AIPERF/bin/aiperf" profile --model "$MODEL" --url "$URL" --endpoint-type chat --streaming \
    --tokenizer "$TOK" --synthetic-input-tokens-mean 64 --synthetic-input-tokens-stddev 0 \
    --output-tokens-mean 16 --output-tokens-stddev 0 --request-count 4 --concurrency 2 \
    --artifact-dir "$WORK/aiperf" --ui-type none
cp "$WORK/aiperf/profile_export.jsonl" "$WORK/aiperf/profile_export_aiperf.json" "$OUT/aiperf/"

# --- GuideLLM
GUIDELLM=$(venv guidellm "guidellm==$GUIDELLM_VERSION")
mkdir -p "$WORK/guidellm"
cat >"$WORK/guidellm/scenario.json" <<EOF
{"metadata": {"name": "ttft-bench-import-fixture"},
 "spec": {
  "backend": {"kind": "openai_http", "target": "$URL", "model": "$MODEL",
              "request_format": "/v1/chat/completions"},
  "profile": {"kind": "concurrent", "streams": 2},
  "tokenizer": {"kind": "huggingface_auto", "model": "$TOK"},
  "data": [{"kind": "synthetic_text", "prompt_tokens": 64, "output_tokens": 16}],
  "constraints": [{"kind": "max_requests", "count": 4}],
  "outputs": [{"kind": "json", "path": "$WORK/guidellm/benchmarks.json"}]}}
EOF
(cd "$WORK/guidellm" && "$GUIDELLM/bin/guidellm" run --scenario scenario.json --disable-progress)
cp "$WORK/guidellm/benchmarks.json" "$OUT/guidellm_benchmarks.json"

echo "fixtures written to $OUT" >&2
