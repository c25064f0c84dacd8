#!/usr/bin/env python3
"""Generate a tiny random-weight llama model in the Hugging Face layout for MLX servers.

What it writes into --out (a directory):
  config.json              llama architecture, float32 (the only dtype whose matmuls reach BLAS on
                           MLX's CPU backend, docs/agent-memory.md)
  model.safetensors        random weights, deterministic for one GENERATOR_VERSION and seed
  tokenizer.json           a byte-level BPE trained here with the `tokenizers` package on local text
  tokenizer_config.json    a ChatML chat template and the special tokens

The weights are random, so the text is gibberish; what a TTFT benchmark needs is a real tokenizer
(prompt lengths behave like a real model's), a chat template, and the compute of a real model.
head_dim is 64: MLX's quantized KV cache groups 64 values, so head_dim must be a multiple of 64.

Readable gibberish, never an end: purely random weights pick tokens without a leading space as
often as words, and ttft-bench's quality gate rightly fails such text (spacing_corruption), and
they may pick the end-of-turn token at once (too few tokens to time a decode). So residual
dimension 0 holds a constant in every token embedding that no layer writes to (row 0 of every
o_proj and down_proj is zero); after the final RMSNorm it is still large and positive, and the LM
head maps it to a bonus on the logits of space-prefixed letter words and a large malus on the
special tokens. Greedy decoding then emits a sequence of whole words, chosen by the random rest of
the network, and runs to max_tokens. The layers still cost the compute a real model's would.

Needs numpy, safetensors and tokenizers (all in the agent-memory server's venv).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

GENERATOR_VERSION = "mlx-llama-v2"

# The shape: 4 layers, 256 wide, 4 query heads and 2 KV heads of 64, FFN 768, vocab 8192.
SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 8192,
}

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}"
    "{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def corpus_files(roots: list[Path]) -> list[str]:
    """Text files under the roots, sorted, so the tokenizer is the same on every machine."""
    out = []
    for root in roots:
        if root.is_file():
            out.append(str(root))
            continue
        for p in sorted(root.rglob("*")):
            if p.is_file() and p.suffix in {".md", ".txt", ".rs", ".py", ".toml"}:
                out.append(str(p))
    if not out:
        sys.exit(f"gen_mlx_model.py: no text files under {', '.join(map(str, roots))} (--corpus)")
    return out


def train_tokenizer(files: list[str], vocab: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    return tok


def weights(cfg: dict, seed: int, word_ids: list[int], special_ids: list[int]) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd, nq, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def w(rows: int, cols: int):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)

    t = {
        "model.embed_tokens.weight": w(v, h),
        "model.norm.weight": np.ones(h, dtype=np.float32),
        "lm_head.weight": w(v, h),
    }
    # The guard dimension (see the module docs): constant in, untouched by the layers, read by the head.
    # Token embeddings of unit scale carry each token's identity through the layers to the head,
    # so the next word depends on the context (a constant-dominated residual would repeat one word).
    t["model.embed_tokens.weight"] *= 50.0
    t["model.embed_tokens.weight"][:, 0] = 4.0
    t["lm_head.weight"][:, 0] = 0.0
    t["lm_head.weight"][word_ids, 0] = 1.0
    t["lm_head.weight"][special_ids, 0] = -20.0
    t["lm_head.weight"][:, 1:] *= 5.0
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        t[p + "self_attn.q_proj.weight"] = w(nq * hd, h)
        t[p + "self_attn.k_proj.weight"] = w(nkv * hd, h)
        t[p + "self_attn.v_proj.weight"] = w(nkv * hd, h)
        t[p + "self_attn.o_proj.weight"] = w(h, nq * hd)
        t[p + "self_attn.o_proj.weight"][0, :] = 0.0
        t[p + "mlp.gate_proj.weight"] = w(i, h)
        t[p + "mlp.up_proj.weight"] = w(i, h)
        t[p + "mlp.down_proj.weight"] = w(h, i)
        t[p + "mlp.down_proj.weight"][0, :] = 0.0
        t[p + "input_layernorm.weight"] = np.ones(h, dtype=np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(h, dtype=np.float32)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="model directory to write")
    ap.add_argument(
        "--corpus", action="append", type=Path, required=True,
        help="a text file or a directory of text files to train the tokenizer on (repeatable)",
    )
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    from safetensors.numpy import save_file

    tok = train_tokenizer(corpus_files(args.corpus), SHAPE["vocab_size"])
    vocab = tok.get_vocab_size()
    eos = tok.token_to_id("<|im_end|>")
    cfg = dict(
        SHAPE,
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        vocab_size=vocab,
        max_position_embeddings=32768,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
        hidden_act="silu",
        torch_dtype="float32",
        bos_token_id=tok.token_to_id("<|endoftext|>"),
        eos_token_id=eos,
        generator_version=GENERATOR_VERSION,
    )
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 32768,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHATML,
    }

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=2) + "\n"
    )
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}) + "\n")
    # Byte-level BPE writes a leading space as "Ġ": words are "Ġ" + 2 to 10 ASCII letters.
    words = [i for t, i in tok.get_vocab().items() if t.startswith("Ġ") and 3 <= len(t) <= 11 and t[1:].isascii() and t[1:].isalpha()]
    specials = [tok.token_to_id(t) for t in SPECIALS]
    tensors = weights(cfg, args.seed, sorted(words), specials)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    n = sum(a.size for a in tensors.values())
    print(f"gen_mlx_model.py: {out}: {n / 1e6:.1f}M parameters, vocab {vocab}", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
