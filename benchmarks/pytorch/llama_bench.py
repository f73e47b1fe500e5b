#!/usr/bin/env python3
"""llama_bench.py: the PyTorch anchor for bench_train's llama1b workload.

Llama-3.2-1B's shape (dim 2048, 16 layers, 32 query and 8 key/value heads, SwiGLU 8192, vocabulary
128256, tied embedding, RoPE theta 500000 with Llama 3's scaling) built by Hugging Face
`transformers` from a config (no weights are downloaded), trained on random tokens the way
bench_train trains loom's: B 4, T 2048, bf16 autocast over float32 master weights, fused AdamW
(lr 3e-4, betas 0.9/0.95, weight decay 0.1), gradient clipping at 1.0, SDPA attention, optionally
under torch.compile. It prints ms/step (median of the timed steps), tokens/s, MFU (6 x parameters
+ 12 x layers x heads x head size x T FLOPs per token at 989 TFLOP/s, as bench_train counts) and
the peak memory. It leaves out everything bench_train leaves out: data loading, evaluation, logs.

    python3 benchmarks/pytorch/llama_bench.py --compile --warmup 10 --steps 10
"""
import torch
from step_timing import adamw, parse_args, report, time_steps, training_step
from transformers import LlamaConfig, LlamaForCausalLM


def llama32_1b_config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5,
        max_position_embeddings=131072, tie_word_embeddings=True,
        rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        attn_implementation="sdpa")


def main() -> None:
    a = parse_args(__doc__, batch=4, seq=2048)
    cfg = llama32_1b_config()
    model = LlamaForCausalLM(cfg).cuda().train()
    n_params = sum(t.numel() for t in model.parameters())
    opt = adamw(model, lr=3e-4, betas=(0.9, 0.95))
    x = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda")
    step = training_step(model, opt, a.compile, input_ids=x, labels=x)

    t = time_steps(step, a.warmup, a.steps)
    flops = 6 * n_params + 12 * cfg.num_hidden_layers * cfg.num_attention_heads * 64 * a.seq
    mfu = flops * a.batch * a.seq / (t.median_ms / 1e3) / 989e12
    report("llama1b", a, t, mfu=mfu, tail=f", {n_params:,} parameters")


if __name__ == "__main__":
    main()
