#!/usr/bin/env bash
# Interop: a real third-party SV1 miner, `para miner` (crates.io, pinned), mines against
# `stratumlab pool` on simnet. Passes when
#   - para completes its handshake and gets accepted shares, with version rolling (its default)
#     and again with version rolling disabled,
#   - no share is rejected for any reason but stale (a share on the job a block just
#     superseded is a genuine race),
#   - at least one block para found became simnet's tip (network difficulty 0.002: a block
#     every ~8.6M hashes, seconds for one CPU core),
#   - /healthz says ok and the store holds every accepted share.
#
# Everything listens on 127.0.0.1 only; every process is stopped on exit; each wait is bounded.
#
# Environment:
#   STRATUMLAB_TOOLS_DIR  where pinned third-party tools are installed
#                         [default: ${XDG_CACHE_HOME:-$HOME/.cache}/stratumlab-ci]
#   INTEROP_KEEP=1        keep the work directory (logs, store, events) for inspection
set -euo pipefail
cd "$(dirname "$0")/.."

# A regtest P2WPKH address (simnet's chain is regtest): the solo payout.
ADDRESS=bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

script=interop-para
log_files=(simnet.out simnet.err pool.out pool.err para-rolling.out para-plain.out)
# shellcheck source=scripts/interop-common.sh
source scripts/interop-common.sh

# 1. The pinned miner.
install_pinned para "$PARA_VERSION"
para=$pinned_bin

# 2. stratumlab (dev profile: CI has just built it for the tests).
cargo build --quiet -p cli
stratumlab="$target_dir/debug/stratumlab"

# 3. simnet: RPC and ZMQ, no network blocks (every new tip is one para found).
"$stratumlab" simnet --rpc-listen 127.0.0.1:0 --zmq-listen 127.0.0.1:0 \
    --rpc-user lab --rpc-password lab --network-difficulty 0.002 --block-interval 0 \
    --template-interval 2s >"$work/simnet.out" 2>"$work/simnet.err" &
pids+=($!)
addr_of() { sed -n "s/^$1 listening on \([0-9.]*:[0-9]*\).*/\1/p" "$2" | head -n1; }
have() { [ -n "$(addr_of "$1" "$2")" ]; }
wait_for 60 have rpc "$work/simnet.out" || fail "simnet did not print its RPC address"
wait_for 10 have zmq "$work/simnet.out" || fail "simnet did not print its ZMQ address"
rpc=$(addr_of rpc "$work/simnet.out")
zmq=$(addr_of zmq "$work/simnet.out")

# 4. The pool, solo: each miner's coinbase pays the address it authorized with.
"$stratumlab" pool --sv1-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --node-rpc "http://$rpc" --rpc-user lab --rpc-password lab --zmq "$zmq" --solo \
    --start-difficulty 0.0002 --shares-per-minute 30 --template-interval 5s \
    --store "$work/pool.sqlite" --events "$work/pool.ev" \
    >"$work/pool.out" 2>"$work/pool.err" &
pids+=($!)
wait_for 60 have sv1 "$work/pool.out" || fail "the pool did not print its SV1 address"
sv1=$(addr_of sv1 "$work/pool.out")
http=$(addr_of http "$work/pool.out")
healthy() { [ "$(curl -s "http://$http/healthz")" = ok ]; }
wait_for 30 healthy || fail "/healthz never said ok"
say "pool at $sv1 (http $http), simnet rpc $rpc zmq $zmq"

status() { curl -s "http://$http/api/status"; }
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# 5. para with version rolling, then without.
run_para() {
    local name=$1
    shift
    timeout --signal=INT 20 "$para" miner "$sv1" --username "$ADDRESS.$name" --cpu-cores 1 "$@" \
        >"$work/para-$name.out" 2>&1 || true
}
run_para rolling
rolled=$(grep -c '"version_bits": "[0-9a-f]*[1-9a-f][0-9a-f]*"' "$work/para-rolling.out" || true)
after_rolling=$(status | field 'd["shares"]["accepted"]')
run_para plain --disable-version-rolling
s=$(status)
accepted=$(echo "$s" | field 'd["shares"]["accepted"]')
rejected=$(echo "$s" | field 'd["shares"]["rejected"] - d["shares"]["rejected_by_reason"]["stale"]')
blocks=$(echo "$s" | field 'd["blocks"]["accepted"]')
say "accepted $accepted (with rolling $after_rolling, rolled submits $rolled), rejected other than stale $rejected, blocks $blocks"

[ "$after_rolling" -gt 0 ] || fail "no share accepted from para with version rolling"
[ "$rolled" -gt 0 ] || fail "para never submitted rolled version bits"
[ "$accepted" -gt "$after_rolling" ] || fail "no share accepted from para without version rolling"
[ "$rejected" -eq 0 ] || fail "$rejected shares rejected: $(echo "$s" | field 'd["shares"]["rejected_by_reason"]')"
[ "$blocks" -gt 0 ] || fail "no block accepted by simnet"

# 6. simnet's tip is a block the pool submitted.
tip=$(curl -s -u lab:lab -d '{"jsonrpc":"1.0","id":1,"method":"getblockcount","params":[]}' "http://$rpc" | field 'd["result"]')
[ "$tip" -gt 900000 ] || fail "simnet's tip did not move (height $tip)"

# 7. Stopped cleanly, the store holds every accepted share.
kill -TERM "${pids[1]}"
wait_for 20 bash -c "! kill -0 ${pids[1]} 2>/dev/null" || fail "the pool did not stop on SIGTERM"
stored=$(python3 -c "import sqlite3; print(sqlite3.connect('$work/pool.sqlite').execute('select count(*) from share').fetchone()[0])")
[ "$stored" -eq "$accepted" ] || fail "store holds $stored shares, the pool accepted $accepted"
say "PASS: para mined $accepted accepted shares and $blocks blocks; tip height $tip; store complete"
