#!/usr/bin/env bash
# Benchmark: stratumlab's translator (`stratumlab translator`) against the SV2 reference
# translator (translator_sv2 0.6.0, pinned; aggregated, or a channel per device: BENCH_CHANNELS),
# each with the same SV1 device fleet at the same fixed offered share load, on the same upstream:
# stratumlab's SV2 pool on simnet's Template Provider (a fresh simnet and pool per run, so that
# each run's pool events are complete).
#
# Placement (taskset): the translator alone on one core (BENCH_CPUS, default cpu 1); simnet, the
# pool and the fleet (one runtime thread) on the other (cpu 0). simnet finds no blocks (network
# difficulty 10^6, no blocks of the rest of the network) and makes a fee-driven template every
# 10 s, so job fan-outs to every device are part of the load.
#
# The load: N SV1 devices (`stratumlab fleet`, asic profile: version rolling), the fleet's hash
# budget split evenly; both translators are told the devices' real hash rate and the same share
# rate per device (ours: --device-hash-rate, --start-difficulty/--min-difficulty computed from
# it, --shares-per-minute; translator_sv2: min_individual_miner_hashrate, shares_per_minute;
# vardiff on in both, as deployed). Upstream, the pool targets BENCH_UPSTREAM_SPM shares per
# minute on the translator's one extended channel (the shares meeting that target are forwarded).
#
# Measured over a fixed window after warm-up, per translator:
#   - share latency as the devices see it: the fleet's share_sent -> share_result (received),
#     for shares sent in the window. Everything is on loopback with no link emulation, so this is
#     the latency the translator adds: the device's write, the kernel's loopback, the translator
#     reading, parsing and checking the share (SHA-256d) and writing the verdict, the device
#     reading it; for a share the translator answers only after the pool's verdict it also holds
#     the upstream leg (Noise, the pool's check and reply). Reported for all shares, and apart for
#     the shares answered locally (below the pool's target) and the forwarded ones (the pool
#     judged a share with the same nonce: its events), so a translator that waits for the pool
#     shows in the "fwd" columns;
#   - the same latency on the wire at the translator's SV1 port (scripts/wire-latency.py, needs
#     root): submit packet -> answer packet, both timestamped by the kernel on loopback. This is
#     the translator's own part alone; the devices' figure above also holds the fleet's
#     scheduling on a core it shares with the pool and simnet, the same for both translators;
#   - the floor (row `floor`, with the capture): the fleet's minimal SV1 test pool
#     (crates/fleet/examples/sv1_floor_pool.rs: handshake, one job at a time, each share checked
#     and answered at once) pinned where the translator runs, the same devices and load. Its
#     latency on the wire is what this machine costs anything that answers shares (waking an
#     idle core, loopback); the ratios are also given above it (translator - floor);
#   - job fan-out: for each template the pool made in the window, from the pool's first
#     job_sent of it to the last device's first job_received of it (the fleet reads the
#     template's fingerprint off the coinbase), counted when every device received it; the
#     slowest in the window is reported. It holds the upstream hop, the translator's fan-out
#     and socket writes, and the fleet reading every notify on the load's core (the same for
#     both translators);
#   - CPU-microseconds per share: the translator's utime + stime (/proc/PID/stat, every thread)
#     over the window / the verdicts the devices received in the window;
#   - RSS per downstream device: (VmRSS at the end of the window, N devices connected - VmRSS
#     before the fleet connected, upstream channel open) / N;
#   - the generator's (fleet's) CPU: at or above 90% of its core the load is generator-bound and
#     the row says so; others%: other processes on the translator's core (the machine may be
#     shared).
# Then a table and the ratios ours / reference (below 1: ours is lower) from the same run.
# translator_sv2 runs at its shipped log level (info); the full run adds it at RUST_LOG=warn.
#
# Everything listens on 127.0.0.1 only. Every process started here is stopped on exit; each wait
# is bounded. Not part of .ci/run (about 5 minutes; BENCH_QUICK=1 about 1.5).
#
# Environment:
#   BENCH_QUICK=1          100 devices, 100 shares/s, 8 s warm-up, 15 s window, no RUST_LOG=warn
#                          row [default: 1000 devices, 300 shares/s, 20 s, 60 s]
#   BENCH_DEVICES          devices [default: 1000]
#   BENCH_SHARES_PER_S     total offered shares per second [default: 300]
#   BENCH_HASH_BUDGET      the fleet's hashes per second (sets the share difficulty, not the
#                          share rate) [default: 1MH/s]
#   BENCH_UPSTREAM_SPM     shares per minute the pool asks of the translator (of its one
#                          channel, or shared among the per-device channels) [default: 600]
#   BENCH_CHANNELS         aggregated, or per-device: an extended channel per device on the one
#                          connection, in both translators (ours: --channels per-device;
#                          translator_sv2: aggregate_channels = false); the pool lets the
#                          connection open a channel per device and asks each channel for
#                          BENCH_UPSTREAM_SPM / devices [default: aggregated]
#   BENCH_WARMUP, BENCH_WINDOW   override the warm-up and the window (`20s`)
#   BENCH_CPUS="1 0"       the core for the translator and the core for everything else
#   BENCH_WIRE=0           no capture on the wire
#   BENCH_ROWS="ours floor"   the rows to run, of floor, ours, translator_sv2 and
#                          translator_sv2-warn [default: all; BENCH_QUICK=1: no translator_sv2-warn]
#   BENCH_REPEAT=N         N repetitions of every row, alternating which translator goes first;
#                          ratios within each, then their median [default: 1]
#   BENCH_BUILD=0          use target/release/stratumlab as it is (no cargo build)
#   STRATUMLAB_TOOLS_DIR   where pinned third-party tools are installed
#   INTEROP_KEEP=1         keep the work directory (logs, configs, events)
# Needs: cargo, python3, taskset; translator_sv2 installed by scripts/install-tools.sh translator_sv2
# (or here, with Cap'n Proto).
set -euo pipefail
cd "$(dirname "$0")/.."

