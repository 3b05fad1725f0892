#!/usr/bin/env python3
"""Reference data for qwenrt's quantized formats (tests/test_quant.c).

Usage:  python3 scripts/make_quant_fixtures.py tests/data [--qwenrt build/bin/qwenrt]

Writes tests/data/quant/:
  shapes.safetensors / shapes.json   NVFP4 and FP8 block-128 tensors of real layer shapes, quantized by the
                                     reference quantizer below, with a fixed input x [3, K] and y = x · W_deqᵀ
                                     (float64, stored f32); shapes.json holds a hash of every dequantized tensor
                                     (the C decoder must match bit for bit).
  tiny-mm-{nvfp4,fp8}.safetensors    HF transformers f32 logits / greedy continuations of tests/data/tiny-mm with
                                     its MLP and attention q/k/v/o linears quantized and DEQUANTIZED again.
  tiny-mm-{nvfp4,fp8}.json           hash of every quantized tensor (what `qwenrt quantize` must write, byte for
                                     byte), margins, compressed-tensors cross-check results.

The quantizers and dequantizers are written from docs/model.md §4 (and compressed-tensors' rounding rules);
when compressed-tensors is installed, its real compressor is run on the same tensors and must give the same
bytes. With --qwenrt, the folders written by `qwenrt quantize` are checked too (bytes, and loaded back through
compressed-tensors' decompressor).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402  (HF model loading and greedy reference helpers)

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


# ------------------------------------------------------------------------------------------------
# Reference formats (docs/model.md §4), all arithmetic in float32 like the C code
# ------------------------------------------------------------------------------------------------
def e4m3(x):
    """float32 → e4m3fn bytes (torch's cast: round to nearest even), |x| clamped to 448 first."""
    return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)


def e4m3_to_f32(b):
    return b.view(torch.float8_e4m3fn).float()


def e2m1_codes(q):
    """Nearest E2M1 value, ties to the even code — compressed-tensors' cast_to_fp4 bucket edges
    (<=0.25→0, <0.75→0.5, <=1.25→1, <1.75→1.5, <=2.5→2, <3.5→3, <=5→4, else 6); bit 3 = sign bit."""
    a = q.abs()
    idx = torch.zeros_like(a, dtype=torch.uint8)
    idx[(a > 0.25) & (a < 0.75)] = 1
    idx[(a >= 0.75) & (a <= 1.25)] = 2
    idx[(a > 1.25) & (a < 1.75)] = 3
    idx[(a >= 1.75) & (a <= 2.5)] = 4
    idx[(a > 2.5) & (a < 3.5)] = 5
    idx[(a >= 3.5) & (a <= 5.0)] = 6
    idx[a > 5.0] = 7
    return idx | (torch.signbit(q).to(torch.uint8) << 3)


