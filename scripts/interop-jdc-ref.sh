#!/usr/bin/env bash
# Interop: the SV2 reference Job Declarator Client (jd_client_sv2, pinned) declares jobs to
# stratumlab's Job Declarator Server (`stratumlab jds`) and mines them on stratumlab's SV2 pool
# (`stratumlab pool --sv2-listen` with a job token key), with simnet's Template Provider as the
# JDC's template source and simnet's JSON-RPC as the JDS's node: configuration B with the
# reference JDC in the middle, stratumlab's SV2 devices (`stratumlab fleet --protocol sv2`,
# standard channels) below it. Passes when
#   - the JDC completes the Noise handshakes and SetupConnection with the pool (mining, work
#     selection), the JDS (job declaration, full template) and simnet's TDP, and serves every
#     device a standard channel,
#   - the JDS allocates tokens and accepts declared jobs (DeclareMiningJob.Success, its count
#     and its log; none refused), and the pool accepts the JDC's SetCustomMiningJob
#     (SetCustomMiningJob.Success; none refused),
#   - the devices' shares are accepted by the JDC, and the pool accepts the shares the JDC
#     forwards on its extended channel (events: share verdicts on a channel; none rejected but
#     stale),
#   - the pool's acknowledgements the JDC received agree with the pool's verdicts,
#   - a block a device found reaches simnet as its new tip (a tip_changed event with source
#     "submitted"), propagated by the JDC (SubmitSolution to the TP) and/or the JDS
#     (PushSolution, submitblock) and/or the pool, and every block the JDS rebuilt from a
#     PushSolution, or the pool from a share on a declared job, is one of those tips (the same
#     block, by hash: a different coinbase or transaction set would hash differently).
#
# Everything listens on 127.0.0.1 only: the JDC's config is written here (no LAN ranges, no
# monitoring server, no miner telemetry). Every process started here is stopped on exit; each
# wait is bounded. Exits non-zero on anything missing; never skips.
#
# Environment:
#   STRATUMLAB_TOOLS_DIR  where pinned third-party tools are installed
#                         [default: ${XDG_CACHE_HOME:-$HOME/.cache}/stratumlab-ci]
#   INTEROP_KEEP=1        keep the work directory (logs, config, events) for inspection
#   FLEET_DURATION        how long the fleet mines [default: 40s]
# Needs: cargo, python3; to install jd_client_sv2 the first time, Cap'n Proto (`capnp` and its
# standard schemas: Debian's capnproto and libcapnp-dev).
set -euo pipefail
cd "$(dirname "$0")/.."

PAYOUT=bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080
RPC_USER=lab
RPC_PASSWORD=lab
DURATION=${FLEET_DURATION:-40s}
DEVICES=8
BUDGET=1MH/s

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

script=interop-jdc-ref
log_files=(simnet.out simnet.err pool.out pool.err jds.out jds.err jdc.log fleet.err fleet.json)
# shellcheck source=scripts/interop-common.sh
source scripts/interop-common.sh

# 1. The pinned reference JDC, installed once per machine like pool_sv2 and translator_sv2.
install_pinned jd_client_sv2 "$JD_CLIENT_SV2_VERSION"
jdc_bin=$pinned_bin

# 2. stratumlab (dev profile: CI has just built it for the tests; the fleet's hashing is
# optimized even there).
cargo build --quiet -p cli
stratumlab="$target_dir/debug/stratumlab"

# 3. simnet: the Template Provider (for the JDC and the pool) and JSON-RPC (the JDS's node: its
# mempool, submitblock). No blocks of the rest of the network, so every new tip is one the
# devices found (network difficulty 0.001: a block every ~4.3M hashes, a few seconds of the
# fleet's 1 MH/s); a fee-driven template every 2 s, with transactions from simnet's mempool, so
# that declared jobs name transactions the JDS must know or ask for.
timeout --signal=TERM 600 "$stratumlab" simnet --tdp-listen 127.0.0.1:0 \
    --rpc-listen 127.0.0.1:0 --rpc-user "$RPC_USER" --rpc-password "$RPC_PASSWORD" \
    --network-difficulty 0.001 --block-interval 0 --template-interval 2s \
    --authority-key-file "$work/tdp.key" \
    --events "$work/simnet.ev" >"$work/simnet.out" 2>"$work/simnet.err" &
