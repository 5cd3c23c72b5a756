#!/usr/bin/env bash
# gpu-check-calls: `make nvml-calls`' figure on a real driver. nvml-calls.sh
# counts calls inside the fake driver; a real driver cannot be asked, so this
# runs `gpusampler run` at its default config for DURATION (default 60s) and
# reads the engine's own per-function NVML call counters from its
# self-metrics (gpusampler_self, scope=device, every stats_interval = 10 s):
# the counts of the first self-metrics line (about 10 s in) are subtracted
# from the final line's, over the time between them — the steady state, as
# nvml-calls.sh's SKIP_MS=10000. Needs bin/gpusampler (make
# gpu-check-build); BIN overrides. Prints a Markdown section.
#
# Figures: calls/GPU/s = calls between the two lines / GPUs / seconds
# between them; published samples per NVML call = every sample the engine
# published (buffer samples and field values) / all NVML calls. Two
# differences from nvml-calls.sh's fake-driver count: the engine does not
# count its driver event waits (nvmlEventSetWait, about 0.5 calls/GPU/s),
# and nvml-calls.sh's "driver samples per NVML call" counts only buffer
# samples. On the fake driver (2 GPUs, PERIODS=driver, 40 s) this script
# gave 8.82 calls/GPU/s and nvml-calls.sh 9.57, of which 0.49 event waits.
set -u
cd "$(dirname "$0")/.."
BIN="${BIN:-bin/gpusampler}"
DURATION="${DURATION:-60s}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if ! STATE_DIRECTORY="$tmp/state" "$BIN" run --backend nvml --duration "$DURATION" --format influx >"$tmp/out" 2>"$tmp/err"; then
	echo "gpu-check-calls: gpusampler run failed:" >&2
	tail -5 "$tmp/err" >&2
	exit 1
fi
grep '^gpusampler_self,' "$tmp/out" | grep 'scope=device' | awk -v dur="$DURATION" '
function group(f) {
	if (f ~ /GetSamples/) return "buffers (GetSamples)"
	if (f ~ /GetFieldValues/) return "fields (GetFieldValues)"
	if (f ~ /EventSetWait/) return "event waits"
	if (f ~ /Gpm/) return "GPM"
	if (f ~ /[Pp]rocess/) return "processes"
	return "point queries"
}
{
	split($1, tags, ","); gpu = ""
	for (i in tags) if (tags[i] ~ /^gpu=/) gpu = substr(tags[i], 5)
	ts = $NF
	n = split($2, kv, ",")
	if (!(gpu in first)) { first[gpu] = ts; gpus++ }
	last[gpu] = ts
	for (i = 1; i <= n; i++) {
		split(kv[i], p, "="); v = p[2]; sub(/i$/, "", v)
		if (!((gpu, p[1]) in v0)) v0[gpu, p[1]] = v
		v1[gpu, p[1]] = v
		if (p[1] ~ /^nvml_calls_[A-Za-z]/ && p[1] != "nvml_calls_per_s") fn[p[1]] = 1
	}
}
END {
	if (gpus == 0) { print "no self-metrics lines: nothing to count"; exit 1 }
	w = 0
	for (g in first) { w += (last[g] - first[g]) / 1e9 }
	w /= gpus
	if (w <= 0) { print "one self-metrics line per GPU only: run longer than 10 s"; exit 1 }
	printf "\n## NVML calls at the default config (make nvml-calls figure, real driver)\n"
	printf "gpusampler run --backend nvml --duration %s, %d GPUs, counted over %.1f s between self-metrics lines\n", dur, gpus, w
	for (f in fn) {
		c = 0; for (g in first) c += v1[g, f] - v0[g, f]
		name = substr(f, 12)
		if (name !~ /_size$/) { total += c; grp[group(name)] += c }
		if (c > 0) printf "- %-40s %8.2f calls/GPU/s\n", name, c / gpus / w | "sort"
	}
	close("sort")
	for (k in grp) printf "- group %-34s %8.2f calls/GPU/s\n", k, grp[k] / gpus / w | "sort"
	close("sort")
	pub = 0; for (g in first) pub += v1[g, "published"] - v0[g, "published"]
	printf "- TOTAL (driver event waits not counted)  %8.2f calls/GPU/s\n", total / gpus / w
	printf "- published samples per NVML call          %8.2f\n", (total ? pub / total : 0)
	loss = 0; for (g in first) loss += v1[g, "suspected_losses"]
	printf "- suspected sample losses                  %8d\n", loss
}'
