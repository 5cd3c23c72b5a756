#!/usr/bin/env bash
# tree-rss: memory of the process tree of `gpusampler run` on GPUS simulated
# GPUs (default 8) with four network outputs (influxdb, nats, telegraf,
# prometheus; OUTPUTS names a subset), which run in one child process. The
# sinks are real:
# Debian's influxd (the influxdb output and the telegraf output, whose
# influxdb_listener speaks the same /write API) and Debian's nats-server,
# both on free loopback ports in a temp dir; prometheus is scraped once per
# reading.
#
#   scripts/tree-rss.sh                   # bin/gpusampler, 8 GPUs
#   BIN=/tmp/other/gpusampler WARMUP=150 READINGS=10 scripts/tree-rss.sh
#   RING_SIZE=16384 WARMUP=150 scripts/tree-rss.sh   # [sampler] ring_size
#   GPUS=64 OUTPUTS=nats scripts/tree-rss.sh          # only these outputs
#
# After WARMUP seconds (default 20) it takes READINGS readings (default 5)
# one INTERVAL (default 2 s) apart. Figures, per reading: RSS = sum of
# VmRSS (/proc/PID/status) over gpusampler and all its descendants; PSS =
# sum of Pss (/proc/PID/smaps_rollup), which splits pages the processes
# share (the same executable's text) between them. Printed: each process
# at the last reading, then the tree's RSS and PSS at the last reading and
# the largest over the readings, in MiB (1 MiB = 1024 KiB). The figures
# depend on when they are taken: the run process's own RSS rises for about
# two minutes (the heap grows to its GC target; a ring lane grows only
# while its output falls behind), then stays flat, about 34 MiB on 8 GPUs; so
# compare runs with the same WARMUP, 150 or more for the steady state
# (RING_SIZE sets ring_size, the default when empty). CPU is each
# process's user+system time from the first reading to the last, in % of
# one core. The run fails unless each influxdb database written to
# (influxdb, telegraf) received records.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-bin/gpusampler}"
GPUS="${GPUS:-8}"
WARMUP="${WARMUP:-20}"
READINGS="${READINGS:-5}"
INTERVAL="${INTERVAL:-2}"
RING_SIZE="${RING_SIZE:-}"
OUTPUTS="${OUTPUTS:-influxdb nats telegraf prometheus}"
want() { [[ " $OUTPUTS " == *" $1 "* ]]; }
for o in $OUTPUTS; do
	case "$o" in
	influxdb | nats | telegraf | prometheus) ;;
	*)
		echo "tree-rss: unknown output $o in OUTPUTS (influxdb nats telegraf prometheus)" >&2
		exit 1
		;;
	esac
done
for b in influxd nats-server python3; do
	command -v "$b" >/dev/null || {
		echo "tree-rss: $b not found (Debian packages influxdb, nats-server, python3; .ci/run installs them)" >&2
		exit 1
	}
done
[ -x "$BIN" ] || {
	echo "tree-rss: $BIN not built (make build)" >&2
	exit 1
}
tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
waitfor() { # waitfor WHAT CMD...: retry CMD for up to 30 s
	local what="$1"
	shift
	for _ in $(seq 300); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	echo "tree-rss: $what did not come up" >&2
	exit 1
}
http() { python3 -c 'import sys, urllib.request as u; u.urlopen(u.Request(sys.argv[1], data=(sys.argv[2].encode() if len(sys.argv) > 2 else None)), timeout=5).read()' "$@"; }

influx_http="$(freeport)"
influx_rpc="$(freeport)"
cat >"$tmp/influxdb.conf" <<EOF
reporting-disabled = true
bind-address = "127.0.0.1:$influx_rpc"
[meta]
  dir = "$tmp/influx/meta"
  logging-enabled = false
[data]
  dir = "$tmp/influx/data"
  wal-dir = "$tmp/influx/wal"
  query-log-enabled = false
[http]
  bind-address = "127.0.0.1:$influx_http"
  log-enabled = false
[monitor]
  store-enabled = false
[logging]
  level = "warn"
EOF
influxd -config "$tmp/influxdb.conf" >"$tmp/influxd.log" 2>&1 &
pids+=($!)
nats_port="$(freeport)"
nats-server -a 127.0.0.1 -p "$nats_port" >"$tmp/nats.log" 2>&1 &
pids+=($!)
waitfor influxd http "http://127.0.0.1:$influx_http/ping"
for db in gpusampler telegraf; do
	http "http://127.0.0.1:$influx_http/query" "q=CREATE DATABASE $db"
done
waitfor nats-server python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$nats_port"