PAYOUT=bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080

QUICK=${BENCH_QUICK:-0}
if [ "$QUICK" = 1 ]; then
    DEVICES=${BENCH_DEVICES:-100}
    SHARES_PER_S=${BENCH_SHARES_PER_S:-100}
    WARMUP=${BENCH_WARMUP:-8s}
    WINDOW=${BENCH_WINDOW:-15s}
else
    DEVICES=${BENCH_DEVICES:-1000}
    SHARES_PER_S=${BENCH_SHARES_PER_S:-300}
    WARMUP=${BENCH_WARMUP:-20s}
    WINDOW=${BENCH_WINDOW:-60s}
fi
HASH_BUDGET=${BENCH_HASH_BUDGET:-1MH/s}
UPSTREAM_SPM=${BENCH_UPSTREAM_SPM:-600}
CHANNELS=${BENCH_CHANNELS:-aggregated}
case "$CHANNELS" in
    aggregated) AGGREGATE=true; POOL_SPM=$UPSTREAM_SPM ;;
    per-device) AGGREGATE=false; POOL_SPM=$(python3 -c "print($UPSTREAM_SPM / $DEVICES)") ;;
    *) echo "BENCH_CHANNELS: aggregated or per-device, not $CHANNELS" >&2; exit 2 ;;
esac
read -r TRANSLATOR_CPU LOAD_CPU <<<"${BENCH_CPUS:-1 0}"
if [ "$QUICK" = 1 ]; then
    ROWS=${BENCH_ROWS:-floor ours translator_sv2}
else
    ROWS=${BENCH_ROWS:-floor ours translator_sv2 translator_sv2-warn}
fi
for r in $ROWS; do
    case "$r" in
        floor | ours | translator_sv2 | translator_sv2-warn) ;;
        *) echo "BENCH_ROWS: floor, ours, translator_sv2 or translator_sv2-warn, not $r" >&2; exit 2 ;;
    esac
done

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

script=bench-translator
log_files=(rows.jsonl)
# shellcheck source=scripts/interop-common.sh
source scripts/interop-common.sh

command -v taskset >/dev/null || fail "taskset not found (util-linux)"
[ "$(nproc --all)" -ge 2 ] || fail "needs two cores: the translator on one, the load on the other"

secs() { python3 -c 'import re,sys
total = 0.0
for n, u in re.findall(r"([0-9.]+)(ms|s|m|h)", sys.argv[1]):
    total += float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u]
