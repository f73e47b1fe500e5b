#!/usr/bin/env python3
"""PyTorch DDP twin of loom's bench_ddp: the same workloads (docs/workloads.md: mlp and cnn at 256
per GPU, wide at 2048), Adam(lr 1e-3), strict fp32 (TF32 off), random inputs already on the GPU,
10 warm-up steps, then 5 x 50 timed steps (median ms/step), and the gradients' all-reduce timed
alone (25 MiB buckets, 1 MiB first, as DDP builds them). One process per GPU:

    python3 -m torch.distributed.run --nproc_per_node=2 benchmarks/pytorch/ddp_bench.py
    python3 benchmarks/pytorch/ddp_bench.py            # one GPU, no DDP

With --amp bf16 the forward and loss run under torch.autocast(bfloat16) (float32 master weights)
and the rows are named mlp_bf16, cnn_bf16, wide_bf16, as bench_ddp --amp bf16 names them.

Prints "RESULT torch <workload> <gpus> <ms/step> <all-reduce alone ms> -1" lines for
scripts/gpu-ddp.sh (PyTorch has no per-step exposure measurement; the script derives it).
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def cnn():
    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]
    return nn.Sequential(*block(1, 32), *block(32, 64), nn.MaxPool2d(2), *block(64, 128), nn.MaxPool2d(2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))


def wide():
    layers = [nn.Flatten(), nn.Linear(784, 4096), nn.ReLU()]
    for _ in range(7):
        layers += [nn.Linear(4096, 4096), nn.ReLU()]
    layers.append(nn.Linear(4096, 10))
    return nn.Sequential(*layers)


WORKLOADS = {"mlp": (mlp, 256), "cnn": (cnn, 256), "wide": (wide, 2048)}


def synced(dev):
    torch.cuda.synchronize(dev)
    return time.perf_counter()


def comm_alone(model, world, dev):
    """All-reduce every gradient once, in DDP-sized buckets (reverse order), back to back."""
    grads = [p for p in reversed(list(model.parameters()))]
    buckets, cur, size, cap = [], [], 0, 1 << 20
    for p in grads:
        cur.append(p.numel())
        size += p.numel() * p.element_size()
        if size >= cap:
            buckets.append(sum(cur))
            cur, size, cap = [], 0, 25 << 20
    if cur:
        buckets.append(sum(cur))
    tensors = [torch.randn(n, device=dev) for n in buckets]
    times = []
    for _ in range(20):
        t0 = synced(dev)
        works = [dist.all_reduce(t, async_op=True) for t in tensors]
        for w in works:
            w.wait()
        times.append((synced(dev) - t0) * 1e3)
    return statistics.median(times)


def run(name, dev, world, rank, args):
    make, batch = WORKLOADS[name]
    torch.manual_seed(0)
    model = make().to(dev)
    net = model
    if world > 1:
        net = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch.manual_seed(1 + rank)
    x = torch.randn(batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    loss_fn = nn.CrossEntropyLoss()

    bf16 = args.amp == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    ms = []
    for _ in range(args.repeats):
        t0 = synced(dev)
        for _ in range(args.steps):
            step()
        ms.append((synced(dev) - t0) * 1e3 / args.steps)
    step_ms = statistics.median(ms)
    comm = 0.0
    if world > 1:
        t = torch.tensor([step_ms], device=dev, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        step_ms = t.item()
        comm = comm_alone(model, world, dev)
        t = torch.tensor([comm], device=dev, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        comm = t.item()
    if bf16:
        name += "_bf16"
    if rank == 0:
        print(f"{name:6s} gpus {world}  {step_ms:9.3f} ms/step  all-reduce alone {comm:8.3f} ms", flush=True)
        print(f"RESULT torch {name} {world} {step_ms:.4f} {comm:.4f} -1", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="all", choices=["all", *WORKLOADS])
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--amp", default="off", choices=["off", "bf16"])
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    if world > 1:
        dist.init_process_group("nccl", device_id=dev)
    if rank == 0:
        print(f"ddp_bench.py: torch {torch.__version__}, {world} process(es)", flush=True)
    for name in WORKLOADS:
        if args.workload in ("all", name):
            run(name, dev, world, rank, args)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
