#!/usr/bin/env python3
"""bert_bench.py: the PyTorch anchor for bench_train's bert-base workload.

BERT-base (bert-base-uncased's shape, built by Hugging Face `transformers` from a config, random
weights) pretrained by masked-language modelling as bench_train trains loom's: B 32, T 512 random
token ids, a label at 15% of the positions (-100 elsewhere), no dropout (loom's fused attention
takes none), bf16 autocast over float32 weights, fused AdamW (lr 6e-4, betas 0.9/0.999, weight
decay 0.1 on the matrices), gradient clipping at 1.0, SDPA attention, optionally torch.compile.
Prints ms/step (median), tokens/s and the peak memory.

    python3 benchmarks/pytorch/bert_bench.py --compile
"""
import argparse
import torch
from step_timing import time_steps
from transformers import BertConfig, BertForMaskedLM


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     attn_implementation="sdpa")
    model = BertForMaskedLM(cfg).cuda().train()
    decay = [t for t in model.parameters() if t.dim() >= 2]
    rest = [t for t in model.parameters() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=6e-4, fused=True)
    step_model = torch.compile(model) if a.compile else model
    x = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda")
    y = torch.where(torch.rand(a.batch, a.seq, device="cuda") < 0.15,
                    torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda"), -100)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(input_ids=x, labels=y).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    t = time_steps(step, a.warmup, a.steps)
    ms = t.median_ms
    name = "torch.compile" if a.compile else "eager"
    print(f"pytorch bert-base {name}: {ms:.2f} ms/step (min {t.min_ms:.2f}), "
          f"{a.batch * a.seq / ms * 1e3:,.0f} tokens/s, peak {t.peak_mib:.0f} MiB, "
          f"first step {t.first_step_s:.1f} s")


if __name__ == "__main__":
    main()
