#!/usr/bin/env python3
"""Build the tiny random-weight Qwen3.5 (HF `qwen3_5`) test fixtures for qwenrt.

Usage:  python3 scripts/make_fixtures.py tests/data

For every model in SPECS this writes tests/data/<name>/ containing
  config.json                      the checkpoint config (written by hand, in the exact form under test)
  *.safetensors (+ index)          weights in the stored dtype (BF16 / F16 / F32)
  reference.safetensors            HF transformers float32 references (F32 / I32 tensors)
  reference.json                   human-readable summary of the above
  reference-long.safetensors/.json the long prompt (LONG_LEN tokens): logits at LONG_ROWS, LONG_GEN greedy tokens
Everything is deterministic: weights and prompts come from seeded torch generators, and the HF model
is built from exactly the stored (dtype-rounded) weight values, widened to float32.
See tests/data/README.md for the file descriptions.
"""

import hashlib
import json
import math
import os
import shutil
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

import transformers
from transformers import GenerationConfig, Qwen3_5ForCausalLM, Qwen3_5TextConfig
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf_qwen35

PROMPT_LEN = 130
SHORT_LEN = 5
GEN_LEN = 40
MIN_MARGIN = 5e-3  # stricter than the 1e-3 requirement, for robustness
MAX_ATTEMPTS = 50

# The long-prompt reference (reference-long.safetensors) of the models whose spec has "long": True. Prompt and
# continuation together fill max_position_embeddings (4096), the context the config promises. LONG_ROWS are the
# positions whose logits are kept: the first, the chunk (64) and CPU piece (256) boundaries near the start, points
# spread over the prompt, and the last; every row of a 4080-token forward would be 16 MB.
LONG_LEN = 4080
LONG_GEN = 16
LONG_ROWS = (0, 1, 63, 64, 255, 256, 513, 1023, 1024, 2047, 2049, 3071, 4000, LONG_LEN - 1)

L, F = "linear_attention", "full_attention"

# --------------------------------------------------------------------------------------------------
# Model specifications. "config" is written verbatim (as text config); "form" selects the file layout.
# --------------------------------------------------------------------------------------------------
COMMON = {
    "hidden_size": 128,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "attention_bias": False,
    "attn_output_gate": True,
    "linear_conv_kernel_dim": 4,
    "max_position_embeddings": 4096,
}

