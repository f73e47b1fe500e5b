#!/usr/bin/env python3
"""loom's GPT-2 folders against transformers itself (PyPI: torch, transformers), both ways.

  python3 hf_gpt2_interop.py <path to hf_gpt2_tool>

(a) transformers makes a random GPT-2 of other sizes than the committed fixture (3 layers,
    n_embd 48, 6 heads, vocab 100) and saves it; loom loads it and its logits match
    transformers' to 1e-5 of their largest value (Note [HF parity tolerances] in
    tests/nn/test_hf_gpt2.cpp).
(b) loom saves it again (float32 in one file; bfloat16 in shards with an index);
    transformers' from_pretrained reads each folder with no missing or unexpected tensors, and the
    weights are the original ones (float32: bit for bit, and the config read back gives the same
    logits; bfloat16: the original rounded).
The committed fixtures (scripts/make-hf-fixtures.py) make the same checks in CI without Python;
this test runs where transformers is installed.
"""
import os
import subprocess
import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def run(tool, *args):
    out = subprocess.run([tool, *map(str, args)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"hf_gpt2_tool {' '.join(map(str, args))} failed:\n{out.stderr}")
    return out.stdout


def reload(path, want_dtype):
    model, info = GPT2LMHeadModel.from_pretrained(path, output_loading_info=True, dtype=want_dtype)
    bad = {k: v for k, v in info.items() if v and k != "mismatched_keys"} or info.get("mismatched_keys")
    assert not bad, f"{path}: transformers reports {info}"
    return model


def main():
    tool = sys.argv[1]
    torch.manual_seed(7)
    cfg = GPT2Config(n_layer=3, n_embd=48, n_head=6, vocab_size=100, n_positions=40,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None,
                     eos_token_id=None)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape) * 0.1 + (1.0 if "ln_" in name and name.endswith("weight") else 0.0))
    ids = torch.randint(0, cfg.vocab_size, (1, 17))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        model.save_pretrained(src)
        with torch.no_grad():
            want = model(ids).logits.reshape(-1)
        got = torch.tensor([float(x) for x in run(tool, "logits", src, *ids[0].tolist()).split()])
        err = ((got - want).abs().max() / want.abs().max()).item()
        assert err < 1e-5, f"(a) logits differ by {err} of their largest value"
        print(f"(a) loom's logits of transformers' folder: relative error {err:.2e}")

        for dtype, shard_bytes, name in [("f32", 5_000_000_000, "f32"), ("bf16", 20_000, "bf16")]:
            dst = os.path.join(tmp, name)
            run(tool, "resave", src, dst, dtype, shard_bytes)
            torch_dtype = torch.float32 if dtype == "f32" else torch.bfloat16
            back = reload(dst, torch_dtype)
            theirs, ours = model.state_dict(), back.state_dict()
            for k, v in theirs.items():
                if k == "lm_head.weight":
                    continue  # tied: the same tensor as transformer.wte.weight
                assert ours[k].dtype == torch_dtype, (k, ours[k].dtype)
                assert torch.equal(ours[k], v.to(torch_dtype)), f"({name}) {k} differs"
            if dtype == "f32":  # the config read back makes the same model: the same logits
                with torch.no_grad():
                    err = ((back.eval()(ids).logits.reshape(-1) - want).abs().max() / want.abs().max()).item()
                assert err < 1e-6, f"({name}) transformers' logits of loom's folder differ by {err}"
            files = sorted(os.listdir(dst))
            print(f"(b) {name}: transformers read loom's folder {files}: every tensor equal")


if __name__ == "__main__":
    main()
