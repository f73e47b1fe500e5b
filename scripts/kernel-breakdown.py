#!/usr/bin/env python3
"""kernel-breakdown.py: where a training step's GPU time goes, from Nsight Compute's CSV.

Reads `ncu --metrics gpu__time_duration.sum --csv` output (scripts/gpu-gpt-check.sh with NCU=1
writes one for the gpt workload and resnet50), sums each kernel's duration per class (attention,
convolutions, GEMMs, batch norm, layer norm, cross-entropy, optimizer, embedding, reductions,
elementwise, other) and prints the classes
and the top kernels, per step: the totals are divided by --steps (the steps the profiled run
made, warm-up included, or the timed ones alone with bench_train --profile-timed under
`ncu --profile-from-start off`). Kernels run one at a time under ncu, so the sum is the step's kernel
time without overlap or launch gaps, not its wall time. Leaves out: anything but durations.
Usage: scripts/kernel-breakdown.py ncu-gpt.csv --steps 3
"""
import argparse
import collections
import csv
import re
import sys

CLASSES = [  # (class, regex on the kernel name), first match wins
    ("attention (cuDNN SDPA)", r"sdpa|flash|fmha|attn"),
    ("convolution (cuDNN)", r"conv|fprop|dgrad|wgrad|nhwc|nchw"),
    ("GEMM (cuBLASLt)", r"gemm|xmma|cutlass|nvjet|sm90_|sm80_|matmul"),
    ("batch norm", r"bn_|batch_norm"),
    ("layer norm", r"layer_norm"),
    ("cross-entropy", r"cross_entropy|softmax|nll"),
    ("optimizer", r"adam|sgd|multi_tensor|optim|clip|norm_sq|foreach"),
    ("embedding", r"embedding|index|radix|sort|scatter|gather"),
    ("reduction", r"reduce|sum_|welford"),
    ("elementwise / cast / copy", r"elementwise|unary|binary|cast|copy|fill|vector|loop|gelu|dropout"),
]
SCALE = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}


def classify(name):
    low = name.lower()
    for cls, pattern in CLASSES:
        if re.search(pattern, low):
            return cls
    return "other"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=float, default=1.0)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    lines = open(a.csv, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{a.csv}: no ncu CSV header (\"ID\",...) found")
    per_class, per_kernel, count = collections.Counter(), collections.Counter(), collections.Counter()
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ms = float(row["Metric Value"].replace(",", "")) * SCALE.get(row["Metric Unit"], 1e-6)
        name = row["Kernel Name"]
        per_class[classify(name)] += ms
        per_kernel[name[:110]] += ms
        count[name[:110]] += 1
    total = sum(per_class.values()) / a.steps
    print(f"kernel time per step: {total:.2f} ms ({sum(count.values())} kernels / {a.steps:g} steps)")
    for cls, ms in per_class.most_common():
        print(f"  {cls:28s} {ms / a.steps:8.2f} ms  {100 * ms / a.steps / total:5.1f} %")
    print(f"top {a.top} kernels (ms per step, launches per step):")
    for name, ms in per_kernel.most_common(a.top):
        print(f"  {ms / a.steps:8.3f} {count[name] / a.steps:6.1f}  {name}")


if __name__ == "__main__":
    main()
