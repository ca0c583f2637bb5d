#!/usr/bin/env bash
# `sudo make demo`: build the default fabric, show forwarding, ECMP, a failure and trimming, tear down.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${TESTBED_VENV:-$HERE/.venv}/bin/python"
TB=("$PY" -m testbed.cli)
NAME=demo
OUT="$HERE/results/demo-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
cleanup() { "${TB[@]}" down --name "$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT INT TERM

step() { printf '\n=== %s\n' "$*"; }
step "testbed up: 3 spines x 3 leaves x 2 hosts, 100 Mbps links, 64 kB queues, trimming on"
"${TB[@]}" up --name "$NAME" --spines 3 --leaves 3 --hosts-per-leaf 2 --link-mbps 100
step "ping and traceroute h1 -> h6 (leaf1, a spine, leaf3)"
"${TB[@]}" exec --name "$NAME" h1 -- ping -c 2 10.1.3.2
"${TB[@]}" exec --name "$NAME" h1 -- traceroute -n -q 2 -w 1 10.1.3.2
step "iperf3 TCP h1 -> h3 through three software switches"
"${TB[@]}" exec --name "$NAME" h3 -- iperf3 -s -1 -D -p 5201
"${TB[@]}" exec --name "$NAME" h3 -- sh -c 'for i in $(seq 100); do ss -ltn | grep -q :5201 && exit 0; sleep 0.02; done; exit 1'
"${TB[@]}" exec --name "$NAME" h1 -- iperf3 -c 10.1.2.1 -p 5201 -t 3 | tee "$OUT/iperf3.txt" | tail -4
step "incast of trimmable UDP into h6: trimmed headers instead of drops"
for h in h1 h3 h5; do
  "${TB[@]}" exec --name "$NAME" "$h" -- "$PY" -m testbed.harness.udp_probe send --dst 10.1.3.2 --dport 9100 --count 300 --dscp 10 >/dev/null &
done
wait
"${TB[@]}" counters --name "$NAME" | tee "$OUT/counters.txt"
step "link-down spine1 leaf3: leaf3 repairs locally, spine1 black-holes towards leaf3"
"${TB[@]}" ctl --name "$NAME" link-down spine1 leaf3
"${TB[@]}" counters --name "$NAME" spine1 | head -3
"${TB[@]}" ctl --name "$NAME" link-up spine1 leaf3
step "testbed down"
cleanup
trap - EXIT
step "testbed compare allreduce-under-failure: MRC vs single-path vs spraying without failover"
# A ring all-reduce at 10 Gbps with 1 µs links, time-dilated so that two cores keep up (auto:
# the first run on a machine calibrates it once); a spine-leaf link silently black-holes for
# 2 ms in the middle. Three fabrics one after another (about a minute); the table, report.md
# (with each run's validity verdict) and the plots land in $OUT/compare. A failed expectation
# is reported, not fatal for the demo.
"${TB[@]}" compare allreduce-under-failure --transports mrc,single-path,spray-no-failover \
  --out "$OUT/compare" || echo "(some expectations were not met: see $OUT/compare/report.md)"
echo
echo "results: $OUT (iperf3.txt, counters.txt, compare/: report.md, report.html, summary.json, *.png)"
