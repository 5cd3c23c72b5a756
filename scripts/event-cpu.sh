#!/usr/bin/env bash
# event-cpu: what watching driver events costs gpusampler in CPU, as a
# same-run comparison. Each round starts two `gpusampler run` processes at
# the same moment on the repo's fake driver (sampler/nvml/testdata/fakenvml.c)
# with GPUS fake GPUs (default 8) at the default config: one watches driver
# events, the other runs with events off (the fake answers
# nvmlDeviceGetSupportedEventTypes NOT_SUPPORTED, FAKENVML_EVENTS=ns, so no
# event set is waited on). Both are measured over the same WINDOW seconds
# (default 60) after SKIP seconds (default 10); which one starts first
# alternates between ROUNDS rounds (default 4). The fake's event wait
# blocks for its whole timeout like a real driver's (no control directory).
#
#   scripts/event-cpu.sh
#   ROUNDS=2 WINDOW=30 scripts/event-cpu.sh
#   BIN=/path/to/gpusampler scripts/event-cpu.sh   # a binary built elsewhere
#
# Figures: CPU % of a core = (utime + stime from /proc/PID/stat at the end
# of the window − at its start) / CLK_TCK / WINDOW × 100, for the whole
# process; "events cost" = on − off (percentage points of a core); "ratio"
# = off / on (what CPU falls to with events off). The last lines sum the
# rounds.
set -eu
cd "$(dirname "$0")/.."
GPUS="${GPUS:-8}"
ROUNDS="${ROUNDS:-4}"
WINDOW="${WINDOW:-60}"
SKIP="${SKIP:-10}"
tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
gcc -shared -fPIC -O1 -Wall -o "$tmp/libnvidia-ml.so.1" sampler/nvml/testdata/fakenvml.c
if [ -z "${BIN:-}" ]; then
	CGO_ENABLED=1 go build -o "$tmp/gpusampler" ./cmd/gpusampler
	BIN="$tmp/gpusampler"
fi
tck="$(getconf CLK_TCK)"
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# The fake samples like a real driver (the periods of scripts/nvml-calls.sh).
periods="1:166667,2:166667,3:166667,4:166667,5:100000,6:100000,8:166667,9:166667"
start() { # start NAME [VAR=value...]: sets $NAME to the PID
	local name="$1"
	shift
	mkdir -p "$tmp/state-$name"
	env GPUSAMPLER_NVML_LIBRARY="$tmp/libnvidia-ml.so.1" FAKENVML_DEVICES="$GPUS" FAKENVML_PERIODS_US="$periods" \
		STATE_DIRECTORY="$tmp/state-$name" "$@" \
		"$BIN" run --backend nvml --duration "$((SKIP + WINDOW + 5))s" --format influx --log-level info >/dev/null 2>"$tmp/$name.err" &
	printf -v "$name" '%s' "$!"
}
son=0 soff=0
printf "%-6s %-6s %12s %12s %12s %8s\n" round first "on %core" "off %core" "cost pp" "off/on"
for r in $(seq 1 "$ROUNDS"); do
	if [ $((r % 2)) -eq 1 ]; then
		start on; start off FAKENVML_EVENTS=ns; first=on
	else
		start off FAKENVML_EVENTS=ns; start on; first=off
	fi
	pids=("$on" "$off")
	sleep "$SKIP"
	a0=$(cpu "$on"); b0=$(cpu "$off")
	sleep "$WINDOW"
	a1=$(cpu "$on"); b1=$(cpu "$off")
	wait "$on" "$off" || { cat "$tmp/on.err" "$tmp/off.err" >&2; exit 1; }
	pids=()
	if ! grep -q "driver events not supported" "$tmp/off.err"; then
		echo "the events-off run still watched driver events" >&2
		exit 1
	fi
	son=$((son + a1 - a0)); soff=$((soff + b1 - b0))
	awk -v r="$r" -v f="$first" -v a=$((a1 - a0)) -v b=$((b1 - b0)) -v t="$tck" -v w="$WINDOW" 'BEGIN {
		on = a / t / w * 100; off = b / t / w * 100
		printf "%-6d %-6s %12.3f %12.3f %12.3f %8.2f\n", r, f, on, off, on - off, (on ? off / on : 0)
	}'
done
awk -v a="$son" -v b="$soff" -v t="$tck" -v w=$((WINDOW * ROUNDS)) -v g="$GPUS" 'BEGIN {
	on = a / t / w * 100; off = b / t / w * 100
	printf "all rounds (%d GPUs, %d s each): events on %.3f %% of a core, off %.3f %%, events cost %.3f pp (%.0f %% of the process), off/on %.2f\n",
		g, w, on, off, on - off, (on ? (on - off) / on * 100 : 0), (on ? off / on : 0)
}'
