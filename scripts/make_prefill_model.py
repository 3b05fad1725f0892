#!/usr/bin/env python3
"""A random-weight Qwen3.5 text checkpoint of fixture size for CPU prefill timing (docs/benchmarks.md).

    python3 scripts/make_prefill_model.py OUT

writes OUT/config.json and OUT/model.safetensors (BF16, 7 MB): 6 layers (L L F L L F), hidden 192, intermediate
512, vocab 2048, attention 4 heads / 2 kv heads / head_dim 64, GDN 2 key / 4 value heads, dk 32, dv 48. Standard
library only; a fixed seed, so every run writes the same bytes. No tokenizer: bench makes its prompts from a fixed
token-id pattern.
"""
import array
import json
import math
import os
import random
import struct
import sys

V, D, F, L = 2048, 192, 512, 6
HQ, HKV, DH = 4, 2, 64
GK, GV, DK, DV = 2, 4, 32, 48


def config():
    return {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", "vocab_size": V,
            "hidden_size": D, "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": False,
            "attn_output_gate": True, "linear_conv_kernel_dim": 4, "max_position_embeddings": 32768,
            "intermediate_size": F, "num_hidden_layers": L, "full_attention_interval": 3,
            "num_attention_heads": HQ, "num_key_value_heads": HKV, "head_dim": DH, "linear_num_key_heads": GK,
            "linear_num_value_heads": GV, "linear_key_head_dim": DK, "linear_value_head_dim": DV,
            "rope_theta": 1000000, "partial_rotary_factor": 0.25, "tie_word_embeddings": False,
            "eos_token_id": V - 1, "dtype": "bfloat16"}


def bf16_bytes(values):
    """Round-to-nearest-even f32 -> bf16."""
    bits = array.array("I")
    bits.frombytes(array.array("f", values).tobytes())
    return array.array("H", [((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF for b in bits]).tobytes()


def tensors(rng):
    out = []

    def add(name, shape, draw):
        n = math.prod(shape)
        out.append((name, shape, bf16_bytes([draw() for _ in range(n)])))

    def linear(name, n, k):
        add(name, [n, k], lambda: rng.gauss(0, 1 / math.sqrt(k)))

    def norm(name, n):
        add(name, [n], lambda: rng.gauss(0, 0.1))

    add("model.embed_tokens.weight", [V, D], lambda: rng.gauss(0, 1))
    for i in range(L):
        p = f"model.layers.{i}."
        norm(p + "input_layernorm.weight", D)
        norm(p + "post_attention_layernorm.weight", D)
        linear(p + "mlp.gate_proj.weight", F, D)
        linear(p + "mlp.up_proj.weight", F, D)
        linear(p + "mlp.down_proj.weight", D, F)
        if i % 3 == 2:
            a = p + "self_attn."
            linear(a + "q_proj.weight", HQ * DH * 2, D)  # per head [query | gate]
            linear(a + "k_proj.weight", HKV * DH, D)
            linear(a + "v_proj.weight", HKV * DH, D)
            linear(a + "o_proj.weight", D, HQ * DH)
            norm(a + "q_norm.weight", DH)
            norm(a + "k_norm.weight", DH)
        else:
            a = p + "linear_attn."
            conv_dim = 2 * GK * DK + GV * DV
            linear(a + "in_proj_qkv.weight", conv_dim, D)
            linear(a + "in_proj_z.weight", GV * DV, D)
            linear(a + "in_proj_a.weight", GV, D)
            linear(a + "in_proj_b.weight", GV, D)
            add(a + "conv1d.weight", [conv_dim, 1, 4], lambda: rng.gauss(0, 0.5))
            add(a + "A_log", [GV], lambda: math.log(rng.uniform(1, 16)))
            norm(a + "dt_bias", GV)
            norm(a + "norm.weight", DV)
            linear(a + "out_proj.weight", D, GV * DV)
    norm("model.norm.weight", D)
    linear("lm_head.weight", V, D)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_prefill_model.py OUT")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    header, offset, ts = {"__metadata__": {"format": "pt"}}, 0, tensors(random.Random(192))
    for name, shape, data in ts:
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, data in ts:
            f.write(data)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config(), f, indent=1)


if __name__ == "__main__":
    main()
