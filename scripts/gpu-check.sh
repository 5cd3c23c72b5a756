#!/usr/bin/env bash
# gpu-check: validate the NVML backend on a real NVIDIA GPU (DESIGN.md §7).
# Runs on the GPU host, which has python3 + torch but no Go: build first,
# here, with `make gpu-check-build` (CGO_ENABLED=1 go build -o bin/gpucheck
# ./cmd/gpucheck). Writes its report to $OUT (or ./gpu-check-report). Never
# changes clocks, power limits, modes or MIG, never resets. At most ~5 min.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-./gpu-check-report}"
mkdir -p "$OUT"
BIN=bin/gpucheck
if [ ! -x "$BIN" ]; then
	echo "gpu-check: $BIN is missing: run 'make gpu-check-build' on a machine with Go first" >&2
	exit 2
fi
timeout -k 10 285 "$BIN" -out "$OUT" -load "python3 scripts/gpu-check-load.py" 2>&1 | tee "$OUT/gpu-check.log"
rc=${PIPESTATUS[0]}
echo "gpu-check: exit $rc, report in $OUT/report.md"
exit "$rc"
