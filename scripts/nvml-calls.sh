#!/usr/bin/env bash
# nvml-calls: NVML calls per GPU per second, by function, and driver samples
# per NVML call, counted by the repo's fake driver (not by gpusampler's own
# bookkeeping). Runs `gpusampler run` at its default config (or CONFIG)
# against sampler/nvml/testdata/fakenvml.c with GPUS fake GPUs (default 8)
# for DURATION (default 60s) and counts from SKIP_MS (default 10000) to the
# end: the steady state. Each run starts from an empty state directory (no
# drain cursors of an earlier run on this machine).
#
#   scripts/nvml-calls.sh            # 8 GPUs, 60 s, counted 10-60 s
#   GPUS=2 DURATION=20s SKIP_MS=5000 scripts/nvml-calls.sh
#   CONFIG=scripts/nvml-calls-1s.toml scripts/nvml-calls.sh   # a config file
#   PERIODS=uniform scripts/nvml-calls.sh
#
# PERIODS sets the fake's sample period per buffer type: "driver" (the
# default) samples like a real driver and the simulator do: power every
# 20 ms, GPU, memory and media-engine utilization every 1/6 s, SM and
# memory clocks every 100 ms, 100 samples deep; "uniform" samples every
# buffer every 20 ms (every buffer then spans 2 s, so none may be drained
# less than once a second without loss). CONFIG, when set, is passed as
# --config (its [[outputs.stdout]] block writes line protocol); EXTRA_ENV
# (VAR=value ...) and EXTRA_ARGS go to the gpusampler process.
#
# Figures: calls/GPU/s = calls in the window / GPUs / window seconds;
# samples/call = buffer samples the driver handed out by
# nvmlDeviceGetSamples / all NVML calls; nvmlDeviceGetSamples.size is the
# part of nvmlDeviceGetSamples that were size queries; the last line counts
# the engine's warnings of suspected sample losses (0: none lost).
set -eu
if [ -n "${CONFIG:-}" ]; then CONFIG="$(realpath "$CONFIG")"; fi
cd "$(dirname "$0")/.."
GPUS="${GPUS:-8}"
DURATION="${DURATION:-60s}"
SKIP_MS="${SKIP_MS:-10000}"
PERIODS="${PERIODS:-driver}"
case "$PERIODS" in
driver) periods="1:166667,2:166667,3:166667,4:166667,5:100000,6:100000,8:166667,9:166667" ;;
uniform) periods="" ;;
*) echo "PERIODS=$PERIODS: want driver or uniform" >&2; exit 2 ;;
esac
out=(--format influx)
if [ -n "${CONFIG:-}" ]; then out=(--config "$CONFIG"); fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
gcc -shared -fPIC -O1 -Wall -o "$tmp/libnvidia-ml.so.1" sampler/nvml/testdata/fakenvml.c
CGO_ENABLED=1 go build -o "$tmp/gpusampler" ./cmd/gpusampler
env GPUSAMPLER_NVML_LIBRARY="$tmp/libnvidia-ml.so.1" FAKENVML_DEVICES="$GPUS" FAKENVML_PERIODS_US="$periods" \
	FAKENVML_FUNCS_FILE="$tmp/funcs" FAKENVML_COUNT_FROM_MS="$SKIP_MS" STATE_DIRECTORY="$tmp/state" ${EXTRA_ENV:-} \
	"$tmp/gpusampler" run --backend nvml --duration "$DURATION" "${out[@]}" ${EXTRA_ARGS:-} >/dev/null 2>"$tmp/stderr" || {
	cat "$tmp/stderr" >&2
	exit 1
}
awk -v periods="$PERIODS" '
function group(f) {
	if (f ~ /GetSamples/) return "buffers (GetSamples)"
	if (f ~ /GetFieldValues/) return "fields (GetFieldValues)"
	if (f ~ /EventSetWait/) return "event waits"
	if (f ~ /Gpm/) return "GPM"
	if (f ~ /Process/) return "processes"
	return "point queries"
}
$1 == "devices" { n = $2 }
$1 == "window_s" { w = $2 }
$1 == "call" { c[$2] = $3; if ($2 !~ /\.size$/) { total += $3; g[group($2)] += $3 } }
$1 == "samples" { s += $3; st[$2] = $3 }
END {
	printf "fake NVML (%s periods), %d GPUs, counted over %.1f s\n", periods, n, w
	for (f in c) printf "  %-45s %8.2f calls/GPU/s\n", f, c[f] / n / w | "sort"
	close("sort")
	for (k in g) printf "  group %-39s %8.2f calls/GPU/s\n", k, g[k] / n / w | "sort"
	close("sort")
	printf "  TOTAL                                         %8.2f calls/GPU/s\n", total / n / w
	for (t in st) printf "  buffer type %-33s %8.2f samples/GPU/s\n", t, st[t] / n / w | "sort"
	close("sort")
	printf "  driver samples                                %8.2f samples/GPU/s\n", s / n / w
	printf "  driver samples per NVML call                  %8.2f\n", (total ? s / total : 0)
	if (g["buffers (GetSamples)"]) printf "  driver samples per GetSamples call            %8.2f\n", s / g["buffers (GetSamples)"]
}' "$tmp/funcs"
# Every loss the engine suspects is logged once as a warning.
printf "  sample-loss warnings in the log               %5d\n" "$(grep -c -e 'sample buffer overran' -e 'sample buffer filled up' "$tmp/stderr" || true)"