def nvfp4_quantize(w):
    """compressed-tensors NVFP4: global = 2688/amax; scale = e4m3((amax_block/6)·global) (0 → 0.125);
    code = e2m1(w / (scale/global)); two codes per byte, even element low."""
    w = w.float()
    N, K = w.shape
    amax = w.abs().max().clamp(min=torch.finfo(torch.float32).tiny)
    gs = (torch.tensor(2688.0) / amax).reshape(1)
    if not torch.isfinite(gs).all():
        gs = torch.ones(1)
    blocks = w.reshape(N, K // 16, 16)
    bmax = blocks.abs().amax(-1)
    scale = e4m3((bmax / 6.0) * gs)
    scale[(scale & 0x7F) == 0] = 0x20  # 0.125
    div = e4m3_to_f32(scale) / gs
    codes = e2m1_codes(torch.clamp(blocks / div[..., None], -6.0, 6.0)).reshape(N, K)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return {"weight_packed": packed.contiguous(), "weight_scale": scale.view(torch.float8_e4m3fn).contiguous(),
            "weight_global_scale": gs.float()}


def nvfp4_dequantize(t):
    """W = (e2m1 · f32(scale)) · (1/global), float32, left to right (the C decoder's order)."""
    p = t["weight_packed"]
    N = p.shape[0]
    codes = torch.stack([p & 15, p >> 4], -1).reshape(N, -1).long()
    val = E2M1[codes & 7] * torch.where((codes & 8) != 0, -1.0, 1.0)
    K = val.shape[1]
    s = t["weight_scale"].float().repeat_interleave(16, dim=1)[:, :K]
    inv = (torch.tensor(1.0) / t["weight_global_scale"].float()).reshape(())
    return (val * s) * inv


def fp8_quantize(w, scale_dtype=torch.float32):
    """FP8 block-128: scale = amax_block/448 (1 for an all-zero block), code = e4m3(w / scale)."""
    w = w.float()
    N, K = w.shape
    nb, kb = -(-N // 128), -(-K // 128)
    codes = torch.empty(N, K, dtype=torch.uint8)
    scales = torch.empty(nb, kb)
    for i in range(nb):
        for j in range(kb):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            amax = blk.abs().max()
            s = amax / 448.0 if amax > 0 else torch.tensor(1.0)
            scales[i, j] = s
            codes[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = e4m3(blk / s)
    return {"weight": codes.view(torch.float8_e4m3fn), "weight_scale_inv": scales.to(scale_dtype)}


def fp8_dequantize(t):
    w = t["weight"].float()
    s = t["weight_scale_inv"].float()
    N, K = w.shape
    return w * s.repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)[:, :K]


# ------------------------------------------------------------------------------------------------
# A hash the C test recomputes: sum over bytes of splitmix64(byte | index << 8), mod 2^64
# ------------------------------------------------------------------------------------------------
def qhash(t):
    b = t.contiguous().view(torch.uint8).numpy().reshape(-1).astype(np.uint64)
    z = b | (np.arange(b.size, dtype=np.uint64) << np.uint64(8))
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        return "%016x" % int(z.sum(dtype=np.uint64))


# ------------------------------------------------------------------------------------------------
# compressed-tensors cross-checks (optional)
# ------------------------------------------------------------------------------------------------
def ct_available():
    try:
        import compressed_tensors  # noqa: F401
        return True
    except ImportError:
        return False


def ct_check_nvfp4(w, ref):
    """Run compressed-tensors' own scale computation and packer on w; compare with ref; also decompress ref."""
    from compressed_tensors.compressors.nvfp4.helpers import quantize_and_pack_fp4
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import preset_name_to_scheme
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam
    w = w.float()
    N, K = w.shape
    scheme = preset_name_to_scheme("NVFP4A16", ["Linear"])
    g = w.reshape(N, K // 16, 16)
    gs = generate_gparam(w.min(), w.max())
    scale, _ = calculate_qparams(g.amin(-1), g.amax(-1), scheme.weights, global_scale=gs)
    packed = quantize_and_pack_fp4(w, scale, global_scale=gs, group_size=16)
    same = (torch.equal(gs, ref["weight_global_scale"]) and
            torch.equal(scale.to(torch.float8_e4m3fn).view(torch.uint8), ref["weight_scale"].view(torch.uint8)) and
            torch.equal(packed, ref["weight_packed"]))
    dec = NVFP4PackedCompressor.decompress(dict(ref), scheme)["weight"].float()
    ours = nvfp4_dequantize(ref)
    # compressed-tensors decompresses to BF16 (code · scale / global in bf16): agreement is to bf16 rounding
    rel = float(((dec - ours).abs() / ours.abs().clamp(min=1e-30)).max())
    return {"ct_same_bytes": bool(same), "ct_decompress_max_rel_diff": rel}


# ------------------------------------------------------------------------------------------------
# Fixtures
# ------------------------------------------------------------------------------------------------
def make_shapes(outdir, report):
    gen = torch.Generator().manual_seed(4242)
    cases = [("nvfp4_5120x256", "nvfp4", 5120, 256, None), ("nvfp4_17408x128", "nvfp4", 17408, 128, None),
             ("fp8_5120x128", "fp8", 5120, 128, torch.float32), ("fp8_1000x300", "fp8", 1000, 300, torch.bfloat16)]
    tensors, info = {}, {}
    for name, fmt, N, K, sdt in cases:
        w = torch.randn(N, K, generator=gen) * 0.02
        w[torch.rand(N, K, generator=gen) < 1e-3] *= 20  # outliers, as trained weights have
        w[:16, :16] = 0  # an all-zero block / group
        w = w.to(torch.bfloat16).float()
        q = nvfp4_quantize(w) if fmt == "nvfp4" else fp8_quantize(w, sdt)
        deq = nvfp4_dequantize(q) if fmt == "nvfp4" else fp8_dequantize(q)
        x = torch.randn(3, K, generator=gen)
        y = (x.double() @ deq.double().T).float()
        for k, v in q.items():
            tensors[f"{name}.{k}"] = v
        tensors[f"{name}.x"] = x
        tensors[f"{name}.y"] = y
        info[name] = {"format": fmt, "n": N, "k": K, "dequant_hash": qhash(deq),
                      "rel_rms_error": float((deq - w).pow(2).mean().sqrt() / w.pow(2).mean().sqrt())}
        if fmt == "nvfp4" and ct_available():
            info[name].update(ct_check_nvfp4(w, q))
    save_file(tensors, os.path.join(outdir, "shapes.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(outdir, "shapes.json"), "w") as f:
        json.dump(info, f, indent=1)
    report["shapes"] = info


TARGETS = (".mlp.gate_proj.weight", ".mlp.up_proj.weight", ".mlp.down_proj.weight", ".self_attn.q_proj.weight",
           ".self_attn.k_proj.weight", ".self_attn.v_proj.weight", ".self_attn.o_proj.weight")


def quantize_checkpoint(tensors, fmt):
    """The default `qwenrt quantize` selection: MLP + attention q/k/v/o, main layers and MTP layer."""
    out, deq = {}, {}
    for k, v in tensors.items():
        if k.endswith(TARGETS) and "visual." not in k:
            p = k[:-len(".weight")]
            q = nvfp4_quantize(v) if fmt == "nvfp4" else fp8_quantize(v)
            for part, t in q.items():
                out[f"{p}.{part}"] = t
            deq[k] = nvfp4_dequantize(q) if fmt == "nvfp4" else fp8_dequantize(q)
        else:
            out[k] = v
            deq[k] = v
    return out, deq


def make_tiny(root, outdir, fmt, qwenrt, report):
    src = os.path.join(root, "tiny-mm")
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    tensors = mf.read_checkpoint(src)
    quant, deq = quantize_checkpoint(tensors, fmt)
    ref = {}
    with safe_open(os.path.join(src, "reference.safetensors"), framework="pt") as f:
        for k in ("prompt", "gen_prompt_short"):
            ref[k] = f.get_tensor(k)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        save_file({k: v.float().contiguous() for k, v in deq.items()}, os.path.join(tmp, "model.safetensors"))
        model, _ = mf.load_hf_model(tmp)
    with torch.no_grad():
        logits = model(ref["prompt"][None].long(), use_cache=False).logits[0].float()
    gl, gl_logits, _ = mf.greedy(model, ref["prompt"], cfg["text_config"]["eos_token_id"])
    gs, gs_logits, _ = mf.greedy(model, ref["gen_prompt_short"], cfg["text_config"]["eos_token_id"])
    out = {"prompt": ref["prompt"], "logits": logits.contiguous(), "gen_long": gl, "gen_logits_long": gl_logits,
           "gen_prompt_short": ref["gen_prompt_short"], "gen_short": gs, "gen_logits_short": gs_logits}
    save_file(out, os.path.join(outdir, f"tiny-mm-{fmt}.safetensors"), metadata={"format": "pt"})
    info = {"quantized_tensor_hashes": {k: qhash(v) for k, v in sorted(quant.items()) if k not in tensors},
            "n_quantized_linears": sum(1 for k in tensors if k.endswith(TARGETS) and "visual." not in k),
            "margin_long": float(mf.top2_gap(gl_logits).min()), "margin_short": float(mf.top2_gap(gs_logits).min()),
            "margin_prompt_logits_min": float(mf.top2_gap(logits).min()),
            "prompt_argmax_changed_vs_float_fraction": None}
    with safe_open(os.path.join(src, "reference.safetensors"), framework="pt") as f:
        float_logits = f.get_tensor("logits")
    info["prompt_argmax_changed_vs_float_fraction"] = float((float_logits.argmax(-1) != logits.argmax(-1)).float().mean())
    info["max_abs_logit_change_vs_float"] = float((float_logits - logits).abs().max())
    if qwenrt:
        info["qwenrt_quantize"] = check_qwenrt_folder(qwenrt, src, fmt, quant, tensors)
    with open(os.path.join(outdir, f"tiny-mm-{fmt}.json"), "w") as f:
        json.dump(info, f, indent=1)
    report[f"tiny-mm-{fmt}"] = {k: v for k, v in info.items() if k != "quantized_tensor_hashes"}


def check_qwenrt_folder(qwenrt, src, fmt, quant, tensors):
    """Run `qwenrt quantize` and compare its folder with the reference quantizer, tensor by tensor; for nvfp4
    also validate its quantization_config with compressed-tensors and decompress every module with it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "q")
        subprocess.run([qwenrt, "quantize", src, out, "--format", fmt], check=True, capture_output=True)
        got = mf.read_checkpoint(out)
        with open(os.path.join(out, "config.json")) as f:
            qc = json.load(f)["quantization_config"]
        res = {"same_tensor_names": sorted(got) == sorted(quant),
               "bytes_identical": all(torch.equal(got[k].view(torch.uint8), quant[k].view(torch.uint8))
                                      for k in quant if k in got)}
        if fmt == "nvfp4" and ct_available():
            from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
            from compressed_tensors.quantization import QuantizationConfig
            cfg = QuantizationConfig.model_validate(qc)
            scheme = cfg.config_groups["group_0"]
            worst = 0.0
            for k in tensors:
                if k.endswith(TARGETS):
                    p = k[:-len(".weight")]
                    sd = {part: got[f"{p}.{part}"] for part in ("weight_packed", "weight_scale", "weight_global_scale")}
                    dec = NVFP4PackedCompressor.decompress(sd, scheme)["weight"].float()
                    ours = nvfp4_dequantize(sd)
                    worst = max(worst, float(((dec - ours).abs() / ours.abs().clamp(min=1e-30)).max()))
            res["ct_config_valid"] = cfg.format == "nvfp4-pack-quantized"
            res["ct_decompress_max_rel_diff"] = worst
        return res


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    qwenrt = sys.argv[sys.argv.index("--qwenrt") + 1] if "--qwenrt" in sys.argv else None
    torch.set_num_threads(1)
    outdir = os.path.join(root, "quant")
    os.makedirs(outdir, exist_ok=True)
    report = {}
    make_shapes(outdir, report)
    for fmt in ("nvfp4", "fp8"):
        make_tiny(root, outdir, fmt, qwenrt, report)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