pids+=($!)
simnet_line() { sed -n "s/^$1 \\([0-9A-Za-z.:]*\\).*/\\1/p" "$work/simnet.out" | head -n1; }
simnet_up() { [ -n "$(simnet_line 'tdp listening on')" ] && [ -n "$(simnet_line 'rpc listening on')" ]; }
wait_for 60 simnet_up || fail "simnet did not print 'tdp listening on ADDR' and 'rpc listening on ADDR'"
tdp=$(simnet_line 'tdp listening on')
rpc=$(simnet_line 'rpc listening on')
tdp_key=$(simnet_line 'tdp authority public key')
[ -n "$tdp_key" ] || fail "simnet did not print its TDP authority public key"

# 4. The job token key the pool and the JDS share.
python3 -c 'import secrets; print(secrets.token_hex(32))' >"$work/jd-token.key"

# 5. Our SV2 pool on simnet's TDP, taking declared jobs; and our JDS on simnet's RPC. Both sign
# with one fresh pair, in one key file (the reference JDC takes one key for both upstreams), and
# the JDC signs its own downstream certificates with it too. Their logs at debug for the
# declared-job lines.
RUST_LOG=info,pool::sv2::session=debug timeout --signal=TERM 600 "$stratumlab" pool \
    --sv2-listen 127.0.0.1:0 --tp "$tdp" --tp-authority-key "$tdp_key" \
    --jd-token-key "$work/jd-token.key" --payout-address "$PAYOUT" \
    --store "$work/pool.sqlite" --events "$work/pool.ev" --authority-key-file "$work/authority.key" \
    >"$work/pool.out" 2>"$work/pool.err" &
pids+=($!)
pool_pid=$!
RUST_LOG=info,jds=debug timeout --signal=TERM 600 "$stratumlab" jds --listen 127.0.0.1:0 \
    --node-rpc "http://$rpc" --rpc-user "$RPC_USER" --rpc-password "$RPC_PASSWORD" \
    --jd-token-key "$work/jd-token.key" --payout-address "$PAYOUT" --events "$work/jds.ev" \
    --authority-key-file "$work/authority.key" \
    >"$work/jds.out" 2>"$work/jds.err" &
pids+=($!)
jds_pid=$!
line_of() { sed -n "s/^$2 \\([^ ]*\\).*/\\1/p" "$work/$1.out" | head -n1; }
roles_up() {
    kill -0 "$pool_pid" 2>/dev/null || fail "the pool exited early"
    kill -0 "$jds_pid" 2>/dev/null || fail "the jds exited early"
    [ -n "$(line_of pool 'sv2 listening on')" ] && [ -n "$(line_of pool 'sv2 authority public key')" ] \
        && [ -n "$(line_of jds 'jds listening on')" ] && [ -n "$(line_of jds 'jds authority public key')" ]
}
wait_for 60 roles_up || fail "the pool and the jds did not print their addresses and authority keys"
pool_addr=$(line_of pool 'sv2 listening on')
jds_addr=$(line_of jds 'jds listening on')
pool_key=$(line_of pool 'sv2 authority public key')
jds_key=$(line_of jds 'jds authority public key')
# The JDC takes one authority key per upstream, for the pool and the JDS alike.
[ "$pool_key" = "$jds_key" ] || fail "the pool's key $pool_key and the jds's key $jds_key differ"
authority_pair "$work/authority.key"
say "pool at $pool_addr, jds at $jds_addr (authority key $pool_key); simnet TDP $tdp, RPC $rpc"

