#!/usr/bin/env bash
# Start-up times of the compiled tools (issue 16), wall clock from `date +%s%N`: one CLI call against
# a running server (bin/warrant.mjs verify-audit), one database CLI call (npm run tenant -- list and
# node dist/node/tenant-cli.js list), and a later `npm start` (an existing data directory) until its
# "listening" line. Each figure is the median of N runs (default 7); `node -e 0` is printed as the floor.
# On a shared, loaded machine wall time mostly measures the queue for a core, so the CPU time (user +
# system) of the CLI call and of the server process up to "listening" is printed too.
# With TSX=1 the same runs go through tsx from the sources, as before the build (for comparison).
# Usage: npm run build && bench/startup.sh [N]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${1:-7}
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$work"' EXIT
export WARRANT_DATA_DIR=$work/data WARRANT_KEYS_DIR=$work/keys PORT=18990 HOST=127.0.0.1
mkdir -m 700 "$WARRANT_DATA_DIR"

ms() { echo $((($2 - $1) / 1000000)); }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
if [ "${TSX:-0}" = 1 ]; then
  start=(node --import tsx src/node/main.ts)
  main=(node --import tsx src/node/main.ts)
  cli=(node --import tsx src/node/warrant-cli.ts)
  tenant=(node --import tsx src/node/tenant-cli.ts)
else
  start=(npm start --silent)
  main=(node dist/node/main.js)
  cli=(node bin/warrant.mjs)
  tenant=(node dist/node/tenant-cli.js)
fi

start_server() {
  "${start[@]}" >"$work/log" 2>&1 &
  server=$!
  until grep -q '"listening on' "$work/log" 2>/dev/null; do sleep 0.01; done
}
stop_server() {
  kill "$server"
  wait "$server" 2>/dev/null || true
  : >"$work/log"
}

start_server # the first start makes the database and keys
export WARRANT_URL=http://127.0.0.1:$PORT WARRANT_API_KEY
WARRANT_API_KEY=$(cat "$WARRANT_DATA_DIR/default-api-key")

floor=$(for _ in $(seq "$n"); do a=$(date +%s%N); node -e 0; b=$(date +%s%N); ms "$a" "$b"; done | median)
call=$(for _ in $(seq "$n"); do a=$(date +%s%N); "${cli[@]}" verify-audit >/dev/null; b=$(date +%s%N); ms "$a" "$b"; done | median)
stop_server
db=$(for _ in $(seq "$n"); do a=$(date +%s%N); "${tenant[@]}" list >/dev/null; b=$(date +%s%N); ms "$a" "$b"; done | median)
restart=$(for _ in $(seq "$n"); do a=$(date +%s%N); start_server; b=$(date +%s%N); stop_server; ms "$a" "$b"; done | median)

# CPU seconds of one process: bash's `time` for a call, /proc/PID/stat (utime + stime) for the server.
TIMEFORMAT='%3U %3S'
cpu_call=$(for _ in $(seq "$n"); do { time "${cli[@]}" --help >/dev/null; } 2>&1 | awk '{print int(($1 + $2) * 1000)}'; done | median)
tick=$(getconf CLK_TCK)
cpu_start=$(for _ in $(seq "$n"); do
  start=("${main[@]}")
  start_server
  awk -v t="$tick" '{print int(($14 + $15) * 1000 / t)}' "/proc/$server/stat"
  stop_server
done | median)

echo "CPU: warrant --help ${cpu_call} ms; server process until listening ${cpu_start} ms"
echo "node -e 0: ${floor} ms; warrant verify-audit: ${call} ms; tenant list: ${db} ms; later server start: ${restart} ms (medians of $n; load $(cut -d' ' -f1-3 /proc/loadavg))"
