#!/usr/bin/env python3
"""Golden values for tests/nn/test_golden.cpp, computed with PyTorch in float64 on the CPU.

For a small MLP and a small CNN this writes the weights, a batch, and what one training step
gives: the loss, every parameter's gradient, the BatchNorm running statistics, the parameters
after one optimizer step, and the loss of the same batch after that step.

Format of each .txt file (read by the test, which needs no PyTorch): for every tensor a line
"<name> <ndim> <dim0> <dim1> ..." followed by a line of its values in row-major order, printed
with 17 significant digits (exact for float64). Lines starting with '#' are comments.

Run: python3 tests/nn/golden/make_golden.py   (needs torch; pip install torch)
"""
import os

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))


def write(path, entries, header):
    with open(path, "w") as f:
        f.write(f"# {header}\n# produced by make_golden.py with torch {torch.__version__}\n")
        for name, t in entries:
            t = t.detach().to(torch.float64).contiguous()
            f.write(f"{name} {t.dim()} " + " ".join(str(d) for d in t.shape) + "\n")
            f.write(" ".join(f"{v:.17g}" for v in t.reshape(-1).tolist()) + "\n")


def one_step(model, x, target, loss_fn, make_opt):
    """Loss, gradients, buffers after forward, parameters after one step, loss after it."""
    entries = [(f"param.{n}", p.clone()) for n, p in model.named_parameters()]
    entries += [(f"buffer_before.{n}", b.clone()) for n, b in model.named_buffers()]
    entries += [("input", x), ("target", target.to(torch.float64))]
    opt = make_opt(model.parameters())
    opt.zero_grad()
    loss = loss_fn(model(x), target)
    loss.backward()
    entries.append(("loss", loss))
    entries += [(f"grad.{n}", p.grad.clone()) for n, p in model.named_parameters()]
    entries += [(f"buffer.{n}", b.clone()) for n, b in model.named_buffers()]  # the next forward updates them
    opt.step()
    entries += [(f"after.{n}", p.clone()) for n, p in model.named_parameters()]
    with torch.no_grad():
        entries.append(("loss_after", loss_fn(model(x), target)))
    return entries


def main():
    torch.set_default_dtype(torch.float64)

    torch.manual_seed(1234)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(6, 8)
    y = torch.randint(0, 4, (6,))
    entries = one_step(
        mlp, x, y, nn.CrossEntropyLoss(label_smoothing=0.1),
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4))
    write(os.path.join(HERE, "mlp.txt"), entries,
          "MLP Linear(8,16)-ReLU-Linear(16,4); CrossEntropyLoss(label_smoothing=0.1); "
          "SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)")

    torch.manual_seed(5678)
    # No conv bias: BatchNorm cancels it, so its gradient is rounding noise (~1e-16) that Adam's
    # normalisation would blow up into an update that no two implementations agree on.
    cnn = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
    x = torch.randn(5, 1, 8, 8)
    y = torch.randint(0, 3, (5,))
    entries = one_step(cnn, x, y, nn.CrossEntropyLoss(),
                       lambda ps: torch.optim.AdamW(ps, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.05))
    write(os.path.join(HERE, "cnn.txt"), entries,
          "CNN Conv2d(1,4,3,pad 1,no bias)-BatchNorm2d(4)-ReLU-MaxPool2d(2)-Flatten-Linear(64,3) on 8x8; "
          "CrossEntropyLoss(); AdamW(lr=1e-2, betas=(0.9, 0.99), weight_decay=0.05); training mode")


if __name__ == "__main__":
    main()
