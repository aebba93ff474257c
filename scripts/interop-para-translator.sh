#!/usr/bin/env bash
# Interop: a real third-party SV1 miner, `para miner` (crates.io, pinned, as
# scripts/install-tools.sh para installs it), and stratumlab's SV1 devices (`stratumlab fleet`) mine
# through stratumlab's translator (`stratumlab translator`) into stratumlab's SV2 pool
# (`stratumlab pool --sv2-listen`), which takes its templates from simnet's Template Provider.
# Passes when
#   - para completes its handshake with the translator (subscribe, authorize, configure with
#     version rolling) and the translator accepts its shares (para's log: submitted
#     successfully), with none refused but stale (a block supersedes the job under a share in
#     flight, as for the fleet's devices),
#   - every fleet device is ready and has shares accepted, none rejected but stale,
#   - the pool accepts shares the translator forwards (the pool's events, on the translator's one
#     extended channel) and rejects none but stale, and the translator's events agree: every
#     share it forwarded got the pool's verdict.
# Also reported: how many of para's shares met the pool's target and were accepted by the pool
# (matched by nonce).
#
# Everything listens on 127.0.0.1 only; every process started here is stopped on exit; each
# wait is bounded. Exits non-zero on anything missing; never skips.
#
# Environment:
#   STRATUMLAB_TOOLS_DIR  where pinned third-party tools are installed
#                         [default: ${XDG_CACHE_HOME:-$HOME/.cache}/stratumlab-ci]
#   INTEROP_KEEP=1        keep the work directory (logs, store, events) for inspection
#   MINE_SECONDS          how long para and the fleet mine, in seconds [default: 20]
# Needs: cargo, python3.
set -euo pipefail
cd "$(dirname "$0")/.."

PAYOUT=bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080
MINE_SECONDS=${MINE_SECONDS:-20}
DEVICES=5
# Each fleet device hashes a fifth of it: 50 kH/s, what the translator counts per device until
# vardiff has measured it. para hashes as fast as one core lets it (about 1 MH/s), and vardiff
# raises its difficulty from the same start.
BUDGET=250kH/s
DEVICE_RATE=50kH/s
# A share every ~2 s for a 50 kH/s device (50e3 * 2 / 2^32).
START_DIFFICULTY=0.000023

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

script=interop-para-translator
log_files=(simnet.out simnet.err pool.out pool.err translator.out translator.err para.out fleet.err fleet.json)
# shellcheck source=scripts/interop-common.sh
source scripts/interop-common.sh

# 1. The pinned miner.
install_pinned para "$PARA_VERSION"
para=$pinned_bin

# 2. stratumlab (dev profile: CI has just built it for the tests).
cargo build --quiet -p cli
stratumlab="$target_dir/debug/stratumlab"

# 3. simnet with its Template Provider; no blocks of the rest of the network; a fee-driven
# template every 2 s, so jobs flow; network difficulty 0.002 (a block every ~8.6M hashes).
timeout --signal=TERM 300 "$stratumlab" simnet --tdp-listen 127.0.0.1:0 --network-difficulty 0.002 \
    --block-interval 0 --template-interval 2s --events "$work/simnet.ev" \
    --authority-key-file "$work/authority.key" >"$work/simnet.out" 2>"$work/simnet.err" &
pids+=($!)
tdp_addr() { sed -n 's/^tdp listening on \([0-9.]*:[0-9]*\).*/\1/p' "$work/simnet.out" | head -n1; }
have_tdp() { [ -n "$(tdp_addr)" ]; }
wait_for 60 have_tdp || fail "simnet did not print 'tdp listening on ADDR'"
tdp=$(tdp_addr)
tdp_key=$(sed -n 's/^tdp authority public key \([1-9A-HJ-NP-Za-km-z]*\).*/\1/p' "$work/simnet.out" | head -n1)
[ -n "$tdp_key" ] || fail "simnet did not print its TDP authority public key"

