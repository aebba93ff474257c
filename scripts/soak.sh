#!/usr/bin/env bash
# The soak: one pool (SV1 and SV2 ports, templates from simnet's RPC) serving honest SV1 and SV2
# fleets while the hostile suite's attacks run against both ports in a loop, for a given time.
# Every minute it records the pool's resident memory, open file descriptors, connections and
# the submit-to-verdict p99 of a small probe fleet (4 SV1 devices for 20 s), and at the end it
# prints the table and whether RSS and fds stayed flat after the warm-up (within 5% of their
# value at the end of the warm-up) and the p99 steady.
#
#   bash scripts/soak.sh                   # 10,000 devices (5,000 SV1 + 5,000 SV2), 30 minutes
#   SOAK_DEVICES=2000 SOAK_MINUTES=5 bash scripts/soak.sh
#
# Environment:
#   SOAK_DEVICES   honest devices, half SV1 and half SV2 [default: 10000]
#   SOAK_MINUTES   how long [default: 30]; the first 5 minutes (or a sixth of a shorter run)
#                  are the warm-up
#   SOAK_KEEP=1    keep the work directory (logs, samples.csv)
#   SOAK_POOL_WRAP a command the pool runs under, to attribute its memory, e.g.
#                  SOAK_POOL_WRAP="heaptrack -o $(mktemp -d)/pool" (heaptrack_print --print-massif then
#                  shows what held the heap over time)
#
# The pool runs with the hostile suite's small limits (crates/cli/tests/hostile.rs): 40
# connections per address, so the honest devices are spread over enough loopback addresses
# (127.0.x.y) to stay under it, and the attackers come from 127.20.0.0 and up. Everything
# listens on 127.0.0.1; every process started here is stopped on exit; every wait is bounded.
# Not run by CI (it takes half an hour); its figures go into docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."

devices=${SOAK_DEVICES:-10000}
minutes=${SOAK_MINUTES:-30}
warmup=$(( minutes >= 30 ? 5 : (minutes + 5) / 6 ))
half=$(( devices / 2 ))
# 40 per address at most: both fleets share the addresses (17 each), and the probe fleet adds 4
# on 127.0.0.1.
addrs=$(( (half + 16) / 17 ))

