#!/usr/bin/env bash
# Interop: stratumlab's SV2 devices (`stratumlab fleet --protocol sv2`) mine through the SV2
# reference pool (pool_sv2, pinned), which takes its templates from simnet's Template Provider.
# Two fleets at once: S19-class devices (version rolling required and done) and CPU miners (no
# rolling). Passes when
#   - every device completes the Noise handshake (checking the pool's authority key),
#     SetupConnection and OpenStandardMiningChannel, and receives future jobs and their
#     SetNewPrevHash,
#   - shares are accepted, acknowledged in batches of 3 (the fleet maps each batch back to its
#     shares), and the fleet's accepted count agrees with what the pool validated,
#   - no share is rejected for any reason but stale (a share on a job a new tip superseded is a
#     genuine race), as the lab counts the fleets' events (`stratumlab events shares`: pool_sv2
#     answers some such shares invalid-job-id, which the lab counts stale), and the pool's log
#     holds no other error than those,
#   - at least one block a device found is accepted by simnet as its new tip (network difficulty
#     0.0005: a block every ~2M hashes, a few seconds of the fleets' budget),
#   - the fleets' events hold future jobs, their activations, and a verdict for every share the
#     counters call answered.
#
# Everything listens on 127.0.0.1 only. Every process started here is stopped on exit; each wait
# is bounded. Exits non-zero on anything missing; never skips.
#
# Environment:
#   STRATUMLAB_TOOLS_DIR  where pinned third-party tools are installed
#                         [default: ${XDG_CACHE_HOME:-$HOME/.cache}/stratumlab-ci]
#   INTEROP_KEEP=1        keep the work directory (logs, config, events) for inspection
#   FLEET_DURATION        how long the fleets mine [default: 30s]
# Needs: cargo; to install pool_sv2 the first time, Cap'n Proto (`capnp` and its standard
# schemas: Debian's capnproto and libcapnp-dev).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${FLEET_DURATION:-30s}
BATCH=3

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

script=interop-fleet-sv2
log_files=(simnet.out simnet.err pool.log asic.err cpu.err asic.json cpu.json)
# shellcheck source=scripts/interop-common.sh
source scripts/interop-common.sh

# 1. The pinned reference pool (scripts/interop-pool-sv2.sh installs it the same way).
install_pinned pool_sv2 "$POOL_SV2_VERSION"
pool_bin=$pinned_bin

# 2. stratumlab (dev profile: CI has just built it for the tests; the fleet's hashing is
# optimized even there).
cargo build --quiet -p cli
stratumlab="$target_dir/debug/stratumlab"

# 3. simnet with its Template Provider; no blocks of the rest of the network, so every new tip
# is one the devices found; a fee-driven template every 2 s, so jobs on the current tip flow too.
"$stratumlab" simnet --tdp-listen 127.0.0.1:0 --network-difficulty 0.0005 --block-interval 0 \
    --template-interval 2s --authority-key-file "$work/authority.key" --events "$work/simnet.ev" \
    >"$work/simnet.out" 2>"$work/simnet.err" &
pids+=($!)
tdp_addr() { sed -n 's/^tdp listening on \([0-9.]*:[0-9]*\).*/\1/p' "$work/simnet.out" | head -n1; }
have_tdp() { [ -n "$(tdp_addr)" ]; }
wait_for 60 have_tdp || fail "simnet did not print 'tdp listening on ADDR'"
tdp=$(tdp_addr)
# simnet's fresh pair: the pool checks simnet's certificate with it and signs its own with it,
# and the devices check the pool's.
authority_pair "$work/authority.key"

# 4. A minimal loopback pool config: no LAN ranges, no monitoring, no JDS. Shares are
# acknowledged in batches; the channel targets come from the devices' nominal hash rates.
pool_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/pool.toml" <<EOF
authority_public_key = "$AUTHORITY_PUBLIC_KEY"
authority_secret_key = "$AUTHORITY_SECRET_KEY"
cert_validity_sec = 3600
listen_address = "127.0.0.1:$pool_port"
coinbase_reward_script = "addr(bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080)"
server_id = 1
pool_signature = "stratumlab interop"
shares_per_minute = 30.0
share_batch_size = $BATCH

[template_provider_type.Sv2Tp]
address = "$tdp"
public_key = "$AUTHORITY_PUBLIC_KEY"
EOF
for v in $(compgen -e | grep '^POOL__' || true); do unset "$v"; done
NO_COLOR=1 "$pool_bin" -c "$work/pool.toml" >"$work/pool.log" 2>&1 &
pids+=($!)
pool_pid=$!
count() { grep -c -- "$1" "$work/pool.log" 2>/dev/null || true; }
pool_ready() { kill -0 "$pool_pid" 2>/dev/null || fail "pool_sv2 exited early"; [ "$(count 'ready to accept connections')" -ge 1 ]; }
wait_for 90 pool_ready || fail "pool_sv2 did not become ready for miners"
say "pool_sv2 at 127.0.0.1:$pool_port on simnet's TDP $tdp"

# 5. Two fleets at once, each its own process: 12 S19-class devices and 8 CPU miners, sharing
# 1 MH/s (each device claims its share as its nominal hash rate).
fleet() {
    local name=$1 profile=$2 devices=$3 first=$4 budget=$5
    "$stratumlab" fleet --protocol sv2 --pool "127.0.0.1:$pool_port" \
        --authority-key "$AUTHORITY_PUBLIC_KEY" --profile "$profile" --devices "$devices" \
        --first-device-id "$first" --hash-budget "$budget" --duration "$DURATION" --drain 5s \
        --json --events "$work/$name.ev" >"$work/$name.json" 2>"$work/$name.err"
}
say "mining for $DURATION"
fleet asic asic 12 0 600kH/s &
asic_pid=$!
fleet cpu cpu 8 100 400kH/s &
cpu_pid=$!
wait "$asic_pid" || fail "the asic fleet failed: $(tail -n 3 "$work/asic.err")"
wait "$cpu_pid" || fail "the cpu fleet failed: $(tail -n 3 "$work/cpu.err")"