# 4. Our SV2 pool on simnet's Template Provider; two forwarded shares a second on the
# translator's channel, so that para's share of them is not left to luck.
timeout --signal=TERM 300 "$stratumlab" pool --sv2-listen 127.0.0.1:0 --tp "$tdp" \
    --tp-authority-key "$tdp_key" --authority-key-file "$work/authority.key" \
    --http-listen 127.0.0.1:0 --payout-address "$PAYOUT" \
    --shares-per-minute 120 --store "$work/pool.sqlite" --events "$work/pool.ev" \
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

# 5. Our translator in front of it. It prints its SV1 address once the upstream channel is open.
timeout --signal=TERM 300 "$stratumlab" translator --listen 127.0.0.1:0 --upstream "$pool_addr" \
    --upstream-authority-key "$pool_key" --user-identity stratumlab-interop \
    --device-hash-rate "$DEVICE_RATE" --start-difficulty "$START_DIFFICULTY" \
    --shares-per-minute 30 --events "$work/translator.ev" \
    >"$work/translator.out" 2>"$work/translator.err" &
pids+=($!)
translator_pid=$!
sv1_addr() { sed -n 's/^sv1 listening on \([0-9.]*:[0-9]*\).*/\1/p' "$work/translator.out" | head -n1; }
translator_up() {
    kill -0 "$translator_pid" 2>/dev/null || fail "the translator exited early"
    [ -n "$(sv1_addr)" ]
}
wait_for 60 translator_up || fail "the translator did not print 'sv1 listening on ADDR'"
sv1=$(sv1_addr)
say "translator at $sv1, upstream our pool at $pool_addr on simnet's TDP $tdp"

# 6. para (version rolling, its default; its own log of every submit's outcome) and the fleet
# side by side.
say "mining for ${MINE_SECONDS}s: para and $DEVICES fleet devices"
RUST_LOG=info timeout --signal=INT "$MINE_SECONDS" "$para" miner "$sv1" \
    --username "$PAYOUT.para" --cpu-cores 1 >"$work/para.out" 2>&1 &
para_pid=$!
pids+=("$para_pid")
"$stratumlab" fleet --pool "$sv1" --profile asic --devices "$DEVICES" --hash-budget "$BUDGET" \
    --first-device-id 100 --duration "${MINE_SECONDS}s" --drain 5s --json \
    >"$work/fleet.json" 2>"$work/fleet.err" || fail "the fleet failed: $(tail -n 3 "$work/fleet.err")"
# para ends at its timeout (SIGINT) and prints the shares it found.
wait_for 30 bash -c "! kill -0 $para_pid 2>/dev/null" || fail "para did not stop on SIGINT"

# 7. para's view: shares accepted by the translator, none refused but stale (21).
strip() { sed 's/\x1b\[[0-9;]*[A-Za-z]//g' "$work/para.out"; }
para_ok=$(strip | grep -c 'submitted successfully' || true)
para_failed=$(strip | grep -c 'Failed to submit share' || true)
para_stale=$(strip | grep 'Failed to submit share' | grep -c ': 21: ' || true)
para_rolled=$(strip | grep -c '"version_bits": "[0-9a-f]*[1-9a-f][0-9a-f]*"' || true)
say "para: $para_ok shares accepted by the translator, $para_failed refused ($para_stale stale), $para_rolled with rolled version bits"
[ "$para_ok" -gt 0 ] || fail "the translator accepted no share from para"
[ "$para_failed" -eq "$para_stale" ] || fail "the translator refused $para_failed of para's shares, $para_stale of them stale: $(strip | grep 'Failed to submit share' | head -n 3)"
[ "$para_rolled" -gt 0 ] || fail "para never submitted rolled version bits through the translator"

