"""step_timing.py: the timing protocol the PyTorch anchors share with bench_train.

One step first (the compile, when there is one, is in it), `warmup` more, then `steps` timed steps,
each synchronised; the peak memory of the timed steps. Leaves out: what a step does (the caller's).
"""
import statistics
import time
from dataclasses import dataclass
from typing import Callable, List

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