# The text-only checkpoints (Qwen3_5ForCausalLM's flat layout, keys under model.): no vision tower, no MTP head.
TEXT_ONLY = {"form": "flat", "mtp": False, "visual": False}
TEXT_ONLY_CONFIG = {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text"}

SPECS = {
    "tiny-mm": {
        "form": "mm",  # Qwen3_5ForConditionalGeneration layout, keys under model.language_model.
        "dtype": "bfloat16",
        "base_seed": 1000,
        "long": True,
        "shards": 1,
        "mtp": True,
        "visual": True,
        "config": {
            "model_type": "qwen3_5_text",
            "vocab_size": 1024,
            **COMMON,
            "intermediate_size": 256,
            "num_hidden_layers": 6,
            "layer_types": [L, F, L, L, F, L],
            "full_attention_interval": 4,  # must be ignored: the explicit list wins
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 6,
            "linear_key_head_dim": 32,
            "linear_value_head_dim": 32,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000000,
                "partial_rotary_factor": 0.25,
                "mrope_section": [2, 1, 1],
                "mrope_interleaved": True,
            },
            "tie_word_embeddings": False,
            "mtp_num_hidden_layers": 1,
            "mtp_use_dedicated_embeddings": False,
            "mamba_ssm_dtype": "float32",
            "eos_token_id": 1023,
            "dtype": "bfloat16",
        },
    },
    "tiny-flat": {
        **TEXT_ONLY,
        "dtype": "float16",
        "base_seed": 2000,
        "long": True,
        "shards": 2,
        "config": {
            **TEXT_ONLY_CONFIG,
            "vocab_size": 1000,
            **COMMON,
            "intermediate_size": 384,
            "num_hidden_layers": 6,
            "full_attention_interval": 3,  # no layer_types: layers 2 and 5 are full attention
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 64,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 32,
            "linear_value_head_dim": 48,
            "rope_theta": 1000000,  # legacy top-level form, no rope_parameters dict
            "partial_rotary_factor": 0.25,
            "tie_word_embeddings": False,
            "eos_token_id": 999,
            "dtype": "float16",
        },
        # what the config above must mean (checked against HF's standardised config)
        "expect_layer_types": [L, L, F, L, L, F],
        "expect_rope": {"rope_type": "default", "rope_theta": 1000000, "partial_rotary_factor": 0.25},
    },
    "tiny-tied": {
        **TEXT_ONLY,
        "dtype": "float32",
        "base_seed": 3000,
        "long": True,
        # tied: the same matrix is the LM head, so a large embedding makes every position predict its own
        # input token; keep it small so that the layers, not the token identity, dominate the residual stream
        "embed_std": 0.1,
        "shards": 1,
        "config": {
            **TEXT_ONLY_CONFIG,
            "vocab_size": 512,
            **COMMON,
            "intermediate_size": 256,
            "num_hidden_layers": 4,
            "layer_types": [F, L, F, L],
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "linear_num_key_heads": 1,
            "linear_num_value_heads": 2,
            "linear_key_head_dim": 32,
            "linear_value_head_dim": 32,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000, "partial_rotary_factor": 0.5},
            "tie_word_embeddings": True,  # no lm_head.weight in the file
            "eos_token_id": 511,
            "dtype": "float32",
        },
    },
    "tiny-longmem": {
        **TEXT_ONLY,
        "dtype": "bfloat16",
        "base_seed": 4000,
        "long": True,
        "embed_std": 0.1,  # tied, as tiny-tied
        # Slow GDN decay, so that a head's state carries over thousands of tokens (in the other fixtures the decay
        # e^{-A·softplus(a + dt_bias)} per token, A ~ U(1, 16), empties the state within a chunk of 64): A ~ U(0.005, 0.5),
        # dt_bias ~ N(-4, 1).
        "A_range": (0.005, 0.5),
        "dt_bias_mean": -4.0,
        "shards": 1,
        "config": {
            **TEXT_ONLY_CONFIG,
            "vocab_size": 256,
            **COMMON,
            "intermediate_size": 64,
            "num_hidden_layers": 3,
            "layer_types": [L, F, L],
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 32,
            "linear_value_head_dim": 32,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25},
            "tie_word_embeddings": True,
            "eos_token_id": 255,
            "dtype": "bfloat16",
        },
    },
}

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

# Weight distributions (see README): linears N(0, LIN_GAIN/sqrt(fan_in)), embeddings N(0, EMBED_STD)
# (tiny-tied, tiny-longmem: spec["embed_std"]), lm_head N(0, LM_HEAD_STD),
# (1+w) RMSNorm weights w ~ N(0, 0.1), linear_attn.norm.weight ~ 1 + N(0, 0.1), A_log = log U(1,16)
# (spec["A_range"]: log U(lo, hi)), dt_bias ~ N(0, 1) (spec["dt_bias_mean"]: N(mean, 1)), conv1d ~ N(0, 0.3).
LIN_GAIN = 1.0
EMBED_STD = 1.0
LM_HEAD_STD = 0.1
NORM_STD = 0.1


# --------------------------------------------------------------------------------------------------
# HF config helpers
# --------------------------------------------------------------------------------------------------
HF_TEXT_KEYS_DROP = {"architectures", "model_type", "dtype", "attn_output_gate", "mtp_num_hidden_layers",
                     "mtp_use_dedicated_embeddings", "mamba_ssm_dtype"}


def text_config_dict(cfg):
    """Return the text-config dict of a checkpoint config.json (flat or multimodal form)."""
    return cfg["text_config"] if "text_config" in cfg else cfg


def hf_text_config(text_cfg):
    """Build the HF Qwen3_5TextConfig from our text config dict, exactly as HF would read it."""
    kwargs = {k: v for k, v in text_cfg.items() if k not in HF_TEXT_KEYS_DROP}
    c = Qwen3_5TextConfig(**kwargs)
    c._attn_implementation = "eager"
    return c