prom_port="$(freeport)"
cat >"$tmp/gpusampler.toml" <<EOF
[sampler]
  backend = "sim"
  gpus = $GPUS
${RING_SIZE:+  ring_size = $RING_SIZE}
EOF
if want influxdb; then
	printf '\n[[outputs.influxdb]]\n  url = "http://127.0.0.1:%s"\n  database = "gpusampler"\n' "$influx_http" >>"$tmp/gpusampler.toml"
fi
if want nats; then
	printf '\n[[outputs.nats]]\n  servers = ["nats://127.0.0.1:%s"]\n' "$nats_port" >>"$tmp/gpusampler.toml"
fi
if want telegraf; then
	printf '\n[[outputs.telegraf]]\n  url = "http://127.0.0.1:%s"\n  database = "telegraf"\n' "$influx_http" >>"$tmp/gpusampler.toml"
fi
if want prometheus; then
	printf '\n[[outputs.prometheus]]\n  listen = "127.0.0.1:%s"\n' "$prom_port" >>"$tmp/gpusampler.toml"
fi
"$BIN" run --config "$tmp/gpusampler.toml" --log-level warn >"$tmp/run.out" 2>"$tmp/run.err" &
root=$!
pids=("$root" "${pids[@]}")
sleep "$WARMUP" # time for every output to start and reach its steady state

descendants() { # descendants PID: PID and every process below it
	echo "$1"
	local c
	for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do descendants "$c"; done
}
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
kib() { # kib FILE FIELD: the field's value in kB, 0 once the process is gone
	awk -v f="$2:" '$1 == f { print $2; found = 1 } END { if (!found) print 0 }' "$1" 2>/dev/null || echo 0
}
ticks() { # ticks PID: user+system CPU time in clock ticks, 0 once the process is gone
	awk '{ sub(/^.*\) /, ""); print $12 + $13 }' /proc/"$1"/stat 2>/dev/null || echo 0
}
declare -A cpu0
for p in $(descendants "$root"); do cpu0[$p]="$(ticks "$p")"; done
t0="$(date +%s.%N)"
max_rss=0 max_pss=0
for i in $(seq "$READINGS"); do
	kill -0 "$root" 2>/dev/null || {
		echo "tree-rss: gpusampler exited:" >&2
		cat "$tmp/run.err" >&2
		exit 1
	}
	if want prometheus; then http "http://127.0.0.1:$prom_port/metrics"; fi
	rss=0 pss=0 table=""
	secs="$(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { print t1 - t0 }')"
	for p in $(descendants "$root"); do
		r="$(kib /proc/"$p"/status VmRSS)"
		s="$(kib /proc/"$p"/smaps_rollup Pss)"
		c="$(awk -v a="${cpu0[$p]:-0}" -v b="$(ticks "$p")" -v hz="$(getconf CLK_TCK)" -v s="$secs" \
			'BEGIN { printf "%.1f", (s > 0) ? 100 * (b - a) / hz / s : 0 }')"
		rss=$((rss + r)) pss=$((pss + s))
		table+="$(printf '  pid %-8s %-40s RSS %6s MiB  PSS %6s MiB  CPU %5s%%' "$p" \
			"$(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-40)" \
			"$(mib "$r")" "$(mib "$s")" "$c")"$'\n'
	done
	[ "$rss" -gt "$max_rss" ] && max_rss=$rss
	[ "$pss" -gt "$max_pss" ] && max_pss=$pss
	[ "$i" -lt "$READINGS" ] && sleep "$INTERVAL"
done
# The outputs delivered: each database written to holds gpusampler's measurement.
dbs=""
if want influxdb; then dbs+=" gpusampler"; fi
if want telegraf; then dbs+=" telegraf"; fi
for db in $dbs; do
	python3 -c 'import sys, urllib.request as u, urllib.parse as q
r = u.urlopen("http://127.0.0.1:%s/query?%s" % (sys.argv[1], q.urlencode({"db": sys.argv[2], "q": "SHOW MEASUREMENTS"})), timeout=5).read().decode()
sys.exit(0 if "nvidia_smi" in r else "tree-rss: nothing reached influxdb database %s: %s" % (sys.argv[2], r))' "$influx_http" "$db"
done
echo "gpusampler run, $GPUS simulated GPUs, outputs $OUTPUTS ($BIN, $(stat -c %s "$BIN") bytes)"
printf '%s' "$table"
printf 'tree RSS %s MiB (max of %d readings %s MiB)\n' "$(mib "$rss")" "$READINGS" "$(mib "$max_rss")"
printf 'tree PSS %s MiB (max of %d readings %s MiB)\n' "$(mib "$pss")" "$READINGS" "$(mib "$max_pss")"
