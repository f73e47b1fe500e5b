"""step_timing.py: the training step and timing protocol the PyTorch anchors share with bench_train.

The flags (--batch, --seq, --warmup, --steps, --compile), fused AdamW with weight decay on the
matrices only, one bf16-autocast step of a Hugging Face model with its gradients clipped at 1.0,
and the timing: one step first (the compile, when there is one, is in it), `warmup` more, then
`steps` timed steps, each synchronised; the peak memory of the timed steps; the line that reports
them. Leaves out: the model and its inputs (the caller's).
"""
import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Callable, List, Optional

import torch


@dataclass
class Timing:
    median_ms: float
    min_ms: float
    first_step_s: float
    peak_mib: float


def time_steps(step: Callable[[], object], warmup: int, steps: int) -> Timing:
    t0 = time.time()
    step()
    torch.cuda.synchronize()
    first = time.time() - t0
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times: List[float] = []
    for _ in range(steps):
        s = time.time()
        step()
        torch.cuda.synchronize()
        times.append((time.time() - s) * 1e3)
    return Timing(statistics.median(times), min(times), first,
                  torch.cuda.max_memory_allocated() / 2**20)


def parse_args(doc: str, batch: int, seq: int) -> argparse.Namespace:
    """The anchors' flags, with this anchor's default batch and sequence length; seeds torch and
    lets matmuls use TF32, as bench_train does."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--seq", type=int, default=seq)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    return a


def adamw(model: torch.nn.Module, **kwargs) -> torch.optim.AdamW:
    """Fused AdamW, weight decay 0.1 on the matrices and none on the vectors; kwargs: lr, betas."""
    decay = [t for t in model.parameters() if t.dim() >= 2]
    no_decay = [t for t in model.parameters() if t.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}], fused=True, **kwargs)


def training_step(model: torch.nn.Module, opt: torch.optim.Optimizer, compile_it: bool,
                  **inputs) -> Callable[[], None]:
    """One step of a Hugging Face model that returns its loss (inputs: its arguments), under
    bf16 autocast, the gradients clipped at 1.0; through torch.compile with compile_it."""
    step_model = torch.compile(model) if compile_it else model

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return step


def report(workload: str, a: argparse.Namespace, t: Timing, mfu: Optional[float] = None,
           tail: str = "") -> None:
    """The anchor's line: ms/step (median, min), tokens/s, the MFU when given, the peak memory and
    the first step's seconds, then tail."""
    name = "torch.compile" if a.compile else "eager"
    tokens = a.batch * a.seq
    mfu_text = "" if mfu is None else f", MFU {100 * mfu:.1f}%"
    print(f"pytorch {workload} {name}: {t.median_ms:.2f} ms/step (min {t.min_ms:.2f}), "
          f"{tokens / t.median_ms * 1e3:,.0f} tokens/s{mfu_text}, peak {t.peak_mib:.0f} MiB, "
          f"first step {t.first_step_s:.1f} s{tail}")