def hf_prefix(cfg):
    return "model.language_model." if "text_config" in cfg else "model."


def is_extra_key(name):
    """Tensors a text engine must ignore (HF Qwen3_5ForCausalLM does not have them)."""
    return name.startswith("mtp.") or name.startswith("model.visual.")


def read_checkpoint(d):
    """Read all tensors of a checkpoint folder (single file or sharded via index)."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        with safe_open(os.path.join(d, fn), framework="pt") as f:
            for k in f.keys():
                assert k not in out, f"duplicate key {k}"
                out[k] = f.get_tensor(k)
    return out


def load_hf_model(d):
    """Build Qwen3_5ForCausalLM (float32, eager, CPU) from a fixture folder, from the stored values.

    Returns (model, report) where report lists extra (ignored) keys, missing and unexpected keys."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    tcfg = text_config_dict(cfg)
    hcfg = hf_text_config(tcfg)
    model = Qwen3_5ForCausalLM(hcfg).eval()
    prefix = hf_prefix(cfg)
    tensors = read_checkpoint(d)
    sd, extras = {}, []
    for k, v in tensors.items():
        if is_extra_key(k):
            extras.append(k)
            continue
        if k == "lm_head.weight":
            sd[k] = v.float()
        else:
            assert k.startswith(prefix), k
            sd["model." + k[len(prefix):]] = v.float()
    res = model.load_state_dict(sd, strict=False)
    missing, unexpected = list(res.missing_keys), list(res.unexpected_keys)
    if hcfg.tie_word_embeddings:
        assert model.lm_head.weight is model.model.embed_tokens.weight
        missing = [m for m in missing if m != "lm_head.weight"]
    # every parameter of the HF model must have been provided (no silent random init)
    assert not missing, f"missing keys: {missing}"
    assert not unexpected, f"unexpected keys: {unexpected}"
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32, name
    return model, {"extra_keys_ignored": sorted(extras), "missing": missing, "unexpected": unexpected,
                   "n_loaded": len(sd)}


# --------------------------------------------------------------------------------------------------
# Weight generation
# --------------------------------------------------------------------------------------------------
def hf_param_shapes(hcfg):
    """Names (HF CausalLM naming, model.*) and shapes of all parameters, from a meta-device model."""
    with torch.device("meta"):
        m = Qwen3_5ForCausalLM(hcfg)
    shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    if hcfg.tie_word_embeddings:
        shapes.pop("lm_head.weight")
    return shapes


def mtp_shapes(t):
    H = t["hidden_size"]
    nh, nkv, hd, I = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"], t["intermediate_size"]
    s = {
        "mtp.fc.weight": (H, 2 * H),
        "mtp.pre_fc_norm_embedding.weight": (H,),
        "mtp.pre_fc_norm_hidden.weight": (H,),
        "mtp.norm.weight": (H,),
        "mtp.layers.0.input_layernorm.weight": (H,),
        "mtp.layers.0.post_attention_layernorm.weight": (H,),
        "mtp.layers.0.self_attn.q_proj.weight": (nh * hd * 2, H),
        "mtp.layers.0.self_attn.k_proj.weight": (nkv * hd, H),
        "mtp.layers.0.self_attn.v_proj.weight": (nkv * hd, H),
        "mtp.layers.0.self_attn.o_proj.weight": (H, nh * hd),
        "mtp.layers.0.self_attn.q_norm.weight": (hd,),
        "mtp.layers.0.self_attn.k_norm.weight": (hd,),
        "mtp.layers.0.mlp.gate_proj.weight": (I, H),
        "mtp.layers.0.mlp.up_proj.weight": (I, H),
        "mtp.layers.0.mlp.down_proj.weight": (H, I),
    }
    return s


VISUAL_SHAPES = {
    # two dummy vision-tower tensors (vision_config stub: hidden 16, so qkv is [48, 16])
    "model.visual.blocks.0.attn.qkv.weight": (48, 16),
    "model.visual.blocks.0.attn.qkv.bias": (48,),
}


