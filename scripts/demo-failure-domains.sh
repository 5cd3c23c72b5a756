#!/usr/bin/env bash
# demo-failure-domains: issue 26's failure-domain demos, run as a user
# would (`gpusampler run --backend sim`, 2 simulated GPUs), each printing
# the figures that show an output's trouble stays its own.
#
#   scripts/demo-failure-domains.sh blackhole   # InfluxDB that never answers beside Prometheus
#   scripts/demo-failure-domains.sh wedged      # a plugin that ignores its context beside a healthy one
#   scripts/demo-failure-domains.sh jetstream   # nats-server (JetStream) killed for DOWN seconds
#   BIN=/tmp/other/gpusampler SECONDS_RUN=60 scripts/demo-failure-domains.sh blackhole
#
# blackhole: a TCP listener that accepts and never reads or answers is the
# influxdb output's sink; a prometheus output runs beside it in the same
# child process; /metrics is scraped once a second for SECONDS_RUN
# (default 60) seconds. Printed: scrapes answered (curl exit 0 within 5 s),
# stderr lines that say an output restarted, and the final stats.
# wedged: a test plugin whose first Write blocks forever (ignoring its
# context) beside a healthy test plugin that records every batch, and
# prometheus; 30 s. Printed: the final stats and the samples the healthy
# plugin's record file holds.
# jetstream: the nats output with jetstream, create_stream and a memory
# buffer, DOWN + 30 s; nats-server SIGKILLed at 10 s and restarted on the same port
# and store DOWN (default 15) seconds later. Printed: the final stats (the
# nats output's acked) and the messages the stream holds (/jsz).
# Ports are free loopback ports; everything lives in a temp dir. Needs
# python3, curl, and nats-server for jetstream; wedged builds the test plugin
# (go build ./plugins/internal/testplugin).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-bin/gpusampler}"
SECONDS_RUN="${SECONDS_RUN:-60}"
DOWN="${DOWN:-15}"
case "${1:-}" in
blackhole | wedged | jetstream) demo="$1" ;;
*)
	echo "usage: $0 blackhole|wedged|jetstream" >&2
	exit 2
	;;
esac
[ -x "$BIN" ] || {
	echo "demo-failure-domains: $BIN not built (make build)" >&2
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
finalstats() { sed -n '/^gpusampler final stats:/,$p' "$tmp/err"; }
scrape() { curl -sf -m 5 "http://127.0.0.1:$1/metrics" -o /dev/null; }
waitscrape() {
	for _ in $(seq 600); do
		if scrape "$1"; then return 0; fi
		sleep 0.1
	done
	echo "demo-failure-domains: /metrics never answered" >&2
	exit 1
}

case "$demo" in
blackhole)
	python3 - "$tmp/bh.port" <<'PY' &
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(128)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
conns = []
while True:
    c, _ = s.accept(); conns.append(c)  # accept, never read or answer
PY
	pids+=($!)
	while [ ! -s "$tmp/bh.port" ]; do sleep 0.1; done
	prom="$(freeport)"
	printf '[agent]\n  stats_interval = "10s"\n[[outputs.influxdb]]\n  url = "http://127.0.0.1:%s"\n  database = "telegraf"\n[[outputs.prometheus]]\n  listen = "127.0.0.1:%s"\n' \
		"$(cat "$tmp/bh.port")" "$prom" >"$tmp/c.toml"
	"$BIN" run --stats --backend sim --config "$tmp/c.toml" >/dev/null 2>"$tmp/err" &
	run=$!
	pids+=("$run")
	waitscrape "$prom"
	ok=0
	for _ in $(seq "$SECONDS_RUN"); do
		if scrape "$prom"; then ok=$((ok + 1)); fi
		sleep 1
	done
	kill -TERM "$run"
	rc=0
	wait "$run" || rc=$?
	echo "scrapes answered: $ok of $SECONDS_RUN"
	echo "restart lines: $(grep -c 'restarting' "$tmp/err" || true) (prometheus: $(grep 'restarting' "$tmp/err" | grep -c 'output=prometheus' || true))"
	echo "exit status: $rc"
	finalstats
	;;
wedged)
	go build -o "$tmp/testplugin" ./plugins/internal/testplugin
	prom="$(freeport)"
	cat >"$tmp/c.toml" <<EOF
[agent]
  stats_interval = "5s"
[[outputs.plugin]]
  name = "wedged"
  path = "$tmp/testplugin"
  allow_unverified = true
  [outputs.plugin.config]
    block_once = "$tmp/blocked"
[[outputs.plugin]]
  name = "healthy"
  path = "$tmp/testplugin"
  allow_unverified = true
  [outputs.plugin.config]
    record = "$tmp/healthy.jsonl"
[[outputs.prometheus]]
  listen = "127.0.0.1:$prom"
EOF
	"$BIN" run --stats --backend sim --config "$tmp/c.toml" >/dev/null 2>"$tmp/err" &
	run=$!
	pids+=("$run")
	waitscrape "$prom"
	ok=0
	for _ in $(seq 30); do
		if scrape "$prom"; then ok=$((ok + 1)); fi
		sleep 1
	done
	kill -TERM "$run"
	rc=0
	wait "$run" || rc=$?
	echo "scrapes answered: $ok of 30; exit status: $rc"
	grep -E 'plugin wedged|restarting' "$tmp/err" | grep -v '^ ' | head -3 || true
	finalstats
	python3 - "$tmp/healthy.jsonl" <<'PY'
import json, sys
n = b = 0
for line in open(sys.argv[1]):
    n += json.loads(line)["samples"]; b += 1
print(f"healthy plugin's record file holds {n} samples in {b} batches")
PY
	;;
jetstream)
	command -v nats-server >/dev/null || {
		echo "demo-failure-domains: nats-server not found (Debian package nats-server)" >&2
		exit 1
	}
	np="$(freeport)" mp="$(freeport)"
	startnats() {
		nats-server -a 127.0.0.1 -p "$np" -m "$mp" -js -sd "$tmp/js" >>"$tmp/nats.log" 2>&1 &
		nats=$!
		pids+=("$nats")
		for _ in $(seq 100); do
			if curl -sf "http://127.0.0.1:$mp/healthz" >/dev/null; then return 0; fi
			sleep 0.1
		done
	}
	startnats
	printf '[agent]\n  stats_interval = "5s"\n[[outputs.nats]]\n  servers = ["nats://127.0.0.1:%s"]\n  jetstream = true\n  create_stream = true\n  buffer = "memory"\n' "$np" >"$tmp/c.toml"
	"$BIN" run --stats --backend sim --config "$tmp/c.toml" --duration "$((DOWN + 30))s" >/dev/null 2>"$tmp/err" &
	run=$!
	pids+=("$run")
	sleep 10
	kill -KILL "$nats"
	wait "$nats" 2>/dev/null || true
	echo "nats-server killed at 10 s, restarted $DOWN s later"
	sleep "$DOWN"
	startnats
	rc=0
	wait "$run" || rc=$?
	echo "exit status: $rc"
	grep -E 'plugin wedged|restarting' "$tmp/err" | grep -v '^ ' | head -3 || true
	finalstats
	curl -s "http://127.0.0.1:$mp/jsz?streams=true" | python3 -c 'import json, sys
for a in json.load(sys.stdin).get("account_details", []):
    for s in a.get("stream_detail", []):
        print("stream %s holds %d messages" % (s["name"], s["state"]["messages"]))'
	;;
esac
