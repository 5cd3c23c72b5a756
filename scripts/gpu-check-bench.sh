#!/usr/bin/env bash
# gpu-check-bench: the overhead of `gpusampler bench`'s sampling on the
# benchmarked load, on a real GPU (DESIGN.md §7): the same fixed-work torch
# load runs RUNS times without sampling and RUNS times under
# `gpusampler bench --runs 1` (10 Hz fields), interleaved, and the ratio of
# mean wall times is reported with a 95% confidence interval (goal ≤ 1%).
# Then one full bench of the load writes JSON, Markdown and the SVG report.
# Needs bin/gpusampler (make gpu-check-build) and python3 with torch. Writes
# to $OUT (or ./gpu-check-report). Never changes the card's settings.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-./gpu-check-report}"
RUNS="${RUNS:-10}"
mkdir -p "$OUT"
BIN=bin/gpusampler
if [ ! -x "$BIN" ]; then
	echo "gpu-check-bench: $BIN is missing: run 'make gpu-check-build' first" >&2
	exit 2
fi
timeout -k 10 240 python3 - "$BIN" "$OUT" "$RUNS" <<'PY' 2>&1 | tee "$OUT/bench-overhead.log"
import json, math, os, statistics, subprocess, sys, tempfile, time
binp, out, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
load = ["python3", "scripts/gpu-check-bench-load.py", "400", "4"]
tmp = tempfile.mkdtemp()
plain, sampled = [], []
def t95(df):
    table = [0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086]
    return table[df] if df < len(table) else 1.96 + 2.4 / df
for i in range(runs):
    t0 = time.perf_counter()
    r = subprocess.run(load, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t1 = time.perf_counter()
    if r.returncode != 0:
        print("load failed (unsupported here?):", r.stderr.decode()[-500:]); sys.exit(0)
    plain.append(t1 - t0)
    js = os.path.join(tmp, f"{i}.json")
    r = subprocess.run([binp, "bench", "--backend", "nvml", "--runs", "1", "--baseline", "0s", "--no-progress",
                        "--export-json", js, "--"] + load, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if r.returncode != 0:
        print("bench failed:", r.stderr.decode()[-800:]); sys.exit(1)
    sampled.append(json.load(open(js))["benchmarks"][0]["runs"][0]["wall_s"])
    print(f"run {i}: without {plain[-1]:.3f} s, with sampling {sampled[-1]:.3f} s", flush=True)
ma, mb = statistics.mean(plain), statistics.mean(sampled)
va, vb = statistics.variance(plain) / runs, statistics.variance(sampled) / runs
ratio = mb / ma
df = (va + vb) ** 2 / (va * va / (runs - 1) + vb * vb / (runs - 1)) if va + vb > 0 else runs - 1
half = t95(max(1, int(df))) * ratio * math.sqrt(va / ma**2 + vb / mb**2)
verdict = "within the 1% goal" if (ratio - 1) * 100 <= 1 else "ABOVE the 1% goal"
report = (f"## gpusampler bench overhead (interleaved, {runs} runs each)\n"
          f"without sampling {ma:.3f} ± {statistics.stdev(plain):.3f} s, with bench sampling {mb:.3f} ± {statistics.stdev(sampled):.3f} s\n"
          f"slowdown {100 * (ratio - 1):+.2f}% ± {100 * half:.2f}% (95% CI): {verdict}\n")
print(report)
open(os.path.join(out, "bench-overhead.md"), "w").write(report)
r = subprocess.run([binp, "bench", "--backend", "nvml", "--runs", "3", "--no-progress",
                    "--export-json", os.path.join(out, "bench.json"), "--export-markdown", os.path.join(out, "bench.md"),
                    "--export-svg", os.path.join(out, "bench.svg"), "--"] + load, capture_output=True)
open(os.path.join(out, "bench-table.txt"), "wb").write(r.stdout + r.stderr)
print(f"full bench: exit {r.returncode}, table in {out}/bench-table.txt")
PY
rc=${PIPESTATUS[0]}
echo "gpu-check-bench: exit $rc, report in $OUT/bench-overhead.md"
exit "$rc"