def draw(name, shape, gen, spec):
    """Draw one tensor in float32 according to its role (and the spec's overrides of the distributions)."""
    leaf = name.split(".")[-2] if name.endswith(".weight") or name.endswith(".bias") else name.split(".")[-1]
    if name.endswith("linear_attn.norm.weight"):
        return 1.0 + NORM_STD * torch.randn(shape, generator=gen)
    if name.endswith("A_log"):
        lo, hi = spec.get("A_range", (1.0, 16.0))
        return torch.log(lo + (hi - lo) * torch.rand(shape, generator=gen))
    if name.endswith("dt_bias"):
        if "dt_bias_mean" in spec:
            return spec["dt_bias_mean"] + torch.randn(shape, generator=gen)
        return torch.randn(shape, generator=gen)
    if name.endswith("conv1d.weight"):
        return 0.3 * torch.randn(shape, generator=gen)
    if "norm" in leaf:  # (1+w) RMSNorms: input/post_attention_layernorm, norm, q_norm, k_norm, mtp norms
        assert len(shape) == 1, name
        return NORM_STD * torch.randn(shape, generator=gen)
    if name.endswith("embed_tokens.weight"):
        return spec.get("embed_std", EMBED_STD) * torch.randn(shape, generator=gen)
    if name == "lm_head.weight":
        return LM_HEAD_STD * torch.randn(shape, generator=gen)
    if len(shape) == 1:  # dummy bias
        return 0.02 * torch.randn(shape, generator=gen)
    assert len(shape) == 2, (name, shape)
    return (LIN_GAIN / math.sqrt(shape[1])) * torch.randn(shape, generator=gen)


def make_weights(spec, seed):
    """Return dict of stored-name -> tensor in the stored dtype (deterministic in seed)."""
    t = spec["config"]
    hcfg = hf_text_config(t)
    shapes = hf_param_shapes(hcfg)
    prefix = "model.language_model." if spec["form"] == "mm" else "model."
    stored_shapes = {}
    for k, s in shapes.items():
        stored_shapes[k if k == "lm_head.weight" else prefix + k[len("model."):]] = s
    if spec["mtp"]:
        stored_shapes.update(mtp_shapes(t))
    if spec["visual"]:
        stored_shapes.update(VISUAL_SHAPES)
    gen = torch.Generator().manual_seed(seed)
    dt = DTYPES[spec["dtype"]]
    out = {}
    for k in sorted(stored_shapes):  # fixed order => deterministic
        out[k] = draw(k, stored_shapes[k], gen, spec).to(dt).contiguous()
    return out


def shard_assignment(names, n_shards, n_layers):
    """Deterministic split: shard 1 = embeddings + first half of the layers, shard 2 = the rest."""
    if n_shards == 1:
        return {k: "model.safetensors" for k in names}
    assert n_shards == 2
    half = n_layers // 2
    fn = {1: "model-00001-of-00002.safetensors", 2: "model-00002-of-00002.safetensors"}
    out = {}
    for k in names:
        parts = k.split(".")
        if "embed_tokens" in k:
            s = 1
        elif "layers" in parts:
            s = 1 if int(parts[parts.index("layers") + 1]) < half else 2
        else:
            s = 2  # final norm, lm_head
        out[k] = fn[s]
    return out


def write_checkpoint(d, spec, weights):
    os.makedirs(d, exist_ok=True)
    t = spec["config"]
    if spec["form"] == "mm":
        cfg = {
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "model_type": "qwen3_5",
            "tie_word_embeddings": False,
            "text_config": t,
            # stub only: the two model.visual.* tensors are dummies, there is no loadable vision tower
            "vision_config": {"model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 16, "num_heads": 2,
                              "intermediate_size": 32, "out_hidden_size": t["hidden_size"]},
        }
    else:
        cfg = t
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    assign = shard_assignment(list(weights), spec["shards"], t["num_hidden_layers"])
    files = sorted(set(assign.values()))
    for fn in files:
        part = {k: v for k, v in weights.items() if assign[k] == fn}
        save_file(part, os.path.join(d, fn), metadata={"format": "pt"})
    if spec["shards"] > 1:
        total = sum(v.numel() * v.element_size() for v in weights.values())
        index = {"metadata": {"total_size": total}, "weight_map": {k: assign[k] for k in sorted(assign)}}
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    return files


