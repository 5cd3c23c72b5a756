#!/usr/bin/env bash
# gpu-check: validate gpusampler on a real NVIDIA GPU, in one call of at most
# 10 minutes, with one report ($OUT/report.md, under 200 lines):
#   1. bin/gpucheck (at most 300 s): versions, devices, every catalog read
#      (fields, queries, point reads, GPM) and the nvidia_smi drop-in's reads
#      beside nvidia-smi (CUDA and VBIOS versions, display, encoder and FBC
#      stats, pending retirement, media-engine utilization), sample buffers
#      drained from cursor 0 idle and after the load (depth, real period,
#      zero-valued samples: is an idle media engine's buffer empty or full of
#      zeros?), beside the periods the fake driver assumes; sampling under a
#      torch load beside nvidia-smi, cost, gaps, losses (the drain classes at
#      their defaults), throughput with and without sampling (ABBA windows,
#      paired); idle. A phase whose load cannot start is reported NOT RUN.
#   2. scripts/gpu-check-calls.sh (at most 90 s): `make nvml-calls`' figure
#      (NVML calls/GPU/s by function at the default config) on the real driver.
#   3. scripts/gpu-check-bench.sh (at most 170 s): bench's sampling overhead on
#      a fixed torch load (interleaved ABBA, paired), and a full bench report.
# The GPU host has python3 + torch but no Go: build here first with
# `make gpu-check-build` and carry bin/. Never changes clocks, power limits,
# modes or MIG, never resets.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-./gpu-check-report}"
mkdir -p "$OUT"
for b in bin/gpucheck bin/gpusampler; do
	if [ ! -x "$b" ]; then
		echo "gpu-check: $b is missing: run 'make gpu-check-build' on a machine with Go first" >&2
		exit 2
	fi
done
start=$(date +%s)
timeout -k 10 300 bin/gpucheck -out "$OUT" -load "python3 scripts/gpu-check-load.py" 2>&1 | tee "$OUT/gpu-check.log"
rc=${PIPESTATUS[0]}
if [ ! -f "$OUT/report.md" ]; then
	printf '# gpu-check report\n\ngpucheck ended (exit %s) before writing its report: see gpu-check.log\n' "$rc" >"$OUT/report.md"
fi
echo "gpu-check: NVML calls at the default config (60 s)..."
if ! timeout -k 5 90 scripts/gpu-check-calls.sh >"$OUT/calls.md" 2>>"$OUT/gpu-check.log"; then
	printf '\n## NVML calls at the default config\nnot measured: scripts/gpu-check-calls.sh failed (see gpu-check.log)\n' >>"$OUT/calls.md"
	[ "$rc" -eq 0 ] && rc=1
fi
cat "$OUT/calls.md" >>"$OUT/report.md"
echo "gpu-check: bench overhead..."
LIMIT=170 RUNS="${RUNS:-10}" timeout -k 5 180 scripts/gpu-check-bench.sh >>"$OUT/gpu-check.log" 2>&1
brc=$?
if [ -f "$OUT/bench-overhead.md" ]; then
	printf '\n' >>"$OUT/report.md"
	cat "$OUT/bench-overhead.md" >>"$OUT/report.md"
else
	printf '\n## gpusampler bench overhead\nnot measured (exit %s): see gpu-check.log\n' "$brc" >>"$OUT/report.md"
fi
[ "$rc" -eq 0 ] && [ "$brc" -ne 0 ] && rc=$brc
printf '\ngpu-check: %d s in all, report %d lines\n' "$(($(date +%s) - start))" "$(wc -l <"$OUT/report.md")" | tee -a "$OUT/report.md"
echo "gpu-check: exit $rc, report in $OUT/report.md"
exit "$rc"
