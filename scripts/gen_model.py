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
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import gguf

# Bump whenever the output would change; scripts/llama-server.sh keys its
# cache on this string, so a bump makes it regenerate the cached models.
# Adding a variant does not change the others' bytes (each tensor's random
# stream is derived from its own name), so it needs no bump.
GENERATOR_VERSION = "ttft-random-llama-v2-wordchain"

VARIANTS = {
    # ~38 MB f16: 4 layers, 256 wide. Fast enough on 2 CPU cores for tests.
    "tiny": dict(n_layer=4, n_embd=256, n_head=4, n_ff=768, qtype="f16"),
    # ~1 GB q8_0: 16 layers, 2048 wide (~0.95 B params). Only on request.
    "medium": dict(n_layer=16, n_embd=2048, n_head=16, n_ff=5632, qtype="q8_0"),
    # ~14.5 GB f16: Llama-3-8B's shape (32 layers, 4096 wide, 32 heads, grouped-query attention
    # with 8 KV heads, FFN 14336) over the same 32k SPM vocab. For GPU reference runs
    # (scripts/gpu-reference.sh); decode reads ~14.5 GB per token, like a real f16 8B model.
    # norm_scale: the layers' input norms. At this width and depth, 32 layers of full-scale random
    # updates add ~8x the embedding's magnitude to the residual stream and the word chain breaks into
    # loops (seen on an H100: 18 of 186 replies failed the repetition gate); 0.1 keeps the sum of
    # the updates under half the embedding. The weights themselves stay full-scale random data.
    # tile_rows: the layer matrices repeat one random band of that many rows (see TiledWeight): a
    # valid f16 GGUF of the right size in about a minute, where drawing 7 G random numbers takes
    # several. Timing does not depend on the values; the word chain (embedding and LM head) stays
    # fully random.
    "llama8b": dict(n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336, qtype="f16",
                    norm_scale=0.1, tile_rows=64),
    # The same recipe (GQA, tiled layers, scaled norms) at tiny size: tests the llama8b path on a CPU.
    "gqa-tiny": dict(n_layer=4, n_embd=256, n_head=4, n_head_kv=2, n_ff=768, qtype="f16",
                     norm_scale=0.1, tile_rows=64),
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


def encode(data: np.ndarray, qtype: str) -> tuple[np.ndarray, gguf.GGMLQuantizationType | None]:
    if qtype == "q8_0":
        q = gguf.GGMLQuantizationType.Q8_0
        return gguf.quants.quantize(data, q), q
    return data.astype(np.float16), None


def add_weight(writer: gguf.GGUFWriter, name: str, encoded: tuple) -> None:
    data, raw_dtype = encoded
    if raw_dtype is None:
        writer.add_tensor(name, data)
    else:
        writer.add_tensor(name, data, raw_dtype=raw_dtype)


def layer_weight(seed: int, name: str, shape: tuple[int, int], scale: float, qtype: str) -> tuple:
    """One projection matrix, encoded. `scale` != 1 marks an output projection: its row 0 (output
    dim 0, the EOS-guard dim) is zeroed so no layer ever writes that dim."""
    w = randn(seed, name, shape)
    if scale != 1.0:
        w *= scale
        w[0, :] = 0.0
    return encode(w, qtype)


class TiledWeight:
    """A (rows, cols) f16 matrix that repeats one random band of `band.shape[0]` rows, written
    straight to the file (GGUFWriter only needs shape, dtype, nbytes and tofile), so a 14.5 GB
    model is never held in memory nor drawn number by number."""

    def __init__(self, band: np.ndarray, rows: int):
        self.band = band.astype(np.float16)
        self.shape = (rows, band.shape[1])
        self.dtype = self.band.dtype
        self.nbytes = rows * band.shape[1] * self.band.itemsize

    def tofile(self, fout) -> None:
        rows, per = self.shape[0], self.band.shape[0]
        # ~32 MB chunks of whole bands, then the remainder.
        bands = max(1, min(rows // per, (32 << 20) // max(1, self.band.nbytes)))
        chunk = np.tile(self.band, (bands, 1))
        full, rest = divmod(rows, bands * per)
        for _ in range(full):
            chunk.tofile(fout)
        if rest:
            chunk[:rest].tofile(fout)


def tiled_weight(seed: int, name: str, shape: tuple[int, int], scale: float, tile_rows: int) -> tuple:
    """`layer_weight` for a tiled variant: row 0 of the band (so every tile_rows-th output dim,
    the EOS-guard dim among them) is zeroed in output projections."""
    band = randn(seed, name, (min(tile_rows, shape[0]), shape[1]))
    if scale != 1.0:
        band *= scale
        band[0, :] = 0.0
    return TiledWeight(band, shape[0]), None


def generate(variant: str, vocab_path: str, out_path: str, seed: int, threads: int) -> None:
    cfg = VARIANTS[variant]
    n_layer, n_embd, n_head, n_ff, qtype = (
        cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["n_ff"], cfg["qtype"])
    n_head_kv = cfg.get("n_head_kv", n_head)
    head_dim = n_embd // n_head
    n_embd_kv = head_dim * n_head_kv  # grouped-query attention: K and V are narrower than Q

    writer = gguf.GGUFWriter(out_path, "llama")
    writer.add_name(f"ttft-bench random {variant} ({GENERATOR_VERSION}, seed {seed})")
    tokens, eos_id = copy_tokenizer(writer, vocab_path)
    n_vocab = len(tokens)
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(
        gguf.LlamaFileType.MOSTLY_Q8_0 if qtype == "q8_0" else gguf.LlamaFileType.MOSTLY_F16)

    # Token embeddings: dim 0 is the EOS-guard constant.
    emb = randn(seed, "token_embd", (n_vocab, n_embd))
    emb[:, 0] = EOS_GUARD_CONST
    add_weight(writer, "token_embd.weight", encode(emb, qtype))

    # The layer matrices are drawn in parallel (numpy releases the GIL while it fills and converts
    # arrays; an 8B-shaped model is ~7 G random numbers) and added in a fixed order: every tensor
    # has its own random stream, so the file is the same for any thread count.
    shapes = {"attn_q": (n_embd, n_embd), "attn_k": (n_embd_kv, n_embd), "attn_v": (n_embd_kv, n_embd),
              "attn_output": (n_embd, n_embd), "ffn_gate": (n_ff, n_embd), "ffn_up": (n_ff, n_embd),
              "ffn_down": (n_embd, n_ff)}
    scales = {"attn_output": LAYER_OUT_SCALE, "ffn_down": LAYER_OUT_SCALE}
    order = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
             "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
    ones = np.ones(n_embd, dtype=np.float32)  # norms stay f32 (llama.cpp expects it)
    layer_norm = np.full(n_embd, cfg.get("norm_scale", 1.0), dtype=np.float32)
    jobs = [(f"blk.{i}.{t}", t) for i in range(n_layer) for t in order]
    tile_rows = cfg.get("tile_rows")
    if tile_rows and qtype != "f16":
        sys.exit(f"variant {variant}: tiled weights are written as f16 only")

    def weight(job: tuple[str, str]):
        name, kind = job
        if kind not in shapes:
            return None
        if tile_rows:
            return tiled_weight(seed, name, shapes[kind], scales.get(kind, 1.0), tile_rows)
        return layer_weight(seed, name, shapes[kind], scales.get(kind, 1.0), qtype)

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        results = pool.map(weight, jobs)
        for (name, kind), encoded in zip(jobs, results):
            if encoded is None:
                writer.add_tensor(f"{name}.weight", layer_norm)
            else:
                add_weight(writer, f"{name}.weight", encoded)

    writer.add_tensor("output_norm.weight", ones)
    # LM head: the guard dim feeds only the EOS logit, with a huge negative weight.
    # Row of token j = CHAIN_GAIN x sum of embeddings of the tokens whose next is j.
    out = np.zeros((n_vocab, n_embd), dtype=np.float32)
    np.add.at(out, next_tokens(tokens, seed), emb * (CHAIN_GAIN / INIT_STD))
    del emb
    out[:, 0] = 0.0
    out[eos_id, 0] = EOS_GUARD_WEIGHT
    add_weight(writer, "output.weight", encode(out, qtype))
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
    ap.add_argument("--threads", type=int, default=min(8, os.cpu_count() or 1),
                    help="threads drawing the layer matrices (the output does not depend on it)")
    args = ap.parse_args()
    # Write next to the target and rename, so a killed run never leaves a
    # truncated model behind.
    tmp = f"{args.out}.tmp.{os.getpid()}"
    # SIGTERM -> SystemExit, so the `finally` below removes the partial file.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        generate(args.variant, args.vocab, tmp, args.seed, args.threads)
        os.replace(tmp, args.out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


if __name__ == "__main__":
    main()
