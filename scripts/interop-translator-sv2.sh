#!/usr/bin/env bash
# Interop: the SV2 reference translator (translator_sv2, pinned), fed by stratumlab's SV1 devices
# (`stratumlab fleet`), mines through stratumlab's own SV2 pool (`stratumlab pool --sv2-listen`),
# which takes its templates from simnet's Template Provider: configuration C with the reference
# proxy in the middle. Two translators at once on the same pool:
#   - "agg": aggregate_channels = true, every SV1 device behind one extended channel (the
#     translator subdivides the channel's extranonce among its miners);
#   - "per": aggregate_channels = false, one extended channel per SV1 device, all on one
#     upstream connection.
# Passes when
#   - the pool opens extended channels for both translators (its log names each; its events
#     show jobs sent and shares judged on them) and every device is ready,
#   - the fleets' shares are accepted by the translators, and the pool accepts the shares the
#     translators forward (those meeting the channel's target),
#   - no share is rejected for any reason but stale, by the fleets' count and by the pool's
#     events (a share on a job a new tip superseded is a genuine race), and the pool's verdicts
#     are the ones the translators received (acknowledged shares, SubmitShares.Error count),
#   - at least one block a device found goes device -> translator -> pool -> simnet, which
#     takes it as its new tip (a tip_changed event with source "submitted").
#
# Everything listens on 127.0.0.1 only: the translator configs are written here (no LAN ranges,
# no monitoring server). Every process started here is stopped on exit; each wait is bounded.
# Exits non-zero on anything missing; never skips.
#
# Environment:
#   STRATUMLAB_TOOLS_DIR  where pinned third-party tools are installed
#                         [default: ${XDG_CACHE_HOME:-$HOME/.cache}/stratumlab-ci]
#   INTEROP_KEEP=1        keep the work directory (logs, configs, events) for inspection
#   FLEET_DURATION        how long the fleets mine [default: 30s]
# Needs: cargo; to install translator_sv2 the first time, Cap'n Proto (`capnp` and its standard
# schemas: Debian's capnproto and libcapnp-dev).
set -euo pipefail
cd "$(dirname "$0")/.."

PAYOUT=bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080
DURATION=${FLEET_DURATION:-30s}
DEVICES=10
# Per fleet; each device hashes a tenth of it.
BUDGET=500kH/s
DEVICE_RATE=50000.0

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

script=interop-translator-sv2
log_files=(simnet.out simnet.err pool.out pool.err agg.log per.log agg.err per.err agg.json per.json)
# shellcheck source=scripts/interop-common.sh
source scripts/interop-common.sh

# 1. The pinned reference translator, installed once per machine like pool_sv2.
install_pinned translator_sv2 "$TRANSLATOR_SV2_VERSION"
tproxy_bin=$pinned_bin

# 2. stratumlab (dev profile: CI has just built it for the tests; the fleet's hashing is
# optimized even there).
cargo build --quiet -p cli
stratumlab="$target_dir/debug/stratumlab"

# 3. simnet with its Template Provider; no blocks of the rest of the network, so every new tip
# is one the devices found (network difficulty 0.001: a block every ~4.3M hashes, a few seconds
# of the fleets' 1 MH/s); a fee-driven template every 2 s, so jobs on the current tip flow too.
timeout --signal=TERM 600 "$stratumlab" simnet --tdp-listen 127.0.0.1:0 --network-difficulty 0.001 \
    --block-interval 0 --template-interval 2s --events "$work/simnet.ev" \
    --authority-key-file "$work/authority.key" >"$work/simnet.out" 2>"$work/simnet.err" &
pids+=($!)
tdp_addr() { sed -n 's/^tdp listening on \([0-9.]*:[0-9]*\).*/\1/p' "$work/simnet.out" | head -n1; }
have_tdp() { [ -n "$(tdp_addr)" ]; }
wait_for 60 have_tdp || fail "simnet did not print 'tdp listening on ADDR'"
tdp=$(tdp_addr)
tdp_key=$(sed -n 's/^tdp authority public key \([1-9A-HJ-NP-Za-km-z]*\).*/\1/p' "$work/simnet.out" | head -n1)
[ -n "$tdp_key" ] || fail "simnet did not print its TDP authority public key"

# 4. Our SV2 pool on simnet's Template Provider.
timeout --signal=TERM 600 "$stratumlab" pool --sv2-listen 127.0.0.1:0 --tp "$tdp" \
    --tp-authority-key "$tdp_key" --authority-key-file "$work/authority.key" \
    --http-listen 127.0.0.1:0 --payout-address "$PAYOUT" \
    --store "$work/pool.sqlite" --events "$work/pool.ev" \
    >"$work/pool.out" 2>"$work/pool.err" &