# 6. The fleets' own counts.
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$work/$1.json"; }
total=0; answered_total=0; unanswered_total=0; blocks_total=0
for name in asic cpu; do
    devices=$(field "$name" 'd["devices"]')
    [ "$(field "$name" 'd["ready"]')" -eq "$devices" ] || fail "$name: not every device was ready: $(cat "$work/$name.json")"
    [ "$(field "$name" 'd["protocol_errors"]')" -eq 0 ] || fail "$name: protocol errors (run with RUST_LOG=debug): $(cat "$work/$name.json")"
    accepted=$(field "$name" 'd["shares"]["accepted"]')
    [ "$accepted" -gt 0 ] || fail "$name: no share accepted"
    say "$name: $(field "$name" 'd["shares"]') blocks $(field "$name" 'd["blocks_found"]'), latency p50 $(field "$name" 'd["share_latency_ms"]["p50"]') ms"
    total=$(( total + accepted ))
    unanswered_total=$(( unanswered_total + $(field "$name" 'd["shares"]["unanswered"]') ))
    answered_total=$(( answered_total + accepted + $(field "$name" 'd["shares"]["rejected"]') ))
    blocks_total=$(( blocks_total + $(field "$name" 'd["blocks_found"]') ))
done

# 7. The pool's view: valid shares (batch fillers, batch-closing acknowledgements, blocks), no
# error but stale-share; the fleets' accepted shares are the pool's valid ones less those left in
# a batch the run ended in (counted unanswered by the fleets).
valid=$(( $(count 'SubmitSharesStandard: valid share') + $(count 'SubmitSharesStandard: SubmitSharesSuccess') + $(count 'Block Found') ))
errors=$(grep -o 'error_code: [a-z-]*' "$work/pool.log" | sort | uniq -c || true)
bad=$(grep 'SubmitSharesError' "$work/pool.log" | grep -vc 'error_code: stale-share' || true)
say "pool: $valid valid shares; errors: ${errors:-none}"
[ "$valid" -ge "$total" ] || fail "the fleets counted $total accepted, the pool validated only $valid"
[ "$valid" -le $(( total + unanswered_total )) ] \
    || fail "the pool validated $valid, the fleets account for $total accepted + $unanswered_total unanswered"

# 8. Blocks: found by a device, submitted by the pool, accepted by simnet as its tip.
[ "$blocks_total" -ge 1 ] || fail "no device found a block"
accepted_blocks=$(grep -c 'SubmitSolution accepted' "$work/simnet.err" || true)
[ "$accepted_blocks" -ge 1 ] || fail "simnet accepted no block from the pool's SubmitSolution"

# 9. Events: future jobs and their activations, and a verdict for every answered share.
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
results=0
for name in asic cpu; do
    "$stratumlab" events dump "$work/$name.ev" >"$work/$name.jsonl" || fail "$name: events do not read"
    ev() { grep -c "\"kind\":\"$1\"" "$work/$name.jsonl" || true; }
    [ "$(grep -c '"kind":"job_received".*"future":true\|"future":true.*"kind":"job_received"' "$work/$name.jsonl" || true)" -ge 1 ] \
        || fail "$name: no future job_received event"
    [ "$(ev job_activated)" -ge 1 ] || fail "$name: no job_activated event"
    results=$(( results + $(ev share_result) ))
done
[ "$results" -eq "$answered_total" ] || fail "$results share_result events for $answered_total answered shares"

# 10. Rejections as the lab counts them: only stale ones. The pool's other errors must be
# shares the lab counted stale (their job superseded when the verdict came), or verdicts the
# fleets never received.
"$stratumlab" events shares "$work/asic.ev" "$work/cpu.ev" "$work/simnet.ev" >"$work/shares.json" \
    || fail "the lab could not count the fleets' shares"
lab() { python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['shares']; print($1)" "$work/shares.json"; }
say "the lab's count: $(cat "$work/shares.json")"
[ "$(lab 'sum(v for k, v in s["rejected_by_reason"].items() if k != "stale")')" -eq 0 ] \
    || fail "shares rejected for reasons other than stale: $(cat "$work/shares.json")"
reclassified=$(lab 's["rejected_by_reason"].get("stale", 0) - s["pool_reason"].get("stale", 0)')
[ "$bad" -le $(( reclassified + unanswered_total )) ] \
    || fail "pool_sv2 rejected $bad shares for reasons other than stale ($errors); the lab found $reclassified of them superseded and $unanswered_total unanswered"
"$stratumlab" events dump "$work/simnet.ev" >"$work/simnet.jsonl" || fail "simnet's events do not read"
# One grep over the file: under pipefail, `grep | grep -q` fails whenever -q stops reading
# before the first grep is done (SIGPIPE), as CI once saw with 15 blocks.
[ "$(grep -c '"kind":"tip_changed".*"source":"submitted"\|"source":"submitted".*"kind":"tip_changed"' \
    "$work/simnet.jsonl" || true)" -ge 1 ] || fail "no tip_changed event for a submitted block"

say "PASS: 20 SV2 devices (asic, cpu) through pool_sv2 $POOL_SV2_VERSION: $total shares accepted" \
    "(pool validated $valid), $blocks_total blocks found, $accepted_blocks accepted by simnet"