# --------------------------------------------------------------------------------------------------
# References
# --------------------------------------------------------------------------------------------------
class PathCounter:
    """Counts which HF gated-delta-rule implementation runs (chunked vs recurrent), per call length."""

    def __init__(self):
        self.calls = []
        self.gates = []
        self._orig = {}

    def __enter__(self):
        for name in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"):
            orig = getattr(hf_qwen35, name)
            self._orig[name] = orig

            def wrapped(*a, _orig=orig, _name=name, **kw):
                q = a[0] if a else kw["query"]
                self.calls.append((_name, q.shape[1], kw.get("initial_state") is not None))
                self.gates.append(kw["g"][0] if "g" in kw else a[3][0])  # [T][Hv] log-decay per token
                return _orig(*a, **kw)

            setattr(hf_qwen35, name, wrapped)
        return self

    def __exit__(self, *exc):
        for name, orig in self._orig.items():
            setattr(hf_qwen35, name, orig)

    def summary(self):
        s = {}
        for name, T, has_state in self.calls:
            key = f"{name.replace('torch_', '').replace('_gated_delta_rule', '')}(T={'1' if T == 1 else '>1'},state={'yes' if has_state else 'no'})"
            s[key] = s.get(key, 0) + 1
        return s


def top2_gap(logits):
    v = torch.topk(logits.double(), 2, dim=-1).values
    return (v[..., 0] - v[..., 1])


def greedy(model, prompt, eos_id, n_new=GEN_LEN):
    gc = GenerationConfig(do_sample=False, max_new_tokens=n_new, min_new_tokens=n_new, eos_token_id=None,
                          pad_token_id=eos_id, output_logits=True, return_dict_in_generate=True, use_cache=True)
    with torch.no_grad(), PathCounter() as pc:
        out = model.generate(prompt[None].long(), generation_config=gc)
    seq = out.sequences[0, prompt.numel():]
    logits = torch.stack([x[0] for x in out.logits]).float()
    assert seq.numel() == n_new and logits.shape[0] == n_new
    assert torch.equal(logits.argmax(-1), seq), "generated tokens are not the argmax of the recorded logits"
    return seq.to(torch.int32), logits, pc.summary()


