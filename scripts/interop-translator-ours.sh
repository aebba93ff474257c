#!/usr/bin/env bash
# Interop: stratumlab's translator (`stratumlab translator`) mines through the SV2 reference pool
# (pool_sv2, pinned), which takes its templates from simnet's Template Provider; stratumlab's SV1
# devices (`stratumlab fleet`) are its farm. Passes when
#   - the translator completes the Noise handshake with pool_sv2 (checking its authority key),
#     SetupConnection and OpenExtendedMiningChannel, and every device gets work through it,
#   - the devices' shares are accepted by the translator, and pool_sv2 accepts the shares the
#     translator forwards (its events: share_result received, accepted > 0),
#   - nothing is rejected for any reason but stale, by the fleet's count and by the translator's
#     events (a share on a job a new tip superseded is a genuine race), and every forwarded
#     share got a verdict,
#   - at least one block a device found goes device -> translator -> pool_sv2 -> simnet, which
#     takes it as its new tip (a tip_changed event with source "submitted" whose hash is one the
#     translator forwarded).
# All of it twice on the same simnet and pool_sv2: the translator in aggregated mode (one channel
# for every device), then in per-device mode (`--channels per-device`: a channel each on the one
# connection; pool_sv2 accepts shares on at least two of them).
#
# Everything listens on 127.0.0.1 only: the pool config is written here (no LAN ranges, no
# monitoring, no JDS). Every process started here is stopped on exit; each wait is bounded.
# Exits non-zero on anything missing; never skips.
#
# Environment:
#   STRATUMLAB_TOOLS_DIR  where pinned third-party tools are installed
#                         [default: ${XDG_CACHE_HOME:-$HOME/.cache}/stratumlab-ci]
#   INTEROP_KEEP=1        keep the work directory (logs, config, events) for inspection
#   FLEET_DURATION        how long the fleet mines in aggregated mode [default: 30s]
#   FLEET_DURATION_PER_DEVICE  and in per-device mode [default: 20s]
# Needs: cargo, python3; to install pool_sv2 the first time, Cap'n Proto (`capnp` and its
# standard schemas: Debian's capnproto and libcapnp-dev).
set -euo pipefail
cd "$(dirname "$0")/.."

PAYOUT=bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080
DURATION=${FLEET_DURATION:-30s}
DURATION_PER_DEVICE=${FLEET_DURATION_PER_DEVICE:-20s}
DEVICES=10
# Each device hashes a tenth of it: 50 kH/s, what the translator is told to count per device.
BUDGET=500kH/s
DEVICE_RATE=50kH/s
# A share every ~2 s per device to start with (50e3 * 2 / 2^32); vardiff keeps it near.
START_DIFFICULTY=0.000023

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

script=interop-translator-ours
log_files=(simnet.out simnet.err pool.log
    translator-aggregated.out translator-aggregated.err fleet-aggregated.err fleet-aggregated.json
    translator-per-device.out translator-per-device.err fleet-per-device.err fleet-per-device.json)
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
# is one the devices found (network difficulty 0.0003: a block every ~1.3M hashes, about 11
# expected in 30 s of the fleet's 500 kH/s, so that none at all is a one-in-10^5 event; at 0.001
# a CI run once found none); a fee-driven template every 2 s, so jobs on the current tip flow
# too.
timeout --signal=TERM 600 "$stratumlab" simnet --tdp-listen 127.0.0.1:0 --network-difficulty 0.0003 \
    --block-interval 0 --template-interval 2s --authority-key-file "$work/authority.key" \
    --events "$work/simnet.ev" \
    >"$work/simnet.out" 2>"$work/simnet.err" &
pids+=($!)
tdp_addr() { sed -n 's/^tdp listening on \([0-9.]*:[0-9]*\).*/\1/p' "$work/simnet.out" | head -n1; }
have_tdp() { [ -n "$(tdp_addr)" ]; }
wait_for 60 have_tdp || fail "simnet did not print 'tdp listening on ADDR'"
tdp=$(tdp_addr)
# simnet's fresh pair: the pool checks simnet's certificate with it and signs its own with it,
# and the translator checks the pool's.
authority_pair "$work/authority.key"