print(total)' "$1"; }
WARMUP_S=$(secs "$WARMUP")
WINDOW_S=$(secs "$WINDOW")
RATE_HS=$(python3 -c 'import re,sys
m = re.fullmatch(r"([0-9.e+]+)\s*([kMGTP]?)(H/s)?", sys.argv[1])
m or sys.exit("BENCH_HASH_BUDGET: write it as 1MH/s, 500kH/s or 1e6")
print(float(m[1]) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}[m[2]])' "$HASH_BUDGET")
# Per device: its hash rate, shares per minute, and the difficulty giving that rate.
PER_DEVICE=$(python3 -c "print($RATE_HS / $DEVICES)")
SPM=$(python3 -c "print($SHARES_PER_S * 60 / $DEVICES)")
DIFFICULTY=$(python3 -c "print($PER_DEVICE * 60 / $SPM / 2**32)")
MIN_DIFFICULTY=$(python3 -c "print($DIFFICULTY / 16)")

# 1. The pinned reference translator, installed as the interop script installs it.
install_pinned translator_sv2 "$TRANSLATOR_SV2_VERSION"
tproxy_bin=$pinned_bin

# 2. stratumlab, optimized: the translator is what is measured, and the load must not limit it.
stratumlab="$target_dir/release/stratumlab"
if [ "${BENCH_BUILD:-1}" = 1 ] || [ ! -x "$stratumlab" ]; then
    cargo build --quiet --release -p cli
fi
floor_bin="$target_dir/release/examples/sv1_floor_pool"
if [ "${BENCH_BUILD:-1}" = 1 ] || [ ! -x "$floor_bin" ]; then
    cargo build --quiet --release -p fleet --example sv1_floor_pool
fi

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Stops this run's processes (TERM, then KILL after 5 s) and forgets them.
stop_all() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    pids=()
}

# The translator runs under `timeout` (a bound even if this script is killed), which forks it:
# its process, the one measured, is the wrapper's child.
# measured_child WRAPPER_PID NAME: its child running the program NAME (comm, 15 characters).
measured_child() {
    local wrapper=$1 name=${2:0:15} c
    for _ in $(seq 100); do
        for c in $(pgrep -P "$wrapper" || true); do
            [ "$(cat "/proc/$c/comm" 2>/dev/null)" = "$name" ] && { echo "$c"; return; }
        done
        sleep 0.1
    done
    fail "no $name process under $wrapper"
}

