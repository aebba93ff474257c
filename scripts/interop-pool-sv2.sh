#!/usr/bin/env bash
# Interop: the SV2 reference pool (pool_sv2, pinned) takes its templates from simnet's SV2
# Template Provider. Passes when the pool
#   - completes the Noise handshake (checking simnet's authority key) and SetupConnection,
#   - receives a future NewTemplate and the SetNewPrevHash naming it,
#   - says it is ready to accept miners, and answers an SV2 miner's SetupConnection on its port,
#   - takes a block-finding share from a one-shot SV2 miner (network difficulty 2^-20) and
#     sends SubmitSolution, from which simnet rebuilds the block and accepts it as the new tip,
#   - receives the new tip as another future NewTemplate + SetNewPrevHash,
# and simnet's events show the TDP connection, the templates, and the accepted block.
#
# Everything listens on 127.0.0.1 only. Every process started here is stopped on exit; each
# wait is bounded. Exits non-zero on anything missing; never skips.
#
# Environment:
#   STRATUMLAB_TOOLS_DIR  where pinned third-party tools are installed
#                         [default: ${XDG_CACHE_HOME:-$HOME/.cache}/stratumlab-ci]
#   INTEROP_KEEP=1        keep the work directory (logs, config, events) for inspection
# Needs: cargo; to install pool_sv2 the first time, Cap'n Proto (`capnp` and its standard
# schemas: Debian's capnproto and libcapnp-dev).
set -euo pipefail
cd "$(dirname "$0")/.."


target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

script=interop-pool-sv2
log_files=(simnet.out simnet.err pool.log probe.out miner.out)
# shellcheck source=scripts/interop-common.sh
source scripts/interop-common.sh

# 1. The pinned reference pool.
install_pinned pool_sv2 "$POOL_SV2_VERSION"
pool_bin=$pinned_bin

# 2. stratumlab (dev profile: CI has just built it for the tests) and two SV2 client examples.
say "building stratumlab and the sv2_probe example"
cargo build --quiet -p cli -p simnet --example sv2_probe --example sv2_mine_block
stratumlab="$target_dir/debug/stratumlab"
probe="$target_dir/debug/examples/sv2_probe"
miner="$target_dir/debug/examples/sv2_mine_block"

# 3. simnet with its Template Provider on an ephemeral port. Difficulty 2^-20: a block takes
# about 4,096 hashes. No network blocks: every tip change is one this script caused.
RUST_LOG=info timeout --signal=TERM 600 "$stratumlab" simnet \
    --tdp-listen 127.0.0.1:0 --network-difficulty 0.00000095367431640625 --block-interval 0 \
    --authority-key-file "$work/authority.key" --events "$work/simnet.ev" \
    >"$work/simnet.out" 2>"$work/simnet.err" &
pids+=($!)
tdp_addr() { sed -n 's/^tdp listening on \([0-9.]*:[0-9]*\).*/\1/p' "$work/simnet.out" | head -n1; }
have_tdp() { [ -n "$(tdp_addr)" ]; }
wait_for 60 have_tdp || fail "simnet did not print 'tdp listening on ADDR'"
tdp=$(tdp_addr)
say "simnet TDP at $tdp"
# simnet's fresh pair: the pool checks simnet's certificate with it and signs its own with it.
authority_pair "$work/authority.key"

# 4. A minimal loopback pool config: no LAN ranges, no monitoring, no JDS.
pool_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null \
    || echo $(( 20000 + RANDOM % 20000 )))
cat >"$work/pool.toml" <<EOF
authority_public_key = "$AUTHORITY_PUBLIC_KEY"
authority_secret_key = "$AUTHORITY_SECRET_KEY"
cert_validity_sec = 3600
listen_address = "127.0.0.1:$pool_port"
coinbase_reward_script = "addr(bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080)"
server_id = 1
pool_signature = "stratumlab interop"
shares_per_minute = 6.0
share_batch_size = 10

[template_provider_type.Sv2Tp]
address = "$tdp"
public_key = "$AUTHORITY_PUBLIC_KEY"
EOF

# 5. The pool. POOL__* variables would override the file: clear them.
for v in $(compgen -e | grep '^POOL__' || true); do unset "$v"; done
pool_started=$(date +%s)
NO_COLOR=1 timeout --signal=TERM 600 "$pool_bin" -c "$work/pool.toml" >"$work/pool.log" 2>&1 &
pids+=($!)
pool_pid=$!
count() { grep -c -- "$1" "$work/pool.log" 2>/dev/null || true; }
seen() { [ "$(count "$1")" -ge "${2:-1}" ]; }
alive() { kill -0 "$pool_pid" 2>/dev/null || fail "pool_sv2 exited early"; }
pool_has() { alive && seen "$@"; }

