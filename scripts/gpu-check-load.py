#!/usr/bin/env python3
"""Matrix-multiply load for gpu-check. Protocol on stdin/stdout:
prints "ready" once warmed up; then each "run SECONDS" line runs the load for
that long and prints "done ITERATIONS ELAPSED_SECONDS"; "quit" exits."""
import sys
import time

try:
    import torch
except Exception as e:  # reported as "unsupported here" by gpucheck
    print(f"error torch unavailable: {e}", flush=True)
    sys.exit(3)

if not torch.cuda.is_available():
    print("error cuda unavailable", flush=True)
    sys.exit(3)

N = 8192
a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
for _ in range(20):
    c = a @ b
torch.cuda.synchronize()
print(f"ready n={N} flops_per_iter={2 * N**3}", flush=True)

for line in sys.stdin:
    cmd = line.split()
    if not cmd or cmd[0] == "quit":
        break
    if cmd[0] == "run":
        secs = float(cmd[1])
        iters = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < secs:
            for _ in range(10):
                c = a @ b
            torch.cuda.synchronize()
            iters += 10
        print(f"done {iters} {time.perf_counter() - t0:.6f}", flush=True)