# One measurement: run_one LABEL KIND [ENV...]; KIND is ours or translator_sv2; ENV (NAME=VALUE)
# is the translator's environment. Appends a JSON line to $work/rows.jsonl.
run_one() {
    local label=$1 kind=$2
    shift 2
    local tenv=("$@")
    local dir="$work/$label"
    mkdir -p "$dir"
    log_files+=("$label/simnet.err" "$label/pool.err" "$label/translator.out"
        "$label/translator.err" "$label/fleet.err")

    # The upstream: simnet and our SV2 pool, on the load's core.
    taskset -c "$LOAD_CPU" timeout --signal=TERM 900 "$stratumlab" simnet --tdp-listen 127.0.0.1:0 \
        --network-difficulty 1000000 --block-interval 0 --template-interval 10s --seed 7 \
        --authority-key-file "$dir/authority.key" >"$dir/simnet.out" 2>"$dir/simnet.err" &
    pids+=($!)
    tdp_addr() { sed -n 's/^tdp listening on \([0-9.]*:[0-9]*\).*/\1/p' "$dir/simnet.out" | head -n1; }
    have_tdp() { [ -n "$(tdp_addr)" ]; }
    wait_for 60 have_tdp || fail "$label: simnet did not print 'tdp listening on ADDR'"
    local tdp tdp_key
    tdp=$(tdp_addr)
    tdp_key=$(sed -n 's/^tdp authority public key \([1-9A-HJ-NP-Za-km-z]*\).*/\1/p' "$dir/simnet.out" | head -n1)
    taskset -c "$LOAD_CPU" timeout --signal=TERM 900 "$stratumlab" pool --sv2-listen 127.0.0.1:0 \
        --tp "$tdp" --tp-authority-key "$tdp_key" --authority-key-file "$dir/authority.key" \
        --payout-address "$PAYOUT" \
        --shares-per-minute "$POOL_SPM" --sv2-max-channels "$DEVICES" --durability off --store "$dir/pool.sqlite" \
        --events "$dir/pool.ev" >"$dir/pool.out" 2>"$dir/pool.err" &
    local pool_pid=$!
    pids+=("$pool_pid")
    pool_line() { sed -n "s/^$1 \\([^ ]*\\).*/\\1/p" "$dir/pool.out" | head -n1; }
    pool_up() {
        kill -0 "$pool_pid" 2>/dev/null || fail "$label: the pool exited early"
        [ -n "$(pool_line 'sv2 listening on')" ] && [ -n "$(pool_line 'sv2 authority public key')" ]
    }
    wait_for 60 pool_up || fail "$label: the pool did not print its SV2 address and authority key"
    local pool_addr pool_key
    pool_addr=$(pool_line 'sv2 listening on')
    pool_key=$(pool_line 'sv2 authority public key')

    # The translator, alone on its core.
    local translator_pid sv1
    if [ "$kind" = floor ]; then
        # No translator: the fleet's minimal SV1 test pool where the translator would run, a
        # new job every 10 s as simnet's templates come (the upstream above idles).
        taskset -c "$TRANSLATOR_CPU" timeout --signal=TERM 900 "$floor_bin" "$DIFFICULTY" 10 \
            >"$dir/translator.out" 2>"$dir/translator.err" &
        pids+=($!)
        translator_pid=$(measured_child $! "$(basename "$floor_bin")")
        floor_up() {
            kill -0 "$translator_pid" 2>/dev/null || fail "$label: the floor pool exited early"
            grep -q '^sv1 listening on' "$dir/translator.out"
        }
        wait_for 60 floor_up || fail "$label: the floor pool did not print 'sv1 listening on ADDR'"
        sv1=$(sed -n 's/^sv1 listening on \([0-9.]*:[0-9]*\).*/\1/p' "$dir/translator.out" | head -n1)
    elif [ "$kind" = ours ]; then
        env "${tenv[@]}" taskset -c "$TRANSLATOR_CPU" timeout --signal=TERM 900 "$stratumlab" translator \
            --listen 127.0.0.1:0 --upstream "$pool_addr" --upstream-authority-key "$pool_key" \
            --user-identity "bench-$label" --device-hash-rate "$PER_DEVICE" \
            --start-difficulty "$DIFFICULTY" --min-difficulty "$MIN_DIFFICULTY" \
            --shares-per-minute "$SPM" --channels "$CHANNELS" \
            >"$dir/translator.out" 2>"$dir/translator.err" &
        pids+=($!)
        translator_pid=$(measured_child $! "$(basename "$stratumlab")")
        sv1_addr() { sed -n 's/^sv1 listening on \([0-9.]*:[0-9]*\).*/\1/p' "$dir/translator.out" | head -n1; }
        ours_up() {
            kill -0 "$translator_pid" 2>/dev/null || fail "$label: our translator exited early"
            [ -n "$(sv1_addr)" ]
        }
        wait_for 60 ours_up || fail "$label: our translator did not print 'sv1 listening on ADDR'"
        sv1=$(sv1_addr)
    else
        local port
        port=$(free_port)
        # Aggregated: every device on one extended channel, 2 bytes of per-miner index above the
        # devices' 2 bytes of extranonce2 (4 in all: what our pool lets a channel roll); or a
        # channel per device (BENCH_CHANNELS). No monitoring server, no telemetry scan, no
        # extensions.
        cat >"$dir/translator.toml" <<EOF
downstream_address = "127.0.0.1"
downstream_port = $port
max_supported_version = 2
min_supported_version = 2
downstream_extranonce2_size = 2
verify_payout = false
aggregate_channels = $AGGREGATE
supported_extensions = []
required_extensions = []

[downstream_difficulty_config]
min_individual_miner_hashrate = $PER_DEVICE
shares_per_minute = $SPM
enable_vardiff = true
job_keepalive_interval_secs = 60

[[upstreams]]
address = "${pool_addr%:*}"
port = ${pool_addr##*:}
authority_pubkey = "$pool_key"
user_identity = "bench-$label"
EOF
        (
            for v in $(compgen -e | grep '^TPROXY__' || true); do unset "$v"; done
            exec env NO_COLOR=1 "${tenv[@]}" taskset -c "$TRANSLATOR_CPU" \
                timeout --signal=TERM 900 "$tproxy_bin" -c "$dir/translator.toml"
        ) >"$dir/translator.out" 2>"$dir/translator.err" &
        pids+=($!)
        translator_pid=$(measured_child $! "$(basename "$tproxy_bin")")
        # At RUST_LOG=warn it says nothing when ready: then its listening port is the sign.
        ref_up() {
            kill -0 "$translator_pid" 2>/dev/null || fail "$label: translator_sv2 exited early"
            grep -q "listening on 127.0.0.1:$port" "$dir/translator.out" 2>/dev/null \
                || python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$port" 2>/dev/null
        }
        wait_for 60 ref_up || fail "$label: translator_sv2 did not listen on 127.0.0.1:$port"
        sv1=127.0.0.1:$port
    fi
    # Settled with its upstream and no device: the memory baseline.
    sleep 2
    local rss0
    rss0=$(awk '/^VmRSS/ {print $2}' "/proc/$translator_pid/status")

    local total_s
    total_s=$(python3 -c "print(int($WARMUP_S + $WINDOW_S + 3))")
    say "$label: $DEVICES devices at $PER_DEVICE H/s, $SHARES_PER_S shares/s offered" \
        "(difficulty $DIFFICULTY), through $sv1 to the pool at $pool_addr"
    taskset -c "$LOAD_CPU" "$stratumlab" fleet --pool "$sv1" --devices "$DEVICES" \
        --hash-budget "$RATE_HS" --threads 1 --duration "${total_s}s" --drain 3s --json \
        --events "$dir/fleet.ev" >"$dir/fleet.json" 2>"$dir/fleet.err" &
    local fleet_pid=$!
    pids+=("$fleet_pid")

    # The same window on the wire: the translator's own share latency (scripts/wire-latency.py).
    local wire_pid=
    if [ "${BENCH_WIRE:-1}" = 1 ]; then
        taskset -c "$LOAD_CPU" python3 scripts/wire-latency.py "${sv1##*:}" "$WARMUP_S" "$WINDOW_S" \
            >"$dir/wire.json" 2>"$dir/wire.err" &
        wire_pid=$!
        log_files+=("$label/wire.err")
    fi

    # The window: CPU of both processes, the cores, the translator's RSS at the end, and
    # CLOCK_MONOTONIC (the events' clock) at its ends.
    python3 - "$translator_pid" "$fleet_pid" "$WARMUP_S" "$WINDOW_S" >"$dir/window.json" <<'EOF'
import json, os, sys, time
tr, fleet, warmup, window = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
tck = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    # utime and stime are fields 14 and 15; the command name may hold spaces, so split after ')'.
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / tck
def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
def cores():
    # Busy seconds per core (all but idle and iowait): what else ran on the translator's core.
    out = {}
    for line in open("/proc/stat"):
        f = line.split()
        if f[0].startswith("cpu") and f[0] != "cpu":
            v = [int(x) for x in f[1:]]
            out[f[0][3:]] = (sum(v[:8]) - v[3] - v[4]) / tck
    return out
time.sleep(warmup)
t0, p0, f0, c0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC), cpu(tr), cpu(fleet), cores()
time.sleep(window)
t1, p1, f1, c1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC), cpu(tr), cpu(fleet), cores()
print(json.dumps({"t0_ns": t0, "t1_ns": t1, "translator_cpu_s": p1 - p0, "fleet_cpu_s": f1 - f0,
                  "rss_kib": rss_kib(tr), "core_busy_s": {k: c1[k] - c0[k] for k in c1},
                  "loadavg_1m": float(open("/proc/loadavg").read().split()[0])}))
