#!/usr/bin/env python3
"""Sanity tool: load one fixture folder with HF transformers and print the argmax of the first 10 positions.

Usage:  python3 scripts/check_fixture.py tests/data/tiny-mm

Loads the checkpoint the same way make_fixtures.py does (stored values widened to float32, eager attention,
CPU), runs a single forward over reference.safetensors' `prompt` (or over ids 0..9 if there is no reference),
prints the argmax of positions 0..9 and, when a reference exists, whether it matches and the max |diff| of
the logits; with reference-long.safetensors, also the max |diff| of the long prompt's stored rows.
"""

import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformers  # noqa: E402

from make_fixtures import load_hf_model  # noqa: E402


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    d = sys.argv[1]
    transformers.logging.set_verbosity_error()
    model, report = load_hf_model(d)
    print(f"{d}: {report['n_loaded']} tensors loaded into HF, ignored extras: {len(report['extra_keys_ignored'])}")
    ref_path = os.path.join(d, "reference.safetensors")
    ref = load_file(ref_path) if os.path.exists(ref_path) else None
    prompt = ref["prompt"].long() if ref is not None else torch.arange(10)
    with torch.no_grad():
        logits = model(prompt[None], use_cache=False).logits[0].float()
    am = logits[:10].argmax(-1).tolist()
    print("prompt[:10]       ", prompt[:10].tolist())
    print("argmax[:10]       ", am)
    if ref is not None:
        ram = ref["logits"][:10].argmax(-1).tolist()
        print("reference argmax  ", ram, "match" if ram == am else "MISMATCH")
        print("max |logits - reference| over all positions: %.3g" % (logits - ref["logits"]).abs().max().item())
    long_path = os.path.join(d, "reference-long.safetensors")
    if os.path.exists(long_path):
        long = load_file(long_path)
        with torch.no_grad():
            rows = model(long["prompt"][None].long(), use_cache=False).logits[0, long["rows"].long()].float()
        print("long prompt (%d tokens): max |logits - reference| over its %d rows: %.3g"
              % (long["prompt"].numel(), rows.shape[0], (rows - long["logits"]).abs().max().item()))


if __name__ == "__main__":
    main()