# 4. pool_sv2 on simnet's Template Provider, a minimal loopback config. POOL__* variables would
# override the file: clear them.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pool_port=$(free_port)
cat >"$work/pool.toml" <<EOF
authority_public_key = "$AUTHORITY_PUBLIC_KEY"
authority_secret_key = "$AUTHORITY_SECRET_KEY"
cert_validity_sec = 3600
listen_address = "127.0.0.1:$pool_port"
coinbase_reward_script = "addr($PAYOUT)"
server_id = 1
pool_signature = "stratumlab interop"
shares_per_minute = 30.0
share_batch_size = 1

[template_provider_type.Sv2Tp]
address = "$tdp"
public_key = "$AUTHORITY_PUBLIC_KEY"
EOF
for v in $(compgen -e | grep '^POOL__' || true); do unset "$v"; done
NO_COLOR=1 timeout --signal=TERM 600 "$pool_bin" -c "$work/pool.toml" >"$work/pool.log" 2>&1 &
pids+=($!)
pool_pid=$!
pool_ready() {
    kill -0 "$pool_pid" 2>/dev/null || fail "pool_sv2 exited early"
    grep -q 'ready to accept connections' "$work/pool.log"
}
wait_for 90 pool_ready || fail "pool_sv2 did not become ready for miners"
say "pool_sv2 at 127.0.0.1:$pool_port on simnet's TDP $tdp"

# 5-8, once per channel mode: our translator with pool_sv2 upstream (its authority key), the
# farm mining through it, the fleet's own counts, then the translator stopped (it writes its
# events and summary on SIGTERM).
declare -A blocks_in
mine_through() {
    local mode=$1 duration=$2
    # 5. The translator prints its SV1 address once the upstream is ready (aggregated: its
    # channel open; per-device: SetupConnection done, channels come with devices).
    timeout --signal=TERM 600 "$stratumlab" translator --listen 127.0.0.1:0 --channels "$mode" \
        --upstream "127.0.0.1:$pool_port" --upstream-authority-key "$AUTHORITY_PUBLIC_KEY" \
        --user-identity stratumlab-interop --device-hash-rate "$DEVICE_RATE" \
        --start-difficulty "$START_DIFFICULTY" --shares-per-minute 30 \
        --events "$work/translator-$mode.ev" \
        >"$work/translator-$mode.out" 2>"$work/translator-$mode.err" &
    local translator_pid=$!
    pids+=("$translator_pid")
    sv1_addr() { sed -n 's/^sv1 listening on \([0-9.]*:[0-9]*\).*/\1/p' "$work/translator-$mode.out" | head -n1; }
    translator_up() {
        kill -0 "$translator_pid" 2>/dev/null || fail "the translator ($mode) exited early"
        [ -n "$(sv1_addr)" ]
    }
    wait_for 60 translator_up || fail "the translator ($mode) did not print 'sv1 listening on ADDR' (no upstream on pool_sv2?)"
    local sv1
    sv1=$(sv1_addr)
    say "translator ($mode) at $sv1, upstream ready on pool_sv2"

    # 6. The farm: S19-class SV1 devices (version rolling through mining.configure).
    say "mining for $duration with $DEVICES devices ($mode)"
    "$stratumlab" fleet --pool "$sv1" --profile asic --devices "$DEVICES" --hash-budget "$BUDGET" \
        --duration "$duration" --drain 5s --json --events "$work/fleet-$mode.ev" \
        >"$work/fleet-$mode.json" 2>"$work/fleet-$mode.err" \
        || fail "the fleet ($mode) failed: $(tail -n 3 "$work/fleet-$mode.err")"

    # 7. The fleet's own counts: every device ready, shares accepted, nothing rejected but stale.
    local json="$work/fleet-$mode.json"
    field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($1)" "$json"; }
    [ "$(field 'd["ready"]')" -eq "$DEVICES" ] || fail "$mode: not every device was ready: $(cat "$json")"
    [ "$(field 'd["protocol_errors"]')" -eq 0 ] || fail "$mode: protocol errors (run with RUST_LOG=debug): $(cat "$json")"
    [ "$(field 'd["disconnects"]')" -eq 0 ] || fail "$mode: devices disconnected: $(cat "$json")"
    [ "$(field 'd["shares"]["accepted"]')" -gt 0 ] || fail "$mode: the translator accepted no share"
    local other
    other=$(field 'sum(v for k, v in d["shares"]["rejected_by_reason"].items() if k != "stale")')
    [ "$other" -eq 0 ] || fail "$mode: shares rejected for reasons other than stale: $(field 'd["shares"]')"
    blocks_in[$mode]=$(field 'd["blocks_found"]')
    say "fleet ($mode): $(field 'd["shares"]') blocks ${blocks_in[$mode]}"

    # 8. Stop the translator.
    kill -TERM "$translator_pid"
    wait_for 20 bash -c "! kill -0 $translator_pid 2>/dev/null" || fail "the translator ($mode) did not stop on SIGTERM"
}
mine_through aggregated "$DURATION"
mine_through per-device "$DURATION_PER_DEVICE"
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()