EOF
    wait "$fleet_pid" || fail "$label: the fleet failed: $(tail -n 3 "$dir/fleet.err")"
    if [ -n "$wire_pid" ] && ! wait "$wire_pid"; then
        say "$label: no wire latency: $(tail -n 1 "$dir/wire.err")"
        rm -f "$dir/wire.json"
    fi
    stop_all
    "$stratumlab" events dump "$dir/fleet.ev" >"$dir/fleet.jsonl" || fail "$label: fleet events do not read"
    "$stratumlab" events dump "$dir/pool.ev" >"$dir/pool.jsonl" || fail "$label: pool events do not read"

    python3 - "$label" "$kind" "$dir" "$TRANSLATOR_CPU" "$rss0" "$DEVICES" "$SHARES_PER_S" \
        >>"$work/rows.jsonl" <<'EOF'
import json, sys
label, kind, d, core, rss0, devices, offered = sys.argv[1:8]
rss0, devices, offered = int(rss0), int(devices), float(offered)
w = json.load(open(f"{d}/window.json"))
rep = json.load(open(f"{d}/fleet.json"))
t0, t1 = w["t0_ns"], w["t1_ns"]
# What reached the pool: its verdicts, by nonce (a device's nonce is the forwarded share's).
upstream = set()
upstream_in_window = upstream_accepted = 0
for line in open(f"{d}/pool.jsonl"):
    e = json.loads(line)
    if e.get("kind") == "share_result" and e.get("channel") is not None:
        upstream.add(e["nonce"])
        if t0 <= e["ts_ns"] < t1:
            upstream_in_window += 1
            upstream_accepted += e["verdict"] == "accepted"