def build_reference(model, spec, seed):
    t = spec["config"]
    V = t["vocab_size"]
    gen = torch.Generator().manual_seed(seed + 7)
    prompt = torch.randint(0, V - 1, (PROMPT_LEN,), generator=gen)  # ids in [0, V-2]
    short = torch.randint(0, V - 1, (SHORT_LEN,), generator=gen)
    with torch.no_grad(), PathCounter() as pc:
        logits = model(prompt[None].long(), use_cache=False).logits[0].float()
    fwd_paths = pc.summary()
    with torch.no_grad():  # each prompt token alone (batch of 130 sequences of length 1): no context
        alone = model(prompt[:, None].long(), use_cache=False).logits[:, 0].float()
    ctx_frac = float((alone.argmax(-1) != logits.argmax(-1)).float().mean())
    gl, gl_logits, gl_paths = greedy(model, prompt, t["eos_token_id"])
    gs, gs_logits, gs_paths = greedy(model, short, t["eos_token_id"])
    # HF self-consistency: teacher-forced single forward (chunked GDN path) vs the cached decode logits
    with torch.no_grad():
        full = torch.cat([prompt, gl.long()[:-1]])
        tf = model(full[None].long(), use_cache=False).logits[0, PROMPT_LEN - 1:].float()
        full_s = torch.cat([short, gs.long()[:-1]])
        tf_s = model(full_s[None].long(), use_cache=False).logits[0, SHORT_LEN - 1:].float()
    consistency = {
        "gen_long_vs_teacher_forced_max_abs": float((tf - gl_logits).abs().max()),
        "gen_short_vs_teacher_forced_max_abs": float((tf_s - gs_logits).abs().max()),
        "gen_logits_long[0]_vs_logits[129]_max_abs": float((gl_logits[0] - logits[-1]).abs().max()),
    }
    tensors = {
        "prompt": prompt.to(torch.int32),
        "logits": logits.contiguous(),
        "gen_prompt_long": prompt.to(torch.int32),
        "gen_long": gl,
        "gen_logits_long": gl_logits.contiguous(),
        "gen_prompt_short": short.to(torch.int32),
        "gen_short": gs,
        "gen_logits_short": gs_logits.contiguous(),
    }
    info = {
        "margin_long": float(top2_gap(gl_logits).min()),
        "margin_short": float(top2_gap(gs_logits).min()),
        "margin_prompt_logits_min": float(top2_gap(logits).min()),
        "paths": {"prefill_130": fwd_paths, "generate_long": gl_paths, "generate_short": gs_paths},
        "hf_consistency": consistency,
        "context_sensitivity": ctx_frac,
    }
    return tensors, info


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def config_summary(hcfg, spec):
    rp = dict(hcfg.rope_parameters)
    rot = int(hcfg.head_dim * rp.get("partial_rotary_factor", 1.0))
    return {
        "form": spec["form"],
        "weight_dtype": spec["dtype"],
        "vocab_size": hcfg.vocab_size,
        "hidden_size": hcfg.hidden_size,
        "intermediate_size": hcfg.intermediate_size,
        "num_hidden_layers": hcfg.num_hidden_layers,
        "layer_types (as HF resolved them)": list(hcfg.layer_types),
        "attention": {"heads": hcfg.num_attention_heads, "kv_heads": hcfg.num_key_value_heads,
                      "head_dim": hcfg.head_dim},
        "gdn": {"key_heads": hcfg.linear_num_key_heads, "value_heads": hcfg.linear_num_value_heads,
                "key_head_dim": hcfg.linear_key_head_dim, "value_head_dim": hcfg.linear_value_head_dim,
                "conv_kernel": hcfg.linear_conv_kernel_dim},
        "rope_parameters (as HF resolved them)": rp,
        "rotary_dim": rot,
        "tie_word_embeddings": hcfg.tie_word_embeddings,
        "eos_token_id": spec["config"]["eos_token_id"],
        "shards": spec["shards"],
        "mtp": spec["mtp"],
        "visual_dummies": spec["visual"],
    }


