#!/usr/bin/env python3
"""Fixed-work GPU load for the bench overhead check (scripts/gpu-check-bench.sh):
ITERS bf16 matmuls in STEPS steps, each step marked for `gpusampler bench`
when GPUSAMPLER_MARKS is set (after torch.cuda.synchronize(): CUDA is
asynchronous). Usage: gpu-check-bench-load.py [ITERS] [STEPS]"""
import os
import sys
import time

import torch

iters = int(sys.argv[1]) if len(sys.argv) > 1 else 400
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
marks = open(os.environ["GPUSAMPLER_MARKS"], "w", buffering=1) if "GPUSAMPLER_MARKS" in os.environ else None


def mark(name):
    torch.cuda.synchronize()  # the GPU work so far is done before the mark
    if marks:
        marks.write(f"{name} {time.time():.6f}\n")


N = 8192
a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
for s in range(steps):
    mark(f"step {s}")
    for _ in range(iters // steps):
        c = a @ b
mark("done")