# Job fan-out, for each template the pool made in the window: from the pool's first job_sent
# of it to the last device's first job_received of it (matched by the template's fingerprint,
# which the fleet reads off the coinbase), when every device received it.
made = {}  # template id -> fingerprint
first_sent = {}  # template id -> ts of the pool's first job_sent for it
for line in open(f"{d}/pool.jsonl"):
    e = json.loads(line)
    if e.get("kind") == "template_created" and e.get("fingerprint"):
        made[e["template_id"]] = e["fingerprint"]
    elif e.get("kind") == "job_sent" and e.get("template_id") is not None:
        first_sent.setdefault(e["template_id"], e["ts_ns"])
sent = {}
answered = accepted = rejected = 0
lat = {"all": [], "local": [], "fwd": []}
results = []
received = {}  # fingerprint -> device -> first ts
for line in open(f"{d}/fleet.jsonl"):
    e = json.loads(line)
    k = e.get("kind")
    if k == "share_sent":
        sent[(e["device"], e["seq"])] = (e["ts_ns"], e["nonce"])
    elif k == "share_result" and e.get("perspective") == "received":
        results.append(e)
    elif k == "job_received" and e.get("fingerprint"):
        got = received.setdefault(e["fingerprint"], {})
        got.setdefault(e["device"], e["ts_ns"])
for e in results:
    ts = e["ts_ns"]
    ok = e["verdict"] == "accepted"
    if t0 <= ts < t1:
        answered += 1
        accepted += ok
        rejected += not ok
    s = sent.get((e["conn"], e["seq"]))
    if ok and s is not None and t0 <= s[0] < t1:
        ms = (ts - s[0]) / 1e6
        lat["all"].append(ms)
        lat["fwd" if s[1] in upstream else "local"].append(ms)
# The translator's own latency, on the wire at its SV1 port (kernel timestamps at loopback).
wire = {"all": [], "local": [], "fwd": []}
try:
    wj = json.load(open(f"{d}/wire.json"))
except (OSError, ValueError):
    wj = None
if wj:
    for ms, nonce, ok, *_ in wj["samples"]:
        if ok:
            wire["all"].append(ms)
            wire["fwd" if nonce in upstream else "local"].append(ms)
def q(v, p):
    v.sort()
    return v[min(len(v) - 1, int(p * len(v)))] if v else None
fanout = []
for tid, ts in first_sent.items():
    got = received.get(made.get(tid), {})
    if t0 <= ts < t1 and len(got) == devices:
        fanout.append((max(got.values()) - ts) / 1e6)
secs = (t1 - t0) / 1e9
row = {
    "label": label, "kind": kind, "devices": devices, "offered_per_s": offered, "window_s": secs,
    "answered": answered, "accepted": accepted, "rejected": rejected,
    "accepted_per_s": accepted / secs, "upstream_per_s": upstream_in_window / secs,
    "upstream_accepted": upstream_accepted, "upstream_judged": upstream_in_window,
    "translator_cpu_pct": 100 * w["translator_cpu_s"] / secs,
    "cpu_us_per_share": w["translator_cpu_s"] * 1e6 / answered if answered else None,
    "fleet_cpu_pct": 100 * w["fleet_cpu_s"] / secs,
    "rss0_kib": rss0, "rss_kib": w["rss_kib"],
    "rss_per_device_kib": (w["rss_kib"] - rss0) / devices,
    "ready": rep["ready"], "disconnects": rep["disconnects"],
    "protocol_errors": rep["protocol_errors"], "rejected_by_reason": rep["shares"]["rejected_by_reason"],
    "others_pct": 100 * (w["core_busy_s"][core] - w["translator_cpu_s"]) / secs,
    "loadavg_1m": w["loadavg_1m"],
}
for name, v in lat.items():
    row[f"{name}_n"] = len(v)
    row[f"{name}_p50_ms"] = q(v, 0.50)
    row[f"{name}_p99_ms"] = q(v, 0.99)
for name, v in wire.items():
    row[f"wire_{name}_n"] = len(v)
    row[f"wire_{name}_p50_ms"] = q(v, 0.50)
    row[f"wire_{name}_p99_ms"] = q(v, 0.99)