# 9. Each pass's translator events: pool_sv2's verdicts on the forwarded shares (none
# unanswered, none rejected but stale; a share is its channel and sequence number, each
# channel counting its own); blocks go device -> translator (share_sent with the block's hash)
# -> pool_sv2 -> simnet (tip_changed, source submitted).
"$stratumlab" events dump "$work/simnet.ev" >"$work/simnet.jsonl" || fail "simnet: events do not read"
grep -q 'Propagating solution to the Template Provider' "$work/pool.log" \
    || fail "pool_sv2 sent no SubmitSolution to simnet"
for mode in aggregated per-device; do
    "$stratumlab" events dump "$work/translator-$mode.ev" >"$work/translator-$mode.jsonl" \
        || fail "translator ($mode): events do not read"
    summary=$(python3 - "$work" "$mode" <<'PY'
import collections, json, sys
work, mode = sys.argv[1], sys.argv[2]
def events(name):
    with open(f"{work}/{name}.jsonl") as f:
        return [json.loads(line) for line in f]
forwarded = set()
hashes = set()
accepted = 0
rejected = collections.Counter()
answered = set()
accepted_channels = set()
for e in events(f"translator-{mode}"):
    if e["kind"] == "share_sent":
        forwarded.add((e["channel"], e["seq"]))
        if e.get("hash"):
            hashes.add(e["hash"])
    elif e["kind"] == "share_result" and e.get("perspective") == "received":
        answered.add((e["channel"], e["seq"]))
        v = e["verdict"]
        if v == "accepted":
            accepted += 1
            accepted_channels.add(e["channel"])
        else:
            rejected[v["rejected"] if isinstance(v, dict) else str(v)] += 1
tips = {e["hash"] for e in events("simnet")
        if e["kind"] == "tip_changed" and e.get("source") == "submitted"}
bad = sum(n for r, n in rejected.items() if r != "stale")
print(len(forwarded), accepted, bad, len(forwarded - answered), len(tips & hashes),
      len(accepted_channels), dict(rejected) or "none")
PY
    ) || fail "the events ($mode) do not parse"
    read -r forwarded accepted bad unanswered chained channels rejections <<<"$summary"
    say "translator ($mode): $forwarded shares forwarded, $accepted accepted by pool_sv2 on" \
        "$channels channel(s), rejected: $rejections, $unanswered unanswered; $chained of its" \
        "blocks new tips on simnet"
    [ "$forwarded" -ge 1 ] || fail "$mode: the translator forwarded no share to pool_sv2"
    [ "$accepted" -ge 1 ] || fail "$mode: pool_sv2 accepted no share from the translator"
    [ "$bad" -eq 0 ] || fail "$mode: pool_sv2 rejected shares for reasons other than stale: $rejections"
    [ "$unanswered" -eq 0 ] || fail "$mode: $unanswered forwarded shares got no verdict from pool_sv2"
    [ "${blocks_in[$mode]}" -ge 1 ] || fail "$mode: no device found a block"
    [ "$chained" -ge 1 ] || fail "$mode: no block went device -> translator -> pool_sv2 -> simnet tip"
    if [ "$mode" = per-device ]; then
        [ "$channels" -ge 2 ] || fail "per-device: pool_sv2 accepted shares on $channels channel(s), not one per device"
    fi
done

say "PASS: $DEVICES SV1 devices through stratumlab's translator into pool_sv2 $POOL_SV2_VERSION," \
    "aggregated (${blocks_in[aggregated]} blocks found) and per-device (${blocks_in[per-device]}" \
    "blocks found): forwarded shares accepted, blocks new tips on simnet"
