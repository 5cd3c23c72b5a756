#!/bin/sh
# Checks the shipped unit with `systemd-analyze verify` before gpusampler is
# installed. verify also checks that ExecStart's program exists, so the unit
# is checked as a copy (same name, in a temporary directory) whose ExecStart
# names BINARY (default: bin/gpusampler, what `make build` writes) instead of
# /usr/local/bin/gpusampler. Once installed, check the unit itself:
# systemd-analyze verify /etc/systemd/system/gpusampler.service
#
#   deploy/systemd/verify.sh [BINARY]
set -eu
here=$(dirname "$0")
bin=${1:-bin/gpusampler}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
if [ ! -x "$bin" ]; then
	echo "verify.sh: $bin is not an executable file (run make build, or name the binary)" >&2
	exit 1
fi
command -v systemd-analyze >/dev/null || {
	echo "verify.sh: systemd-analyze not found (Debian: apt-get install systemd)" >&2
	exit 1
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s|/usr/local/bin/gpusampler|$bin|g" "$here/gpusampler.service" >"$dir/gpusampler.service"
# verify exits non-zero on some problems but only warns about others (an
# unknown value is "ignoring"): any line about the unit is a failure.
status=0
out=$(systemd-analyze verify "$dir/gpusampler.service" 2>&1) || status=$?
[ -z "$out" ] || printf '%s\n' "$out" >&2
if [ "$status" -ne 0 ] || printf '%s\n' "$out" | grep -q 'gpusampler\.service'; then
	echo "verify.sh: gpusampler.service does not verify" >&2
	exit 1
fi
echo "verify.sh: gpusampler.service verifies (ExecStart=$bin)"