row["wire_drops"] = wj["drops"] if wj else None
# Through the translator only: the floor pool makes its own jobs, the pool sends none.
row["fanout_n"] = len(fanout)
row["fanout_max_ms"] = max(fanout) if fanout else None
row["wire_unmatched"] = wj["unmatched"] if wj else None
print(json.dumps(row))
EOF
    local row
    row=$(tail -n 1 "$work/rows.jsonl")
    say "$label: $row"
    python3 -c 'import json,sys; r = json.loads(sys.argv[1]); sys.exit(0 if r["ready"] == r["devices"] and r["protocol_errors"] == 0 and r["accepted"] > 0 and (r["upstream_accepted"] > 0 or r["kind"] == "floor") else 1)' "$row" \
        || fail "$label: not every device was ready, protocol errors, or nothing accepted here or upstream: $row"
}

# 3. The runs, one after the other with the same load.
say "$DEVICES devices, $SHARES_PER_S shares/s offered, upstream $UPSTREAM_SPM shares/min, $CHANNELS channels;" \
    "warm-up $WARMUP, window $WINDOW; translator on core $TRANSLATOR_CPU, the rest on core $LOAD_CPU"
wants() { [[ " $ROWS " == *" $1 "* ]]; }
for rep in $(seq "${BENCH_REPEAT:-1}"); do
    suffix=$([ "$rep" = 1 ] || echo "#$rep")
    [ "${BENCH_WIRE:-1}" = 1 ] && wants floor && run_one "floor$suffix" floor
    # Alternating which translator goes first, so that a drifting machine favours neither.
    if [ $((rep % 2)) = 1 ]; then
        ! wants ours || run_one "ours$suffix" ours
        ! wants translator_sv2 || run_one "translator_sv2$suffix" translator_sv2
    else
        ! wants translator_sv2 || run_one "translator_sv2$suffix" translator_sv2
        ! wants ours || run_one "ours$suffix" ours
    fi
    ! wants translator_sv2-warn || run_one "translator_sv2-warn$suffix" translator_sv2 RUST_LOG=warn
done

# 4. The table and the ratios.
python3 - "$work/rows.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
f = lambda v, spec: "-" if v is None else format(v, spec)
print()
print(f"{'translator':<20} {'answered/s':>10} {'rej':>4} {'upstream/s':>10} "
      f"{'p50 ms':>7} {'p99 ms':>7} {'local p50':>9} {'local p99':>9} {'fwd p50':>8} {'fwd p99':>8} {'fwd n':>6} "
      f"{'CPU-us/share':>12} {'CPU%':>6} {'KiB/device':>10} {'RSS0 MiB':>8} {'fan-out ms':>10} {'gen CPU%':>8} {'others%':>7} {'load':>5}  note")
for r in rows:
    note = "generator-bound" if r["fleet_cpu_pct"] >= 90 else (
        "translator-bound" if r["translator_cpu_pct"] >= 95 else (
        # Latency here is mostly waking the core: anything else on it shows in the tail first.
        "core shared: latency not comparable" if r["others_pct"] >= 15 else ""))
    print(f"{r['label']:<20} {r['answered'] / r['window_s']:>10.1f} {r['rejected']:>4} {r['upstream_per_s']:>10.2f} "
          f"{f(r['all_p50_ms'], '.3f'):>7} {f(r['all_p99_ms'], '.3f'):>7} "
          f"{f(r['local_p50_ms'], '.3f'):>9} {f(r['local_p99_ms'], '.3f'):>9} "
          f"{f(r['fwd_p50_ms'], '.3f'):>8} {f(r['fwd_p99_ms'], '.3f'):>8} {r['fwd_n']:>6} "
          f"{f(r['cpu_us_per_share'], '.1f'):>12} {r['translator_cpu_pct']:>6.1f} {r['rss_per_device_kib']:>10.1f} "
          f"{r['rss0_kib'] / 1024:>8.1f} {f(r.get('fanout_max_ms'), '.1f'):>10} {r['fleet_cpu_pct']:>8.1f} {r['others_pct']:>7.1f} {r['loadavg_1m']:>5.1f}  {note}")
print()
print(f"{'on the wire':<20} {'n':>7} {'p50 ms':>7} {'p99 ms':>7} {'local p50':>9} {'local p99':>9} "
      f"{'fwd p50':>8} {'fwd p99':>8} {'drops':>6} {'unmatched':>9}")