def build_one(outdir, name, spec, cmd):
    d = os.path.join(outdir, name)
    t = spec["config"]
    # sanity: HF's reading of the config is what we intend
    hcfg = hf_text_config(t)
    if "expect_layer_types" in spec:
        assert list(hcfg.layer_types) == spec["expect_layer_types"], hcfg.layer_types
    if "layer_types" in t:
        assert list(hcfg.layer_types) == t["layer_types"]
    if "expect_rope" in spec:
        assert dict(hcfg.rope_parameters) == spec["expect_rope"], hcfg.rope_parameters
    if "rope_parameters" in t:
        assert dict(hcfg.rope_parameters) == {k: v for k, v in t["rope_parameters"].items()}, hcfg.rope_parameters

    for attempt in range(MAX_ATTEMPTS):
        seed = spec["base_seed"] + attempt
        if os.path.isdir(d):
            shutil.rmtree(d)
        weights = make_weights(spec, seed)
        files = write_checkpoint(d, spec, weights)
        model, load_report = load_hf_model(d)
        # the HF model holds exactly the stored values
        hsd = model.state_dict()
        prefix = hf_prefix(json.load(open(os.path.join(d, "config.json"))))
        for k, v in weights.items():
            if is_extra_key(k):
                continue
            hk = k if k == "lm_head.weight" else "model." + k[len(prefix):]
            assert torch.equal(hsd[hk], v.float()), k
        tensors, info = build_reference(model, spec, seed)
        ok = info["margin_long"] > MIN_MARGIN and info["margin_short"] > MIN_MARGIN
        print(f"[{name}] seed {seed}: margin_long {info['margin_long']:.4g} margin_short {info['margin_short']:.4g}"
              f" -> {'ok' if ok else 'retry'}", flush=True)
        if ok:
            break
    else:
        raise SystemExit(f"{name}: no seed with greedy margins > {MIN_MARGIN}")

    # expected extras
    exp_extra = sorted([k for k in weights if is_extra_key(k)])
    assert load_report["extra_keys_ignored"] == exp_extra

    # optional second opinion: HF's own from_pretrained on the folder
    fp = try_from_pretrained(d, model, tensors["prompt"])

    save_file(tensors, os.path.join(d, "reference.safetensors"), metadata={"format": "pt"})
    V = t["vocab_size"]
    ref = {
        "model": name,
        "command": cmd,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "seed": seed,
        "seed_attempts": attempt + 1,
        "hf_model": "Qwen3_5ForCausalLM(Qwen3_5TextConfig(text config)), float32, attn_implementation=eager, CPU, "
                    "weights = stored values widened to float32",
        "config_summary": config_summary(hcfg, spec),
        "weight_files": {fn: {"bytes": os.path.getsize(os.path.join(d, fn)), "sha256": sha256(os.path.join(d, fn))}
                         for fn in files},
        "n_stored_tensors": len(weights),
        "n_tensors_loaded_by_hf": load_report["n_loaded"],
        "ignored_keys (not in HF Qwen3_5ForCausalLM)": load_report["extra_keys_ignored"],
        "from_pretrained_check": fp,
        "reference_tensors": {k: {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)}
                              for k, v in tensors.items()},
        "prompt": tensors["prompt"].tolist(),
        "logits_argmax": tensors["logits"].argmax(-1).tolist(),
        "gen_long": tensors["gen_long"].tolist(),
        "gen_prompt_short": tensors["gen_prompt_short"].tolist(),
        "gen_short": tensors["gen_short"].tolist(),
        "margin_long": info["margin_long"],
        "margin_short": info["margin_short"],
        "margin_prompt_logits_min (informational, not constrained)": info["margin_prompt_logits_min"],
        "argmax_changed_by_context_fraction": info["context_sensitivity"],
        "hf_gdn_paths": info["paths"],
        "hf_consistency": info["hf_consistency"],
        "logits_stats": {"mean": float(tensors["logits"].mean()), "std": float(tensors["logits"].std()),
                         "distinct_argmax_in_prompt_logits": len(set(tensors["logits"].argmax(-1).tolist())),
                         "vocab": V},
    }
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    return ref


def try_from_pretrained(d, model, prompt):
    """Second opinion: load the folder with HF's own Qwen3_5ForCausalLM.from_pretrained and compare logits
    with the hand-loaded reference model (checks config parsing, shard index, prefixes, tying)."""
    try:
        m2, info = Qwen3_5ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager",
                                                      output_loading_info=True)
        m2.eval()
        with torch.no_grad():
            a = model(prompt[None].long(), use_cache=False).logits
            b = m2(prompt[None].long(), use_cache=False).logits
        return {"config_class": type(m2.config).__name__,
                "rope_parameters": dict(m2.config.rope_parameters), "layer_types": list(m2.config.layer_types),
                "missing_keys": sorted(info.get("missing_keys", [])),
                "unexpected_keys": sorted(info.get("unexpected_keys", [])),
                "mismatched_keys": sorted(str(x) for x in info.get("mismatched_keys", [])),
                "logits_max_abs_diff_vs_reference_model": float((a - b).abs().max())}
    except Exception as e:  # noqa: BLE001
        return f"failed: {type(e).__name__}: {e}"