pids+=($!)
pool_pid=$!
pool_line() { sed -n "s/^$1 \\([^ ]*\\).*/\\1/p" "$work/pool.out" | head -n1; }
pool_up() {
    kill -0 "$pool_pid" 2>/dev/null || fail "the pool exited early"
    [ -n "$(pool_line 'sv2 listening on')" ] && [ -n "$(pool_line 'sv2 authority public key')" ]
}
wait_for 60 pool_up || fail "the pool did not print 'sv2 listening on ADDR' and its authority key"
pool_addr=$(pool_line 'sv2 listening on')
pool_key=$(pool_line 'sv2 authority public key')
say "pool at $pool_addr (authority key $pool_key) on simnet's TDP $tdp"

# 5. Two minimal loopback translator configs, our pool upstream with its authority key. No
# monitoring_address (no HTTP server), no [miner_telemetry] (no LAN scan), no extensions.
# downstream_extranonce2_size: the aggregating translator widens its upstream request by 2 bytes
# (its per-miner index); 2 + 2 and 4 both fit the 4 bytes our pool lets an extended channel roll.
# (Their shipped examples aggregate with 4: 4 + 2 is refused with unsupported-min-extranonce-size,
# and the translator exits.)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
translator_config() {
    local name=$1 port=$2 aggregate=$3 en2=$4
    cat >"$work/$name.toml" <<EOF
downstream_address = "127.0.0.1"
downstream_port = $port
max_supported_version = 2
min_supported_version = 2
downstream_extranonce2_size = $en2
verify_payout = false
aggregate_channels = $aggregate
supported_extensions = []
required_extensions = []

[downstream_difficulty_config]
min_individual_miner_hashrate = $DEVICE_RATE
shares_per_minute = 30.0
enable_vardiff = true
job_keepalive_interval_secs = 60

[[upstreams]]
address = "${pool_addr%:*}"
port = ${pool_addr##*:}
authority_pubkey = "$pool_key"
user_identity = "stratumlab-$name"
EOF
}
# TPROXY__* variables would override the files: clear them.
for v in $(compgen -e | grep '^TPROXY__' || true); do unset "$v"; done
declare -A tproxy_port tproxy_pid
for spec in agg:true:2 per:false:4; do
    IFS=: read -r name aggregate en2 <<<"$spec"
    tproxy_port[$name]=$(free_port)
    translator_config "$name" "${tproxy_port[$name]}" "$aggregate" "$en2"
    NO_COLOR=1 RUST_LOG=info timeout --signal=TERM 600 "$tproxy_bin" -c "$work/$name.toml" \
        >"$work/$name.log" 2>&1 &
    pids+=($!)
    tproxy_pid[$name]=$!
done
tproxy_up() {
    local name=$1
    kill -0 "${tproxy_pid[$name]}" 2>/dev/null || fail "translator $name exited early"
    grep -q "Translator Proxy: listening on 127.0.0.1:${tproxy_port[$name]}" "$work/$name.log"
}
for name in agg per; do
    wait_for 60 tproxy_up "$name" || fail "translator $name did not listen on 127.0.0.1:${tproxy_port[$name]}"
done
say "translators listening: agg on 127.0.0.1:${tproxy_port[agg]}, per on 127.0.0.1:${tproxy_port[per]}"

# 6. One SV1 fleet per translator (S19-class devices: version rolling through mining.configure).
fleet() {
    local name=$1 first=$2
    "$stratumlab" fleet --pool "127.0.0.1:${tproxy_port[$name]}" --profile asic \
        --devices "$DEVICES" --first-device-id "$first" --hash-budget "$BUDGET" \
        --duration "$DURATION" --drain 5s --json --events "$work/$name.ev" \
        >"$work/$name.json" 2>"$work/$name.err"
}
say "mining for $DURATION"
fleet agg 0 &
agg_fleet=$!
fleet per 100 &
per_fleet=$!
wait "$agg_fleet" || fail "the agg fleet failed: $(tail -n 3 "$work/agg.err")"
wait "$per_fleet" || fail "the per fleet failed: $(tail -n 3 "$work/per.err")"

# 7. The fleets' own counts: every device ready, shares accepted, nothing rejected but stale.
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$work/$1.json"; }
blocks_total=0
for name in agg per; do
    [ "$(field "$name" 'd["ready"]')" -eq "$DEVICES" ] || fail "$name: not every device was ready: $(cat "$work/$name.json")"
    [ "$(field "$name" 'd["protocol_errors"]')" -eq 0 ] || fail "$name: protocol errors (run with RUST_LOG=debug): $(cat "$work/$name.json")"
    [ "$(field "$name" 'd["shares"]["accepted"]')" -gt 0 ] || fail "$name: no share accepted"
    other=$(field "$name" 'sum(v for k, v in d["shares"]["rejected_by_reason"].items() if k != "stale")')
    [ "$other" -eq 0 ] || fail "$name: shares rejected for reasons other than stale: $(field "$name" 'd["shares"]')"
    say "$name fleet: $(field "$name" 'd["shares"]') blocks $(field "$name" 'd["blocks_found"]')"
    blocks_total=$(( blocks_total + $(field "$name" 'd["blocks_found"]') ))
done

# 8. The pool's log (flushed on SIGTERM): one extended channel for the aggregating translator,
# one per device for the other. The roles get a moment first: translator_sv2 answers its devices
# itself, so a share it forwarded last may still have its SubmitShares.Success on the way, and
# the pool records a share accepted before that goes out.
sleep 2
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
opened() { grep -c "sv2: extended channel opened.*user=stratumlab-$1" "$work/pool.err" || true; }
[ "$(opened agg)" -eq 1 ] || fail "agg: the pool opened $(opened agg) extended channels, want 1"
[ "$(opened per)" -eq "$DEVICES" ] || fail "per: the pool opened $(opened per) extended channels, want $DEVICES"

# 9. Events and the translators' logs: the pool sent jobs and judged shares on the channels,
# rejected none but stale ones, and accepted exactly the shares the translators saw
# acknowledged; blocks go device (share_sent hash) -> pool (block_submitted) -> simnet
# (tip_changed, source submitted).
for ev in pool simnet agg per; do
    "$stratumlab" events dump "$work/$ev.ev" >"$work/$ev.jsonl" || fail "$ev: events do not read"
done
sed 's/\x1b\[[0-9;]*m//g' "$work/agg.log" "$work/per.log" >"$work/translators.log"
summary=$(python3 - "$work" <<'EOF'
import collections, json, re, sys
work = sys.argv[1]
def events(name):
    with open(f"{work}/{name}.jsonl") as f:
        return [json.loads(line) for line in f]
jobs = accepted = 0
rejected = collections.Counter()
submitted = set()
for e in events("pool"):
    if e["kind"] == "job_sent" and e.get("channel") is not None:
        jobs += 1
    elif e["kind"] == "share_result" and e.get("channel") is not None:
        v = e["verdict"]
        if v == "accepted":
            accepted += 1
        else:
            rejected[v["rejected"] if isinstance(v, dict) else str(v)] += 1
    elif e["kind"] == "block_submitted":
        submitted.add(e["hash"])
tips = {e["hash"] for e in events("simnet")
        if e["kind"] == "tip_changed" and e.get("source") == "submitted"}
found = {e["hash"] for name in ("agg", "per") for e in events(name)
         if e["kind"] == "share_sent" and e.get("hash")}
acked = errors = 0
with open(f"{work}/translators.log") as f:
    for line in f:
        m = re.search(r"Received: SubmitSharesSuccess\(.*new_submits_accepted_count=(\d+)", line)
        acked += int(m.group(1)) if m else 0
        errors += "Received: SubmitSharesError" in line
bad = sum(n for r, n in rejected.items() if r != "stale")
print(jobs, accepted, sum(rejected.values()), bad, acked, errors, len(submitted),
      len(submitted & tips), len(found & submitted & tips), dict(rejected) or "none")
EOF
) || fail "the events do not parse"
read -r jobs accepted rejected bad acked errors submitted taken chained rejections <<<"$summary"
say "pool: $jobs jobs sent on channels, $accepted shares accepted, rejected: $rejections;" \
    "translators: $acked acknowledged, $errors errors; $submitted blocks submitted, $taken new" \
    "tips on simnet, $chained traced back to a device's share"
[ "$jobs" -ge 1 ] || fail "the pool sent no job on an SV2 channel"
[ "$accepted" -ge 1 ] || fail "the pool accepted no share from the translators"
[ "$bad" -eq 0 ] || fail "the pool rejected shares for reasons other than stale: $rejections"
[ "$acked" -eq "$accepted" ] || fail "the translators saw $acked shares acknowledged, the pool accepted $accepted"
[ "$errors" -eq "$rejected" ] || fail "the translators saw $errors share errors, the pool rejected $rejected"
[ "$blocks_total" -ge 1 ] || fail "no device found a block"
[ "$submitted" -ge 1 ] || fail "the pool submitted no block"
[ "$chained" -ge 1 ] || fail "no block went device -> translator -> pool -> simnet tip"

say "PASS: 2 x $DEVICES SV1 devices through translator_sv2 $TRANSLATOR_SV2_VERSION (aggregated and" \
    "per-device extended channels) into stratumlab's SV2 pool: $accepted shares accepted by the" \
    "pool, $blocks_total blocks found by devices, $chained of them new tips on simnet"