for r in rows:
    if r.get("wire_all_n"):
        print(f"{r['label']:<20} {r['wire_all_n']:>7} {f(r['wire_all_p50_ms'], '.3f'):>7} {f(r['wire_all_p99_ms'], '.3f'):>7} "
              f"{f(r['wire_local_p50_ms'], '.3f'):>9} {f(r['wire_local_p99_ms'], '.3f'):>9} "
              f"{f(r['wire_fwd_p50_ms'], '.3f'):>8} {f(r['wire_fwd_p99_ms'], '.3f'):>8} "
              f"{r['wire_drops']:>6} {r['wire_unmatched']:>9}")
print("(on the wire: at the translator's SV1 port, submit packet -> answer packet, kernel timestamps"
      " on loopback; what the translator itself adds, without the devices' scheduling)")
print("(latency: device share_sent -> share_result over loopback, accepted shares sent in the window;"
      " local: answered below the pool's target, fwd: the pool judged the same nonce;"
      " KiB/device: (RSS with the devices - RSS before them) / devices;"
      " fan-out: the slowest, over the window's templates, from the pool sending the job to the last"
      " device receiving it;"
      " others%: other processes on the translator's core)")
print()
# Rows of one repetition share a suffix (#2, #3...); ratios are taken within a repetition (the
# same minutes of the machine), then their median over repetitions.
reps = {}
for r in rows:
    name, _, rep = r["label"].partition("#")
    reps.setdefault(rep or "1", {})[name] = r
def above(r, floor, key):
    if not floor or r.get(key) is None or floor.get(key) is None:
        return None
    return r[key] - floor[key]
def q(a, b):
    return None if a is None or not b else a / b
def q_above(ours, o, floor, key):
    # Added latency, ours / theirs. Below the floor counts as nothing added; when theirs is at
    # or below the floor there is nothing to divide by (the floor's window was the noisier).
    a, b = above(ours, floor, key), above(o, floor, key)
    return None if a is None or b is None or b <= 0 else max(a, 0.0) / b
pooled = {}
for rep, by in reps.items():
    ours, floor = by.get("ours"), by.get("floor")
    if floor and ours:
        for pct in ("p50", "p99"):
            print(f"repetition {rep}, {pct} above the floor on the wire (the floor pool's {pct} "
                  f"{f(floor.get(f'wire_all_{pct}_ms'), '.3f')} ms subtracted): "
                  + ", ".join(f"{n} {f(above(r, floor, f'wire_all_{pct}_ms'), '.3f')} ms"
                              for n, r in by.items() if n != "floor"))
    for other in ("translator_sv2", "translator_sv2-warn"):
        o = by.get(other)
        if not ours or not o:
            continue
        rate = ours["answered"] / o["answered"] if o["answered"] else 0
        got = {
            "p50": q(ours["all_p50_ms"], o["all_p50_ms"]),
            "p99": q(ours["all_p99_ms"], o["all_p99_ms"]),
            "wire p50": q(ours.get("wire_all_p50_ms"), o.get("wire_all_p50_ms")),
            "wire p99": q(ours.get("wire_all_p99_ms"), o.get("wire_all_p99_ms")),
            "wire p50 above the floor": q_above(ours, o, floor, "wire_all_p50_ms"),
            "wire p99 above the floor": q_above(ours, o, floor, "wire_all_p99_ms"),
            "CPU per share": q(ours["cpu_us_per_share"], o["cpu_us_per_share"]),
            "job fan-out": q(ours.get("fanout_max_ms"), o.get("fanout_max_ms")),
            "memory per device": q(ours["rss_per_device_kib"], o["rss_per_device_kib"]),
        }
        for k, v in got.items():
            pooled.setdefault(other, {}).setdefault(k, []).append(v)
        print(f"repetition {rep}, ours / {other}: "
              + ", ".join(f"{k} {'-' if v is None else format(v, '.2f') + 'x'}" for k, v in got.items())
              + f"; answered rate {rate:.3f}x"
              + ("" if abs(rate - 1) <= 0.1 else "  (rates differ by more than 10%: CPU per share is not like for like)"))
for other, got in pooled.items():
    def median(v):
        v = sorted(x for x in v if x is not None)
        return v[len(v) // 2] if v else None
    print(f"median over {len(next(iter(got.values())))} repetition(s), ours / {other}: "
          + ", ".join(f"{k} {'-' if median(v) is None else format(median(v), '.2f') + 'x'}"
                      for k, v in got.items()))
EOF
say "done"