def build_long(d, name, spec, model, model_seed, cmd):
    """The long-prompt reference of one model (reference-long.safetensors / .json in its folder): a LONG_LEN-token
    prompt, the logits at LONG_ROWS of one forward over it without cache (HF's chunked GDN path, 64 chunks) and a
    greedy continuation of LONG_GEN tokens with the logits of each step (prefill, then cached decode). The prompt
    seed is stepped until the continuation's greedy margins exceed MIN_MARGIN."""
    t = spec["config"]
    V = t["vocab_size"]
    assert LONG_LEN + LONG_GEN <= t["max_position_embeddings"]
    for attempt in range(MAX_ATTEMPTS):
        prompt_seed = model_seed + 11 + 1000 * attempt
        prompt = torch.randint(0, V - 1, (LONG_LEN,), generator=torch.Generator().manual_seed(prompt_seed))
        gen, gen_logits, gen_paths = greedy(model, prompt, t["eos_token_id"], LONG_GEN)
        margin = float(top2_gap(gen_logits).min())
        print(f"[{name} long] prompt seed {prompt_seed}: margin {margin:.4g} -> "
              f"{'ok' if margin > MIN_MARGIN else 'retry'}", flush=True)
        if margin > MIN_MARGIN:
            break
    else:
        raise SystemExit(f"{name}: no long prompt with greedy margins > {MIN_MARGIN}")
    rows = torch.tensor(LONG_ROWS, dtype=torch.int32)
    with torch.no_grad(), PathCounter() as pc:
        full = model(prompt[None].long(), use_cache=False).logits[0].float()
    fwd_paths = pc.summary()
    # how far back a GDN layer's state reaches: per layer, the slowest head's tokens to decay to 1% (mean log-decay)
    memory = [round(math.log(0.01) / float(g.double().mean(0).max()), 1) for g in pc.gates]
    logits = full[rows.long()].contiguous()
    with torch.no_grad():
        # HF's own spread at this length: teacher-forced single forward (chunked GDN) vs the cached decode logits
        seq = torch.cat([prompt, gen.long()[:-1]])
        tf = model(seq[None].long(), use_cache=False).logits[0, LONG_LEN - 1:].float()
        # how much the far context moves the last row: the same last token seen after only its last W tokens
        # (RoPE is relative and GDN has no positions, so only the dropped keys and state differ)
        window = {}
        for W in (256, 2048):
            last = model(prompt[None, -W:].long(), use_cache=False).logits[0, -1].float()
            window[f"last_{W}"] = float((last - full[-1]).abs().max() / full[-1].abs().max())
    tensors = {"prompt": prompt.to(torch.int32), "rows": rows, "logits": logits, "gen": gen,
               "gen_logits": gen_logits.contiguous()}
    save_file(tensors, os.path.join(d, "reference-long.safetensors"), metadata={"format": "pt"})
    ref = {
        "model": name,
        "command": cmd,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "model_seed": model_seed,
        "prompt_seed": prompt_seed,
        "prompt_seed_attempts": attempt + 1,
        "reference_tensors": {k: {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)}
                              for k, v in tensors.items()},
        "rows": list(LONG_ROWS),
        "rows_argmax": logits.argmax(-1).tolist(),
        "rows_top2_gap (informational, not constrained)": [round(float(g), 6) for g in top2_gap(logits)],
        "gen": gen.tolist(),
        "margin_gen": margin,
        "hf_gdn_paths": {f"prefill_{LONG_LEN}": fwd_paths, "generate": gen_paths},
        "hf_consistency": {
            "gen_vs_teacher_forced_max_abs": float((tf - gen_logits).abs().max()),
            "gen_vs_teacher_forced_max_row_rel": float(((tf - gen_logits).abs().amax(-1)
                                                        / gen_logits.abs().amax(-1)).max()),
            f"gen_logits[0]_vs_logits[{LONG_LEN - 1}]_max_abs": float((gen_logits[0] - logits[-1]).abs().max()),
        },
        "last_row_change_when_context_cut_to_W_tokens (row-relative)": window,
        "gdn_memory_tokens (per GDN layer, slowest head: tokens for its state to decay to 1%)": memory,
        "logits_stats": {"mean": float(full.mean()), "std": float(full.std()),
                         "distinct_argmax_over_all_positions": len(set(full.argmax(-1).tolist())), "vocab": V},
    }
    with open(os.path.join(d, "reference-long.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    return ref


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    cmd = "python3 scripts/make_fixtures.py " + outdir
    for name, spec in SPECS.items():
        ref = build_one(outdir, name, spec, cmd)
        if spec.get("long"):
            model, _ = load_hf_model(os.path.join(outdir, name))
            build_long(os.path.join(outdir, name), name, spec, model, ref["seed"], cmd)


if __name__ == "__main__":
    main()
