#!/usr/bin/env python3
"""Generate a random-weight llama-architecture GGUF model for benchmarking.

The weights are random, so the text it produces is gibberish; what matters for
a TTFT / throughput benchmark is that
  * the tokenizer is real (copied from llama.cpp's llama-spm test vocab), so
    prompt token counts behave like a real Llama-2 style model,
  * a chat template is present, so /v1/chat/completions works,
  * the context length metadata is large (65536), and
  * the model can never emit EOS, so every request runs to max_tokens and the
    number of generated tokens is exactly what the benchmark asked for.

Readable output: greedy decoding of purely random weights repeats one token
without spaces, which ttft-bench's own quality gate rightly rejects
(spacing_corruption, repetition_loop). So the residual stream carries a direct
path from the current token to a chosen next one: every token t has a "next"
word token (word tokens -- "▁" + 3..9 letters -- form one long shuffled
cycle; every other token jumps into the cycle), and the LM-head row of a word
token is the sum of the embeddings of the tokens that lead to it. The layers'
output projections are scaled down so they barely disturb that path (they still
cost the same compute, which is what a benchmark measures). The result is an
endless, non-repeating sequence of real word pieces: " report metal against ...".

How EOS is made impossible: residual-stream dimension 0 ("the EOS-guard dim")
holds a positive constant in every token embedding, and no layer ever writes to
it (row 0 of every attn_output / ffn_down matrix is zero), so after the final
RMSNorm it is still a positive number for every position. The output matrix
maps that dimension to the EOS logit with a huge negative weight (and to no
other logit). The constant is large relative to the other dims, so RMSNorm
keeps it near sqrt(n_embd); even in a pathological case it stays positive, and
the EOS logit stays far below all others.

Needs numpy and the `gguf` package (pass llama.cpp's gguf-py via PYTHONPATH,
or `pip install gguf`). Deterministic: the same GENERATOR_VERSION, variant and
seed always give the same file.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import zlib

import numpy as np

import gguf

# Bump whenever the output would change; scripts/llama-server.sh keys its
# cache on this string, so a bump makes it regenerate the cached models.
GENERATOR_VERSION = "ttft-random-llama-v2-wordchain"

VARIANTS = {
    # ~38 MB f16: 4 layers, 256 wide. Fast enough on 2 CPU cores for tests.
    "tiny": dict(n_layer=4, n_embd=256, n_head=4, n_ff=768, qtype="f16"),
    # ~1 GB q8_0: 16 layers, 2048 wide (~0.95 B params). Only on request.
    "medium": dict(n_layer=16, n_embd=2048, n_head=16, n_ff=5632, qtype="q8_0"),
}

CONTEXT_LENGTH = 65536
EOS_GUARD_CONST = 1.0  # value of residual dim 0 in every token embedding
EOS_GUARD_WEIGHT = -1.0e4  # output[EOS, 0]; fits f16 and q8_0
INIT_STD = 0.02
LAYER_OUT_SCALE = 0.01  # attn_output / ffn_down scale: keep the token->next path dominant
CHAIN_GAIN = 20.0  # LM-head gain of the token->next path: the right logit is ~15x the noise

# Llama-2 style chat template (the vocab file ships none; llama-server would
# otherwise fall back to ChatML, whose <|im_start|> markers are not special
# tokens in this vocab). BOS is added by the tokenizer (add_bos_token=true), so
# the template does not emit it.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}"
    "<<SYS>>\n{{ message['content'] }}\n<</SYS>>\n\n"
    "{% elif message['role'] == 'user' %}"
    "[INST] {{ message['content'] }} [/INST]"
    "{% else %}"
    " {{ message['content'] }}{{ eos_token }}"
    "{% endif %}"
    "{% endfor %}"
)


def rng_for(seed: int, name: str) -> np.random.Generator:
    # One generator per tensor, derived from its name: output does not depend
    # on the order tensors are created in.
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def randn(seed: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    return rng_for(seed, name).standard_normal(shape, dtype=np.float32) * INIT_STD


def copy_tokenizer(writer: gguf.GGUFWriter, vocab_path: str) -> tuple[list[str], int]:
    """Copy every tokenizer.* KV from a llama.cpp vocab GGUF. Returns (tokens, eos_id)."""
    reader = gguf.GGUFReader(vocab_path)
    tokens = eos_id = None
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub_type = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        writer.add_key_value(key, value, vtype, sub_type=sub_type)
        if key == "tokenizer.ggml.tokens":
            tokens = [str(t) for t in value]
        elif key == "tokenizer.ggml.eos_token_id":
            eos_id = int(value)
    if tokens is None or eos_id is None:
        sys.exit(f"{vocab_path}: no tokenizer.ggml.tokens / eos_token_id")
    if "tokenizer.chat_template" not in reader.fields:
        writer.add_chat_template(CHAT_TEMPLATE)
    return tokens, eos_id


def next_tokens(tokens: list[str], seed: int) -> np.ndarray:
    """next[t]: the token greedy decoding should emit after t (see the module doc)."""
    words = [i for i, t in enumerate(tokens)
             if t.startswith("\u2581") and t[1:].isascii() and t[1:].isalpha() and 3 <= len(t) - 1 <= 9]
    if len(words) < 100:
        sys.exit("vocab has too few word tokens for the word chain")
    cycle = np.array(words)
    rng_for(seed, "word-chain").shuffle(cycle)
    nxt = cycle[rng_for(seed, "word-entry").integers(0, len(cycle), len(tokens))]
    nxt[cycle] = np.roll(cycle, -1)  # word -> the following word of the cycle
    return nxt


def add_weight(writer: gguf.GGUFWriter, name: str, data: np.ndarray, qtype: str) -> None:
    if qtype == "q8_0":
        q = gguf.GGMLQuantizationType.Q8_0
        writer.add_tensor(name, gguf.quants.quantize(data, q), raw_dtype=q)
    else:
        writer.add_tensor(name, data.astype(np.float16))


def generate(variant: str, vocab_path: str, out_path: str, seed: int) -> None:
    cfg = VARIANTS[variant]
    n_layer, n_embd, n_head, n_ff, qtype = (
        cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["n_ff"], cfg["qtype"])
    head_dim = n_embd // n_head

    writer = gguf.GGUFWriter(out_path, "llama")
    writer.add_name(f"ttft-bench random {variant} ({GENERATOR_VERSION}, seed {seed})")
    tokens, eos_id = copy_tokenizer(writer, vocab_path)
    n_vocab = len(tokens)
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(
        gguf.LlamaFileType.MOSTLY_Q8_0 if qtype == "q8_0" else gguf.LlamaFileType.MOSTLY_F16)

    # Token embeddings: dim 0 is the EOS-guard constant.
    emb = randn(seed, "token_embd", (n_vocab, n_embd))
    emb[:, 0] = EOS_GUARD_CONST
    add_weight(writer, "token_embd.weight", emb, qtype)

    ones = np.ones(n_embd, dtype=np.float32)  # norms stay f32 (llama.cpp expects it)
    for i in range(n_layer):
        p = f"blk.{i}"
        writer.add_tensor(f"{p}.attn_norm.weight", ones)
        for t in ("attn_q", "attn_k", "attn_v"):
            add_weight(writer, f"{p}.{t}.weight", randn(seed, f"{p}.{t}", (n_embd, n_embd)), qtype)
        # Output projections never write the EOS-guard dim (row 0 = output dim 0).
        w = randn(seed, f"{p}.attn_output", (n_embd, n_embd)) * LAYER_OUT_SCALE
        w[0, :] = 0.0
        add_weight(writer, f"{p}.attn_output.weight", w, qtype)
        writer.add_tensor(f"{p}.ffn_norm.weight", ones)
        for t in ("ffn_gate", "ffn_up"):
            add_weight(writer, f"{p}.{t}.weight", randn(seed, f"{p}.{t}", (n_ff, n_embd)), qtype)
        w = randn(seed, f"{p}.ffn_down", (n_embd, n_ff)) * LAYER_OUT_SCALE
        w[0, :] = 0.0
        add_weight(writer, f"{p}.ffn_down.weight", w, qtype)

    writer.add_tensor("output_norm.weight", ones)
    # LM head: the guard dim feeds only the EOS logit, with a huge negative weight.
    # Row of token j = CHAIN_GAIN x sum of embeddings of the tokens whose next is j.
    out = np.zeros((n_vocab, n_embd), dtype=np.float32)
    np.add.at(out, next_tokens(tokens, seed), emb * (CHAIN_GAIN / INIT_STD))
    del emb
    out[:, 0] = 0.0
    out[eos_id, 0] = EOS_GUARD_WEIGHT
    add_weight(writer, "output.weight", out, qtype)
    del out

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="tiny")
    ap.add_argument("--vocab", required=True,
                    help="llama.cpp vocab GGUF to copy the tokenizer from "
                         "(vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf)")
    ap.add_argument("--out", required=True, help="output .gguf path")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    # Write next to the target and rename, so a killed run never leaves a
    # truncated model behind.
    tmp = f"{args.out}.tmp.{os.getpid()}"
    # SIGTERM -> SystemExit, so the `finally` below removes the partial file.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        generate(args.variant, args.vocab, tmp, args.seed)
        os.replace(tmp, args.out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


if __name__ == "__main__":
    main()
