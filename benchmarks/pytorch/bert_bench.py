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
import torch
from step_timing import adamw, parse_args, report, time_steps, training_step
from transformers import BertConfig, BertForMaskedLM


def main() -> None:
    a = parse_args(__doc__, batch=32, seq=512)
    cfg = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     attn_implementation="sdpa")
    model = BertForMaskedLM(cfg).cuda().train()
    opt = adamw(model, lr=6e-4)
    x = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda")
    y = torch.where(torch.rand(a.batch, a.seq, device="cuda") < 0.15,
                    torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda"), -100)
    step = training_step(model, opt, a.compile, input_ids=x, labels=y)

    report("bert-base", a, time_steps(step, a.warmup, a.steps))


if __name__ == "__main__":
    main()