# 6. A minimal loopback JDC config: full-template mode, our pool + JDS as its only upstream,
# simnet's TDP (its key checked). No monitoring_address (no HTTP server), no [miner_telemetry]
# (no LAN scan), no extensions. coinbase_reward_script only pays in solo mining (its fallback).
# reserved_downstream_rollable_extranonce_size is left at its default (8): the JDC then asks the
# pool for 10 rollable bytes (its 2-byte channel index and 8), which an SV2-only pool grants.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
jdc_port=$(free_port)
cat >"$work/jdc.toml" <<EOF
listening_address = "127.0.0.1:$jdc_port"
max_supported_version = 2
min_supported_version = 2
authority_public_key = "$AUTHORITY_PUBLIC_KEY"
authority_secret_key = "$AUTHORITY_SECRET_KEY"
cert_validity_sec = 3600
shares_per_minute = 30.0
share_batch_size = 3
mode = "FULLTEMPLATE"
jdc_signature = "stratumlab interop"
coinbase_reward_script = "addr($PAYOUT)"
supported_extensions = []
required_extensions = []

[[upstreams]]
authority_pubkey = "$pool_key"
pool_address = "${pool_addr%:*}"
pool_port = ${pool_addr##*:}
jds_address = "${jds_addr%:*}"
jds_port = ${jds_addr##*:}
user_identity = "stratumlab-jdc"

[template_provider_type.Sv2Tp]
address = "$tdp"
public_key = "$tdp_key"
EOF
# JDC__* variables would override the file: clear them.
for v in $(compgen -e | grep '^JDC__' || true); do unset "$v"; done
NO_COLOR=1 RUST_LOG=info timeout --signal=TERM 600 "$jdc_bin" -c "$work/jdc.toml" \
    >"$work/jdc.log" 2>&1 &
pids+=($!)
jdc_pid=$!
# It opens its one extended channel on the pool when the first device opens a channel on it.
port_open() { python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$1" 2>/dev/null; }
jdc_ready() {
    kill -0 "$jdc_pid" 2>/dev/null || fail "jd_client_sv2 exited early"
    port_open "$jdc_port"
}
wait_for 90 jdc_ready || fail "jd_client_sv2 does not listen on 127.0.0.1:$jdc_port"
say "jd_client_sv2 listening on 127.0.0.1:$jdc_port"

# 7. SV2 devices (S19-class, standard channels) on the JDC, checking its authority key.
say "mining for $DURATION"
"$stratumlab" fleet --protocol sv2 --pool "127.0.0.1:$jdc_port" \
    --authority-key "$AUTHORITY_PUBLIC_KEY" --profile asic --devices "$DEVICES" \
    --hash-budget "$BUDGET" --duration "$DURATION" --drain 5s --json --events "$work/fleet.ev" \
    >"$work/fleet.json" 2>"$work/fleet.err" || fail "the fleet failed: $(tail -n 3 "$work/fleet.err")"

# 8. The fleet's own counts: every device ready, shares accepted, nothing rejected but stale.
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($1)" "$work/fleet.json"; }
[ "$(field 'd["ready"]')" -eq "$DEVICES" ] || fail "not every device was ready: $(cat "$work/fleet.json")"
[ "$(field 'd["protocol_errors"]')" -eq 0 ] || fail "fleet protocol errors (run with RUST_LOG=debug): $(cat "$work/fleet.json")"
[ "$(field 'd["shares"]["accepted"]')" -gt 0 ] || fail "no share accepted by the JDC"
other=$(field 'sum(v for k, v in d["shares"]["rejected_by_reason"].items() if k != "stale")')
[ "$other" -eq 0 ] || fail "shares rejected for reasons other than stale: $(field 'd["shares"]')"
blocks_found=$(field 'd["blocks_found"]')
say "fleet: $(field 'd["shares"]') blocks $blocks_found"

# 9. Stop everything (the roles flush their events and print their summaries), then read the
# logs and events. The JDC goes first: if the pool went at the same time, the JDC could see its
# upstream close before its own TERM and fall back, which the checks below count as a failure.
kill -TERM "$jdc_pid" 2>/dev/null || true
wait "$jdc_pid" 2>/dev/null || true
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
sed 's/\x1b\[[0-9;]*m//g' "$work/jdc.log" >"$work/jdc.clean.log"
for ev in pool jds simnet fleet; do
    "$stratumlab" events dump "$work/$ev.ev" >"$work/$ev.jsonl" || fail "$ev: events do not read"
done
summary=$(python3 - "$work" <<'EOF'
import collections, json, re, sys
work = sys.argv[1]
def events(name):
    with open(f"{work}/{name}.jsonl") as f:
        return [json.loads(line) for line in f]
def text(name):
    with open(f"{work}/{name}") as f:
        return f.read()
jdc, pool_log, jds_log, jds_out = text("jdc.clean.log"), text("pool.err"), text("jds.err"), text("jds.out") + text("jds.err")
out = {}
# The JDS's verdicts, by its summary line and by what the JDC received.
m = re.search(r"jds stopped: .*?(\d+) tokens allocated, (\d+) jobs declared, (\d+) refused, (\d+) transactions requested, (\d+) solutions pushed, (\d+) blocks submitted \((\d+) accepted\)", jds_out)
keys = ("tokens", "declared", "refused", "txs_requested", "pushed", "jds_blocks", "jds_accepted")
out.update(zip(keys, map(int, m.groups())) if m else ((k, -1) for k in keys))
out["jdc_declare_ok"] = jdc.count("Received: DeclareMiningJobSuccess")
out["jdc_declare_err"] = jdc.count("Received: DeclareMiningJobError")
out["jdc_custom_ok"] = jdc.count("Received: SetCustomMiningJobSuccess")
out["jdc_custom_err"] = jdc.count("Received: SetCustomMiningJobError")
out["jdc_missing_txs"] = jdc.count("Received: ProvideMissingTransactions")
out["jdc_blocks"] = jdc.count("Block Found")
out["jdc_fallback"] = len(re.findall(r"preparing fallback|fallback triggered|requested fallback|Starting fallback", jdc))
# The JDC checks each SetCustomMiningJob.Success against its own chain tip; a job the JDS
# answered after a new block is set on the pool but stale for the JDC (logged, not fatal).
out["jdc_custom_stale"] = jdc.count("SetCustomMiningJob.Success validation failed")
# The pool's acknowledgements as the JDC received them.
out["jdc_acked"] = sum(int(n) for n in re.findall(
    r"upstream_message_handler: Received: SubmitSharesSuccess\(.*?new_submits_accepted_count=(\d+)", jdc))
out["jdc_share_errors"] = jdc.count("upstream_message_handler: Received: SubmitSharesError")
out["pool_custom_ok"] = pool_log.count("sv2: declared job accepted")
out["pool_custom_refused"] = pool_log.count("sv2: declared job refused")
# The pool's share verdicts on SV2 channels (the JDC's extended channel).
accepted = 0
rejected = collections.Counter()
submitted = set()
for e in events("pool"):
    if e["kind"] == "share_result" and e.get("channel") is not None:
        v = e["verdict"]
        if v == "accepted":
            accepted += 1
        else:
            rejected[v["rejected"] if isinstance(v, dict) else str(v)] += 1
    elif e["kind"] == "block_submitted":
        submitted.add(e["hash"])
out["pool_accepted"] = accepted
out["pool_rejected_bad"] = sum(n for r, n in rejected.items() if r != "stale")
out["pool_rejections"] = ",".join(f"{r}={n}" for r, n in sorted(rejected.items())) or "none"
out["pool_blocks"] = len(submitted)
out["pool_rejected"] = sum(rejected.values())
jds_submitted = {e["hash"] for e in events("jds") if e["kind"] == "block_submitted"}
tips = {e["hash"] for e in events("simnet")
        if e["kind"] == "tip_changed" and e.get("source") == "submitted"}
found = {e["hash"] for e in events("fleet") if e["kind"] == "share_sent" and e.get("hash")}
out["tips"] = len(tips)
out["device_tips"] = len(found & tips)
out["pool_device_tips"] = len(found & submitted & tips)
# A block the pool or the JDS rebuilt from a declared job must be the very block a device found
# (the same hash): a new tip, or one that lost a race at its height to another device's block
# (the node then answers the copy "duplicate" and keeps the other tip). Anything else is a
# different block, rebuilt wrong.
out["pool_not_tip"] = len(submitted - (found | tips))
out["jds_not_tip"] = len(jds_submitted - (found | tips))
out["jds_tips"] = len(jds_submitted & tips)
print(" ".join(f"{k}={v}" for k, v in out.items()))
EOF
) || fail "the logs and events do not parse"
say "$summary"
declare -A r
for kv in $summary; do r[${kv%%=*}]=${kv#*=}; done
refusals() { grep -h -E "$1" "$work/$2" | tail -n 3; }
[ "${r[declared]}" -ge 0 ] || fail "the jds printed no summary line"
[ "${r[jdc_declare_err]}" -eq 0 ] && [ "${r[refused]}" -eq 0 ] \
    || fail "the jds refused declared jobs: $(refusals 'declared job refused' jds.err) $(refusals 'DeclareMiningJobError' jdc.clean.log)"
[ "${r[declared]}" -ge 1 ] && [ "${r[jdc_declare_ok]}" -ge 1 ] || fail "no job declared (DeclareMiningJob.Success)"
[ "${r[jdc_custom_err]}" -eq 0 ] && [ "${r[pool_custom_refused]}" -eq 0 ] \
    || fail "the pool refused custom jobs: $(refusals 'declared job refused' pool.err) $(refusals 'SetCustomMiningJobError' jdc.clean.log)"
[ "${r[jdc_custom_ok]}" -ge 1 ] && [ "${r[pool_custom_ok]}" -ge 1 ] || fail "no custom job set on the pool (SetCustomMiningJob.Success)"
[ "${r[jdc_fallback]}" -eq 0 ] || fail "jd_client_sv2 fell back: $(grep -m 3 -B 2 -E 'preparing fallback|fallback triggered|requested fallback|Starting fallback' "$work/jdc.clean.log")"
[ "${r[pool_accepted]}" -ge 1 ] || fail "the pool accepted no share from the JDC"
[ "${r[pool_rejected_bad]}" -eq 0 ] || fail "the pool rejected the JDC's shares: ${r[pool_rejections]}"
[ "${r[jdc_acked]}" -ge 1 ] && [ "${r[jdc_acked]}" -le "${r[pool_accepted]}" ] \
    || fail "the JDC saw ${r[jdc_acked]} shares acknowledged, the pool accepted ${r[pool_accepted]}"
[ "${r[jdc_share_errors]}" -eq "${r[pool_rejected]}" ] \
    || fail "the JDC saw ${r[jdc_share_errors]} share errors, the pool rejected ${r[pool_rejected]}"
[ "$blocks_found" -ge 1 ] || fail "no device found a block"
[ "${r[pool_not_tip]}" -eq 0 ] || fail "${r[pool_not_tip]} blocks the pool recorded from declared jobs are not blocks the devices found"
[ "${r[jds_not_tip]}" -eq 0 ] || fail "${r[jds_not_tip]} blocks the jds rebuilt from PushSolution are not blocks the devices found: $(grep -E 'block submitted|PushSolution' "$work/jds.err" | tail -n 3)"
[ "${r[device_tips]}" -ge 1 ] || fail "no block a device found became simnet's tip"

# Not failed on, but said: device blocks that became tips without the pool submitting them. The
# JDC sends a block to simnet's TDP and its share to the pool at once; when the pool hears of the
# new tip (from its own TDP connection) first, it judges that very share stale-share. Blocks found
# before the first custom job was set reach simnet from the JDC alone.
missed=$(( r[device_tips] - r[pool_device_tips] ))
[ "$missed" -eq 0 ] || say "NOTE: $missed of the ${r[device_tips]} device blocks on simnet were not submitted by the pool" \
    "(pool share verdicts: ${r[pool_rejections]} rejected)"
say "PASS: $DEVICES SV2 devices through jd_client_sv2 $JD_CLIENT_SV2_VERSION on stratumlab's" \
    "pool + JDS: ${r[declared]} jobs declared (${r[txs_requested]} transactions asked for)," \
    "${r[pool_custom_ok]} custom jobs set, ${r[pool_accepted]} shares accepted by the pool," \
    "$blocks_found blocks found, ${r[device_tips]} new tips on simnet; PushSolution: ${r[pushed]}," \
    "rebuilt by the JDS into ${r[jds_tips]} of those tips; the pool submitted ${r[pool_blocks]}"
