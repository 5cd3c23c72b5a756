#!/bin/sh
# test-deps: install the Debian packages whose programs the tests start
# themselves (`make test`, `make test-nocgo` and .ci/run call it first).
# Idempotent, and silent when everything is there. Run as root where a
# package is missing: it installs them with apt-get. Otherwise it stops at
# once (exit 1) with the one command to run.
#
# What needs what:
#   gcc             cgo (the NVML backend, the race detector)
#   promtool        Debian's prometheus: checks the alert rules and scrapes
#   influxd         Debian's influxdb (1.6.7): the InfluxDB output's peer
#   nats-server     Debian's nats-server: a real NATS server process (natstest)
#   rsvg-convert    librsvg2-bin: renders bench's SVG report for its pixel test
#   systemd-analyze systemd: verifies deploy/systemd/gpusampler.service
#   python3 with grpc, google.protobuf, cryptography: the Python example plugin
set -eu

PYTHON=${TEST_DEPS_PYTHON:-/usr/bin/python3}

check() { # sets need (Debian packages) and missing (what the tests lack)
	need=""
	missing=""
	want gcc gcc
	want promtool prometheus
	want influxd influxdb
	want nats-server nats-server
	want rsvg-convert librsvg2-bin
	want systemd-analyze systemd
	if ! "$PYTHON" -c 'import grpc, google.protobuf, cryptography' >/dev/null 2>&1; then
		missing="$missing python3-modules(grpc,protobuf,cryptography)"
		need="$need python3 python3-grpcio python3-protobuf python3-cryptography"
	fi
	need=${need# }
}
want() { # want PROGRAM PACKAGE...: PACKAGE... unless PROGRAM is on PATH
	if ! command -v "$1" >/dev/null 2>&1; then
		missing="$missing $1"
		shift
		need="$need $*"
	fi
}

check
[ -z "$need" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
	echo "test-deps: the tests need:$missing; this machine has no apt-get: install the equivalents of Debian's $need yourself" >&2
	exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "test-deps: the tests need:$missing; run: sudo $0" >&2
	exit 1
fi
echo "test-deps: installing $need" >&2
apt-get update -q
# shellcheck disable=SC2086 # one word per package
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need
check
if [ -n "$need" ]; then
	echo "test-deps: still missing after apt-get install:$missing" >&2
	exit 1
fi
