#!/usr/bin/env bash
# Issue 12 item 6 (approve throughput against an earlier commit): alternated `bench:http` pairs, the
# other checkout first, then this one, each on a PostgreSQL database of its own (made here for the
# other checkout, whose bench may predate private databases; this checkout's bench makes its own).
# The machine's speed drifts between runs by more than item 6's 5 % (bench/RESULTS.md), so only
# pairs run minutes apart are compared, and each side is also divided by its own bare endpoint's
# rate in the same run, which takes out most of that drift.
#
# Usage: DATABASE_URL=postgres://postgres@127.0.0.1:5432/test bench/pairs.sh OTHER_DIR [PAIRS]
#   OTHER_DIR: a checkout with its own node_modules, e.g.
#   git worktree add --detach ../wt-b be653ee && (cd ../wt-b && npm ci --ignore-scripts)
# Prints one line per pair and the means; BENCH_ROUNDS (default 2) and BENCH_SECONDS (default 10)
# are passed on. Run it on a quiet machine: nothing else should load the cores meanwhile.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
other=$(cd "${1:?usage: bench/pairs.sh OTHER_DIR [PAIRS]}" && pwd)
pairs=${2:-5}
url=${DATABASE_URL:?DATABASE_URL must name a PostgreSQL database (its server is where the bench databases are made)}
export BENCH_ROUNDS=${BENCH_ROUNDS:-2} BENCH_SECONDS=${BENCH_SECONDS:-10}
admin=${url%/*}/postgres
log=$(mktemp)
db=
trap 'rm -f "$log"; [ -z "$db" ] || psql -q "$admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true' EXIT

# The mean approve and bare req/s of one bench:http output, "approve bare".
rates() { awk '/^  approve .*req\/s/ { a += $2; n++ } /^  bare .*req\/s/ { b += $2; m++ } END { printf "%.0f %.0f\n", a / n, b / m }' "$1"; }

printf '%-9s %-8s %9s %9s %7s %12s\n' pair time other this ratio against-bare
sum=0 sumbare=0
for ((i = 1; i <= pairs; i++)); do
  t=$(date -u +%H:%M)
  db=warrant_pairs_$$_$i
  psql -q "$admin" -c "CREATE DATABASE $db"
  (cd "$other" && DATABASE_URL=${url%/*}/$db npx tsx bench/http.ts >"$log" 2>&1)
  psql -q "$admin" -c "DROP DATABASE $db WITH (FORCE)"
  db=
  read -r oa ob < <(rates "$log")
  (cd "$here" && DATABASE_URL=$url npx tsx bench/http.ts >"$log" 2>&1)
  read -r ta tb < <(rates "$log")
  ratio=$(awk -v a="$ta" -v b="$oa" 'BEGIN { printf "%.2f", a / b }')
  bare=$(awk -v ta="$ta" -v tb="$tb" -v oa="$oa" -v ob="$ob" 'BEGIN { printf "%.2f", (ta / tb) / (oa / ob) }')
  printf '%-9s %-8s %9s %9s %7s %12s\n' "$i" "$t" "$oa" "$ta" "$ratio" "$bare"
  sum=$(awk -v s="$sum" -v r="$ratio" 'BEGIN { print s + r }')
  sumbare=$(awk -v s="$sumbare" -v r="$bare" 'BEGIN { print s + r }')
done
awk -v s="$sum" -v b="$sumbare" -v n="$pairs" 'BEGIN { printf "mean      %-8s %9s %9s %7.2f %12.2f\n", "", "", "", s / n, b / n }'