work=$(mktemp -d "${TMPDIR:-/tmp}/stratumlab-soak.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 1
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    if [ "${SOAK_KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
say() { printf '[soak %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

say "building (release): the binary and the hostile suite"
cargo build --release --quiet
hostile=$(cargo test --release -p cli --test hostile --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\)).*/\1/p' | tail -1)
[ -x "$hostile" ] || { echo "no hostile test binary" >&2; exit 1; }
bin=target/release/stratumlab
ulimit -n "$(ulimit -Hn)" || true

# Waits for a line starting with $2 in file $1 (bounded) and prints the rest of it.
line_of() {
    for _ in $(seq 300); do
        if l=$(grep -m1 "^$2" "$1" 2>/dev/null); then echo "${l#"$2" }"; return; fi
        sleep 0.1
    done
    echo "no '$2' in $1" >&2; exit 1
}

say "simnet and the pool"
"$bin" simnet --rpc-listen 127.0.0.1:0 --rpc-user u --rpc-password p --block-interval 10m \
    --network-difficulty 100000 >"$work/simnet.out" 2>"$work/simnet.log" &
pids+=($!)
rpc=$(line_of "$work/simnet.out" "rpc listening on")
# shellcheck disable=SC2086 # the wrapper is a command line
${SOAK_POOL_WRAP:-} "$bin" pool --sv1-listen 127.0.0.1:0 --sv2-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --node-rpc "http://$rpc" --rpc-user u --rpc-password p \
    --payout-address bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080 \
    --store "$work/pool.sqlite" --authority-key-file "$work/authority.key" \
    --start-difficulty 0.0001 --min-difficulty 0.00001 --shares-per-minute 6 \
    --max-connections $(( devices + 2000 )) --max-connections-per-ip 40 \
    --connect-rate 20 --connect-burst 40 --message-rate 200 --message-burst 100 \
    --handshake-timeout 2s --write-timeout 2s --invalid-share-ban-after 20 --ban-duration 10m \
    --max-line 1024 --duration "$(( minutes + 5 ))m" >"$work/pool.out" 2>"$work/pool.log" &
pool=$!
pids+=($pool)
sv1=$(line_of "$work/pool.out" "sv1 listening on")
sv2=$(line_of "$work/pool.out" "sv2 listening on")
http=$(line_of "$work/pool.out" "http listening on")
key=$(line_of "$work/pool.out" "sv2 authority public key")
if [ -n "${SOAK_POOL_WRAP:-}" ]; then
    # The wrapper started the pool as its child: measure that process (the newest of ours).
    pool=$(pgrep -n -f "stratumlab pool --sv1-listen") || { echo "no pool process under the wrapper" >&2; exit 1; }
    pids+=($pool)
fi

say "honest fleets: $half SV1 and $half SV2 devices over $addrs addresses each"
"$bin" fleet --pool "$sv1" --devices "$half" --source-addrs "$addrs" --hash-budget 2MH/s \
    --connect-rate 500/s --duration "$(( minutes + 1 ))m" --json >"$work/fleet-sv1.json" 2>"$work/fleet-sv1.log" &
pids+=($!)
"$bin" fleet --pool "$sv2" --protocol sv2 --authority-key "$key" --devices "$half" \
    --source-addrs "$addrs" --hash-budget 2MH/s --connect-rate 500/s \
    --duration "$(( minutes + 1 ))m" --json >"$work/fleet-sv2.json" 2>"$work/fleet-sv2.log" &
pids+=($!)

say "the hostile mix against both ports"
SOAK_SV1=$sv1 SOAK_SV2=$sv2 SOAK_HTTP=$http SOAK_KEY=$key SOAK_PID=$pool \
    SOAK_SECONDS=$(( minutes * 60 )) \
    "$hostile" --ignored --exact soak_hostile_mix --nocapture >"$work/hostile.log" 2>&1 &
hostile_pid=$!
pids+=($hostile_pid)

echo "minute,rss_mib,fds,connections,probe_p99_ms,probe_unanswered" >"$work/samples.csv"
for m in $(seq 1 "$minutes"); do
    start=$(date +%s)
    probe=$("$bin" fleet --pool "$sv1" --devices 4 --hash-budget 100kH/s --suggest-difficulty 0.00001 \
        --duration 20s --json 2>/dev/null || echo '{}')
    rss=$(awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$pool/status")
    fds=$(ls "/proc/$pool/fd" | wc -l)
    conns=$(curl -s "http://$http/api/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"])')
    p99=$(echo "$probe" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("share_latency_ms",{}).get("p99"))')
    lost=$(echo "$probe" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("shares",{}).get("unanswered"))')
    echo "$m,$rss,$fds,$conns,$p99,$lost" >>"$work/samples.csv"
    say "minute $m: RSS $rss MiB, $fds fds, $conns connections, probe p99 $p99 ms, $lost unanswered"
    sleep $(( 60 - ($(date +%s) - start) > 0 ? 60 - ($(date +%s) - start) : 0 ))
done

wait "$hostile_pid" && mix=passed || mix="FAILED (see $work/hostile.log)"
say "hostile mix: $(grep -c '^round' "$work/hostile.log") attacks, $mix"
python3 - "$work/samples.csv" "$warmup" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
warm = int(sys.argv[2])
after = [r for r in rows if int(r["minute"]) >= warm]
if not after:
    sys.exit("too short for a verdict")
def spread(key):
    v = [float(r[key]) for r in after]
    return (max(v) - v[0]) / v[0] * 100 if v[0] else 0.0
p99 = [float(r["probe_p99_ms"]) for r in after if r["probe_p99_ms"] not in ("None", "")]
print(f"after the {warm}-minute warm-up: RSS {spread('rss_mib'):+.1f}%, fds {spread('fds'):+.1f}% "
      f"(bound: 5%); probe p99 {min(p99):.1f}..{max(p99):.1f} ms")
ok = spread("rss_mib") <= 5 and spread("fds") <= 5
print("flat" if ok else "NOT flat")
# Where the memory settles: the first minute from which RSS stays within 5% of its value then
# to the end (state the attacks leave, bans and departed workers, lasts ten minutes).
rss = [float(r["rss_mib"]) for r in rows]
for i, v in enumerate(rss):
    if max(rss[i:]) <= v * 1.05:
        print(f"RSS within 5% from minute {rows[i]['minute']} on: {v:.1f}..{max(rss[i:]):.1f} MiB")
        break
sys.exit(0 if ok else 1)
PY