wait_for 60 pool_has 'Received `SetupConnectionSuccess` from TP' \
    || fail "pool_sv2 did not complete SetupConnection with simnet"
wait_for 30 pool_has 'Received: NewTemplate(template_id: [0-9]*, future_template: true' \
    || fail "pool_sv2 received no future NewTemplate"
wait_for 30 pool_has 'Received: SetNewPrevHash' || fail "pool_sv2 received no SetNewPrevHash"
wait_for 30 pool_has 'ready to accept connections' || fail "pool_sv2 did not become ready for miners"
say "pool_sv2 ready for miners $(( $(date +%s) - pool_started ))s after start"

# 6. An SV2 miner's view: handshake with the pool's authority key and SetupConnection.
"$probe" "127.0.0.1:$pool_port" "$AUTHORITY_PUBLIC_KEY" >"$work/probe.out" 2>&1 \
    || fail "the pool did not answer an SV2 SetupConnection: $(cat "$work/probe.out")"
grep -q 'SetupConnection.Success' "$work/probe.out" \
    || fail "the pool refused the miner: $(cat "$work/probe.out")"
say "$(cat "$work/probe.out")"

# 7. A miner finds a block through the pool: the pool sends SubmitSolution to simnet, which
# accepts the block; the new tip reaches the pool as another future template + prev hash.
"$miner" "127.0.0.1:$pool_port" "$AUTHORITY_PUBLIC_KEY" >"$work/miner.out" 2>&1 \
    || fail "mining a block through the pool failed: $(tail -n 3 "$work/miner.out")"
say "$(tail -n 1 "$work/miner.out")"
block=$(sed -n 's/.*SubmitShares.Success for block \([0-9a-f]*\).*/\1/p' "$work/miner.out")
[ -n "$block" ] || fail "the miner reported no block hash"
seen 'Propagating solution to the Template Provider' || fail "pool_sv2 did not send SubmitSolution"
simnet_has() { grep -q -- "$1" "$work/simnet.err"; }
wait_for 30 simnet_has "SubmitSolution accepted.*$block" \
    || fail "simnet did not accept the block from SubmitSolution"
wait_for 30 pool_has "Received: SetNewPrevHash.*prev_hash: U256($block)" \
    || fail "the pool got no SetNewPrevHash for the new tip $block"
seen 'Received: NewTemplate(template_id: [0-9]*, future_template: true' 2 \
    || fail "no future NewTemplate for the new tip"
say "simnet accepted block $block from the pool's SubmitSolution; the pool has the new tip"

# 8. Stop both (simnet flushes its events on SIGTERM) and read simnet's events.
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
"$stratumlab" events dump "$work/simnet.ev" >"$work/simnet.jsonl" || fail "simnet's events do not read"
ev() { grep -c "\"kind\":\"$1\"" "$work/simnet.jsonl" || true; }
[ "$(grep -c '"kind":"connection_opened".*"label":"tdp"\|"label":"tdp".*"kind":"connection_opened"' "$work/simnet.jsonl" || true)" -ge 1 ] \
    || fail "no tdp connection_opened event"
[ "$(ev template_created)" -ge 2 ] || fail "fewer than 2 template_created events"
grep -q "\"kind\":\"block_result\".*\"accepted\":true\|\"accepted\":true.*\"kind\":\"block_result\"" "$work/simnet.jsonl" \
    || fail "no accepted block_result event"
# One grep over the file: under pipefail, `grep | grep -q` fails whenever -q stops reading
# before the first grep is done (SIGPIPE), as CI once saw with 15 blocks.
[ "$(grep -c '"kind":"tip_changed".*"source":"submitted"\|"source":"submitted".*"kind":"tip_changed"' \
    "$work/simnet.jsonl" || true)" -ge 1 ] || fail "no tip_changed event for the submitted block"

say "PASS: pool_sv2 $POOL_SV2_VERSION took $(count 'Received: NewTemplate') NewTemplate and" \
    "$(count 'Received: SetNewPrevHash') SetNewPrevHash from simnet and submitted block $block;" \
    "events: $(ev template_created) templates, $(ev tip_changed) tips, $(ev block_result) block results"
