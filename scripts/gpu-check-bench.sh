#!/usr/bin/env bash
# gpu-check-bench: the overhead of `gpusampler bench`'s sampling on the
# benchmarked load, on a real GPU (DESIGN.md §7): the same fixed-work torch
# load runs RUNS times without sampling and RUNS times under
# `gpusampler bench --runs 1` (10 Hz fields), interleaved in pairs of
# alternating order (plain, sampled; sampled, plain; ...), and the slowdown
# is the geometric mean of the pairs' sampled/plain ratios with its paired-t
# 95% confidence interval (goal ≤ 1%), as bench analyses interleaved runs.
# Then one full bench of the load writes JSON, Markdown and the SVG report.
# Needs bin/gpusampler (make gpu-check-build) and python3 with torch. Writes
# to $OUT (or ./gpu-check-report). Never changes the card's settings.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-./gpu-check-report}"
RUNS="${RUNS:-10}"
LIMIT="${LIMIT:-240}" # seconds for the whole script
mkdir -p "$OUT"
BIN=bin/gpusampler
if [ ! -x "$BIN" ]; then
	echo "gpu-check-bench: $BIN is missing: run 'make gpu-check-build' first" >&2
	exit 2
fi
timeout -k 10 "$LIMIT" python3 - "$BIN" "$OUT" "$RUNS" <<'PY' 2>&1 | tee "$OUT/bench-overhead.log"
import json, math, os, statistics, subprocess, sys, tempfile, time
binp, out, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
load = ["python3", "scripts/gpu-check-bench-load.py", "400", "4"]
tmp = tempfile.mkdtemp()
plain, sampled = [], []
def t95(df):
    table = [0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086]
    return table[df] if df < len(table) else 1.96 + 2.4 / df
def plain_run():
    t0 = time.perf_counter()
    r = subprocess.run(load, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t1 = time.perf_counter()
    if r.returncode != 0:
        why = (r.stderr.decode().strip().splitlines() or ["exit %d" % r.returncode])[-1]
        print("load failed (unsupported here?):", r.stderr.decode()[-500:])
        open(os.path.join(out, "bench-overhead.md"), "w").write(
            f"## gpusampler bench overhead\nNOT RUN: the load could not start ({why}): nothing measured\n")
        sys.exit(0)
    plain.append(t1 - t0)
def sampled_run(i):
    js = os.path.join(tmp, f"{i}.json")
    r = subprocess.run([binp, "bench", "--backend", "nvml", "--runs", "1", "--baseline", "0s", "--no-progress",
                        "--export-json", js, "--"] + load, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if r.returncode != 0:
        print("bench failed:", r.stderr.decode()[-800:]); sys.exit(1)
    sampled.append(json.load(open(js))["benchmarks"][0]["runs"][0]["wall_s"])
for i in range(runs):
    # pairs alternate their order (ABBA): neither side always runs first
    if i % 2 == 0:
        plain_run(); sampled_run(i)
    else:
        sampled_run(i); plain_run()
    print(f"pair {i + 1}: without {plain[-1]:.3f} s, with sampling {sampled[-1]:.3f} s", flush=True)
d = [math.log(s / p) for p, s in zip(plain, sampled)]
md, sd = statistics.mean(d), statistics.stdev(d)
half = t95(runs - 1) * sd / math.sqrt(runs)
ratio, lo, hi = math.exp(md), math.exp(md - half), math.exp(md + half)
if hi <= 1.01:
    verdict = "within the 1% goal"
elif lo > 1.01:
    verdict = "ABOVE the 1% goal"
else:
    verdict = f"inconclusive: the interval reaches {100 * (hi - 1):+.2f}%, more pairs needed"
report = (f"## gpusampler bench overhead ({runs} ABBA pairs, paired)\n"
          f"without sampling {statistics.mean(plain):.3f} ± {statistics.stdev(plain):.3f} s, with bench sampling {statistics.mean(sampled):.3f} ± {statistics.stdev(sampled):.3f} s\n"
          f"slowdown {100 * (ratio - 1):+.2f}% (95% CI {100 * (lo - 1):+.2f}% to {100 * (hi - 1):+.2f}%): {verdict}\n")
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
