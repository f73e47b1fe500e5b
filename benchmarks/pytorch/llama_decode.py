#!/usr/bin/env python3
"""llama_decode.py: the PyTorch twin of bench_decode (benchmarks/bench_decode.cpp).

A Llama of a released shape (Llama-3.2-1B or Llama-3-8B, random weights made on the GPU in bf16)
built by Hugging Face `transformers` from a config, generating greedily at batch 1 with its KV
cache, eager (no torch.compile, no static cache): the prompt's forward (prefill) and tokens/s of
the one-token steps, measured as bench_decode measures them (generate 1 token, generate N, the
difference is N - 1 steps), against the memory-bandwidth bound.

    python3 benchmarks/pytorch/llama_decode.py --model llama3.2-1b --new-tokens 128
"""
import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {  # dim, layers, heads, kv heads, ffn, tied
    "llama3.2-1b": (2048, 16, 32, 8, 8192, True),
    "llama3-8b": (4096, 32, 32, 8, 14336, False),
}


def config(name: str, context: int) -> LlamaConfig:
    dim, layers, heads, kv, ffn, tied = SHAPES[name]
    return LlamaConfig(vocab_size=128256, hidden_size=dim, intermediate_size=ffn,
                       num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=kv, head_dim=dim // heads, rms_norm_eps=1e-5,
                       max_position_embeddings=max(context, 8192), tie_word_embeddings=tied,
                       rope_theta=500000.0, attn_implementation="sdpa")


def seconds_for(model, prompt, n: int) -> float:
    torch.cuda.synchronize()
    t0 = time.time()
    out = model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                         pad_token_id=0)
    torch.cuda.synchronize()
    assert out.shape[1] == prompt.shape[1] + n
    return time.time() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama3.2-1b", choices=sorted(SHAPES))
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bandwidth", type=float, default=4.8, help="TB/s")
    a = p.parse_args()
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config(a.model, a.prompt + a.new_tokens)).to(torch.bfloat16)
    model.eval()
    n_params = sum(t.numel() for t in model.parameters())
    prompt = (torch.arange(a.prompt, device="cuda") * 7919 % 128256).unsqueeze(0)
    with torch.no_grad():
        seconds_for(model, prompt, 2)
        prefill, decode = [], []
        for _ in range(a.repeats):
            one = seconds_for(model, prompt, 1)
            full = seconds_for(model, prompt, a.new_tokens)
            prefill.append(one)
            decode.append((a.new_tokens - 1) / (full - one))
    tok_s = statistics.median(decode)
    bound = a.bandwidth * 1e12 / (n_params * 2)
    print(f"pytorch eager {a.model} bf16: {n_params / 1e6:.1f}M parameters, prefill "
          f"{statistics.median(prefill) * 1e3:.2f} ms; decode {tok_s:.1f} tokens/s; bound "
          f"{bound:.1f}: {100 * tok_s / bound:.0f}% of it")


if __name__ == "__main__":
    main()