# 8. The fleet's view.
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($1)" "$work/fleet.json"; }
[ "$(field 'd["ready"]')" -eq "$DEVICES" ] || fail "not every device was ready: $(cat "$work/fleet.json")"
[ "$(field 'd["protocol_errors"]')" -eq 0 ] || fail "fleet protocol errors: $(cat "$work/fleet.json")"
[ "$(field 'd["shares"]["accepted"]')" -gt 0 ] || fail "the translator accepted no share from the fleet"
other=$(field 'sum(v for k, v in d["shares"]["rejected_by_reason"].items() if k != "stale")')
[ "$other" -eq 0 ] || fail "fleet shares rejected for reasons other than stale: $(field 'd["shares"]')"
say "fleet: $(field 'd["shares"]')"

# 9. Stop everything (the pool and the translator write their events on SIGTERM); then the
# pool's verdicts on the forwarded shares, and the translator's record of them.
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()
for ev in pool translator; do
    "$stratumlab" events dump "$work/$ev.ev" >"$work/$ev.jsonl" || fail "$ev: events do not read"
done
strip >"$work/para.txt"
summary=$(python3 - "$work" <<'EOF'
import collections, json, re, sys
work = sys.argv[1]
def events(name):
    with open(f"{work}/{name}.jsonl") as f:
        return [json.loads(line) for line in f]
accepted = set()
rejected = collections.Counter()
channels = set()
for e in events("pool"):
    if e["kind"] == "share_result" and e.get("channel") is not None:
        channels.add(e["channel"])
        v = e["verdict"]
        if v == "accepted":
            accepted.add(e["nonce"])
        else:
            rejected[v["rejected"] if isinstance(v, dict) else str(v)] += 1
sent = set()
answered = set()
acked = 0
for e in events("translator"):
    if e["kind"] == "share_sent":
        sent.add(e["seq"])
    elif e["kind"] == "share_result" and e.get("perspective") == "received":
        answered.add(e["seq"])
        acked += e["verdict"] == "accepted"
# para prints the shares it found as a JSON array when it stops; nonces as 8 hex digits. Its
# log lines may come after the array (CI once saw "Extra data"), and may begin with "[" too: the
# array is the last line-initial "[" that decodes to a list, whatever follows it.
text = open(f"{work}/para.txt").read()
para, end = [], len(text)
while (start := text.rfind("\n[", 0, end)) >= 0:
    try:
        found, _ = json.JSONDecoder().raw_decode(text, start + 1)
    except ValueError:
        found = None
    if isinstance(found, list):
        para = found
        break
    end = start
para_nonces = {int(s["nonce"], 16) for s in para}
bad = sum(n for r, n in rejected.items() if r != "stale")
print(len(accepted), bad, len(channels), len(sent), acked, len(sent - answered),
      len(para), len(para_nonces & accepted), dict(rejected) or "none")
EOF
) || fail "the events do not parse"
read -r pool_accepted bad channels forwarded acked unanswered para_found para_upstream rejections <<<"$summary"
say "pool: $pool_accepted shares accepted on $channels channel(s), rejected: $rejections;" \
    "translator: $forwarded forwarded, $acked acknowledged, $unanswered unanswered;" \
    "para: $para_found shares found, $para_upstream of them accepted by the pool"
[ "$channels" -eq 1 ] || fail "the pool judged shares on $channels channels, want the translator's one"
[ "$pool_accepted" -ge 1 ] || fail "the pool accepted no share forwarded by the translator"
[ "$bad" -eq 0 ] || fail "the pool rejected forwarded shares for reasons other than stale: $rejections"
[ "$acked" -eq "$pool_accepted" ] || fail "the translator saw $acked shares accepted, the pool accepted $pool_accepted"
[ "$unanswered" -eq 0 ] || fail "$unanswered forwarded shares got no verdict from the pool"
[ "$para_found" -ge "$para_ok" ] || fail "para printed $para_found shares but logged $para_ok accepted"

say "PASS: para $PARA_VERSION ($para_ok shares accepted) and $DEVICES fleet devices through" \
    "stratumlab's translator into stratumlab's SV2 pool: $pool_accepted forwarded shares accepted" \
    "($para_upstream of them para's)"
