#!/usr/bin/env bash
# Benchmark: stratumlab's SV2 pool (`stratumlab pool --sv2-listen`) against the SV2 reference pool
# (pool_sv2, pinned), under the same SV2 device fleet at the same fixed offered load.
#
# For each pool: a fresh simnet (Template Provider; network difficulty so high and no blocks of
# the rest of the network, so that no new tip disturbs the window; a fee-driven template every
# 10 s, so job fan-outs are part of the load), the pool pinned to core 0, then one fleet process
# (one runtime thread) pinned to core 1 together with simnet. Both pools are told the same share
# rate per channel (pool_sv2 `shares_per_minute`, ours `--shares-per-minute`; each derives its
# start target from the nominal hash rate the devices announce, which is their real one), and both
# acknowledge every accepted share on its own (pool_sv2 `share_batch_size = 1`; ours flushes its
# batch after every read, and a device has at most one share in a read).
#
# Measured over a fixed window after warm-up, per pool:
#   - pool CPU (utime + stime of /proc/PID/stat, every thread) per accepted share, in µs;
#   - accepted shares (verdicts the devices received inside the window, from the fleet's events);
#   - submit-to-success latency p50/p99 (share_sent to share_result, shares sent in the window);
#   - the generator's (fleet's) own CPU: at or above 90% of its core the load is
#     generator-bound and the row says so.
# Then a table and the ratios (pool_sv2 ÷ ours), also net of each pool's idle baseline (the same
# connections and channels, no hashing). Our pool runs as an operator would: SQLite store
# (durability batched, 10 ms group commit) and an event file; pool_sv2 keeps its default log
# level (info: two lines per share). The full run adds ours with --durability off and pool_sv2
# with RUST_LOG=warn, like for like on what an acknowledgement waits for and on logging, and a
# floor row: the fleet's minimal SV2 pool (crates/fleet/examples/sv2_floor_pool.rs), which per
# share only wakes, reads, decrypts, hashes the header once and writes an encrypted
# SubmitShares.Success. Each pool's CPU per share above the floor is its own doing, and
# pool_sv2 ÷ floor bounds the CPU-per-share ratio any pool could reach against pool_sv2 here.
#
# Optional saturation sweep (BENCH_SWEEP="2000 5000"): total offered shares/s per step, every
# pool; a step whose generator reached 90% of its core is reported generator-bound, not as the
# pool's saturation throughput.
#
# Everything listens on 127.0.0.1 only. Every process started here is stopped on exit; each wait
# is bounded. Not part of .ci/run (several minutes).
#
# Environment:
#   BENCH_QUICK=1          10 s warm-up, 20 s window, only ours and pool_sv2 as shipped (no idle,
#                          durability-off or RUST_LOG=warn rows) [default: 20 s, 60 s, all]
#   BENCH_DEVICES          devices [default: 500]
#   BENCH_SHARES_PER_S     total offered shares per second [default: 300]
#   BENCH_HASH_BUDGET      the fleet's hashes per second (sets the share difficulty, not the
#                          share rate) [default: 2MH/s]
#   BENCH_WARMUP, BENCH_WINDOW   override the warm-up and the window (`20s`)
#   BENCH_SWEEP            extra total offered shares/s steps, space-separated [default: none]
#   BENCH_PERF=1           one more run of our pool with `perf record` over its window; prints
#                          the profile by thread and symbol (perf.data kept with INTEROP_KEEP=1)
#   BENCH_TRACE=1          attach `perf trace -s` to every pool over its window: system calls per
#                          accepted share by thread and by call (counts only; the tracing costs
#                          CPU, so CPU per share in these rows is not comparable with untraced
#                          ones). Context switches per share by thread (/proc, free) are in every row.
#   BENCH_CPUS="0 1"       the cores for the pool and for the load [default: 0 1]
#   BENCH_ROWS="..."       which pools to run at each offered load, in order, from: ours,
#                          pool_sv2, ours-dur-off, pool_sv2-warn, base, base-dur-off, floor,
#                          floor-epoll (the floor without tokio) [default: "ours pool_sv2", and in the full run ours-dur-off,
#                          pool_sv2-warn and floor at the first load]
#   BENCH_BASELINE=PATH    another stratumlab binary (say, a build from before a change) whose
#                          pool the rows base and base-dur-off run (simnet and the fleet stay
#                          this tree's): ours before and after a change against pool_sv2 in one run
#   BENCH_BUILD=0          use target/release/stratumlab as it is (no cargo build)
#   STRATUMLAB_TOOLS_DIR   where pinned third-party tools are installed
#   INTEROP_KEEP=1         keep the work directory (logs, configs, events)
# Needs: cargo, python3, taskset; pool_sv2 installed by scripts/install-tools.sh pool_sv2 (or here,
# with Cap'n Proto).
set -euo pipefail
cd "$(dirname "$0")/.."

# The reference example authority pair (published; test use only), given explicitly (the roles
# warn): simnet's Template Provider and every pool measured, a baseline build included, sign
# with it, and the devices check it. Loopback only; nothing here protects anything.
AUTHORITY_PUBLIC_KEY=9auqWEzQDVyd2oe1JVGFLMLHZtCo2FFqZwtKA5gd9xbuEu7PH72
AUTHORITY_SECRET_KEY=mkDLTBBRxdBv998612qipDYoTK3YUrqLe8uWw7gu3iXbSrn2n
PAYOUT=bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080

QUICK=${BENCH_QUICK:-0}
DEVICES=${BENCH_DEVICES:-500}
SHARES_PER_S=${BENCH_SHARES_PER_S:-300}
HASH_BUDGET=${BENCH_HASH_BUDGET:-2MH/s}
if [ "$QUICK" = 1 ]; then
    WARMUP=${BENCH_WARMUP:-10s}
    WINDOW=${BENCH_WINDOW:-20s}
else
    WARMUP=${BENCH_WARMUP:-20s}
    WINDOW=${BENCH_WINDOW:-60s}
fi
read -r POOL_CPU LOAD_CPU <<<"${BENCH_CPUS:-0 1}"

target_dir="${CARGO_TARGET_DIR:-$PWD/target}"

script=bench-sv2-pool
log_files=(simnet.err pool.out pool.err fleet.err)
# shellcheck source=scripts/interop-common.sh
source scripts/interop-common.sh

command -v taskset >/dev/null || fail "taskset not found (util-linux)"
[ "$(nproc --all)" -ge 2 ] || fail "needs two cores: the pool on one, the load on the other"

secs() { python3 -c 'import re,sys
t = sys.argv[1]; total = 0.0
for n, u in re.findall(r"([0-9.]+)(ms|s|m|h)", t):
    total += float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u]
print(total)' "$1"; }
WARMUP_S=$(secs "$WARMUP")
WINDOW_S=$(secs "$WINDOW")
RATE_HS=$(python3 -c 'import re,sys
m = re.fullmatch(r"([0-9.e+]+)\s*([kMGTP]?)(H/s)?", sys.argv[1])
m or sys.exit("BENCH_HASH_BUDGET: write it as 2MH/s, 500kH/s or 2e6")
print(float(m[1]) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}[m[2]])' "$HASH_BUDGET")

# 1. The pinned reference pool, installed as the interop scripts install it.
install_pinned pool_sv2 "$POOL_SV2_VERSION"
pool_bin=$pinned_bin

# 2. stratumlab, optimized: the pool is what is measured, and the fleet must not be the limit.
stratumlab="$target_dir/release/stratumlab"
if [ "${BENCH_BUILD:-1}" = 1 ] || [ ! -x "$stratumlab" ]; then
    cargo build --quiet --release -p cli
fi
# The floor row's pool (crates/fleet/examples/sv2_floor_pool.rs): Noise, decode, one header hash
# and an immediate SubmitShares.Success per share, nothing else. pool_sv2 ÷ floor is the largest
# CPU-per-share ratio any pool could reach against pool_sv2 on this machine.
# The floor-epoll row's (crates/fleet/examples/sv2_floor_epoll.rs) is the same pool on one thread
# driving epoll by hand: what tokio's machinery costs a share is floor - floor-epoll.
floor_bin="$target_dir/release/examples/sv2_floor_pool"
floor_epoll_bin="$target_dir/release/examples/sv2_floor_epoll"
if [ "${BENCH_BUILD:-1}" = 1 ] || [ ! -x "$floor_bin" ] || [ ! -x "$floor_epoll_bin" ]; then
    cargo build --quiet --release -p fleet --example sv2_floor_pool --example sv2_floor_epoll
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

# One measurement: run_one LABEL KIND SHARES_PER_S [ENV...] [-- POOL_ARGS...]; KIND is ours or
# pool_sv2; ENV (NAME=VALUE) is the pool's environment, POOL_ARGS more flags for our pool. A label
# ending in -perf records `perf` on the pool over the window (the row then carries its overhead).
# Appends a JSON line to $work/rows.jsonl.
run_one() {
    local label=$1 kind=$2 offered=$3
    shift 3
    local penv=() pargs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do penv+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    pargs=("$@")
    local dir="$work/$label-$offered"
    mkdir -p "$dir"
    # Per channel: the offered total spread over the devices; difficulty from the devices' rate.
    # Offered 0 is the idle baseline: the same connections, channels and targets, no hashing.
    local spm per_device diff budget=$RATE_HS
    spm=$(python3 -c "print(${offered/#0/$SHARES_PER_S} * 60 / $DEVICES)")
    [ "$offered" = 0 ] && budget=0
    per_device=$(python3 -c "print($RATE_HS / $DEVICES)")
    diff=$(python3 -c "print($per_device * 60 / $spm / 2**32)")

    taskset -c "$LOAD_CPU" "$stratumlab" simnet --tdp-listen 127.0.0.1:0 \
        --authority-public-key "$AUTHORITY_PUBLIC_KEY" --authority-secret-key "$AUTHORITY_SECRET_KEY" \
        --network-difficulty 1000000 --block-interval 0 --template-interval 10s \
        --seed 7 --events "$dir/simnet.ev" >"$dir/simnet.out" 2>"$dir/simnet.err" &
    pids+=($!)
    local tdp=""
    tdp_addr() { sed -n 's/^tdp listening on \([0-9.]*:[0-9]*\).*/\1/p' "$dir/simnet.out" | head -n1; }
    have_tdp() { [ -n "$(tdp_addr)" ]; }
    wait_for 60 have_tdp || fail "$label: simnet did not print 'tdp listening on ADDR'"
    tdp=$(tdp_addr)

    local pool_addr pool_pid
    if [ "$kind" != pool_sv2 ]; then
        if [ "$kind" = floor ] || [ "$kind" = floor-epoll ]; then
            # The fleet's minimal SV2 pool: the least any pool pays per share here (step 2).
            local bin=$floor_bin
            [ "$kind" = floor ] || bin=$floor_epoll_bin
            taskset -c "$POOL_CPU" "$bin" "$diff" 10 >"$dir/pool.out" 2>"$dir/pool.err" &
        else
            local pool_prog=$stratumlab
            [ "$kind" = ours ] || pool_prog=$BENCH_BASELINE
            env "${penv[@]}" taskset -c "$POOL_CPU" "$pool_prog" pool --sv2-listen 127.0.0.1:0 \
                --tp "$tdp" --tp-authority-key "$AUTHORITY_PUBLIC_KEY" \
                --authority-public-key "$AUTHORITY_PUBLIC_KEY" \
                --authority-secret-key "$AUTHORITY_SECRET_KEY" \
                --http-listen 127.0.0.1:0 --payout-address "$PAYOUT" \
                --shares-per-minute "$spm" --start-difficulty "$diff" \
                --store "$dir/pool.sqlite" --events "$dir/pool.ev" "${pargs[@]}" \
                >"$dir/pool.out" 2>"$dir/pool.err" &
        fi
        pool_pid=$!
        pids+=("$pool_pid")
        sv2_addr() { sed -n 's/^sv2 listening on \([0-9.]*:[0-9]*\).*/\1/p' "$dir/pool.out" | head -n1; }
        listening() {
            kill -0 "$pool_pid" 2>/dev/null || fail "$label: the pool exited early"
            [ -n "$(sv2_addr)" ]
        }
        wait_for 60 listening || fail "$label: the pool did not print 'sv2 listening on ADDR'"
        pool_addr=$(sv2_addr)
    else
        local port
        port=$(free_port)
        cat >"$dir/pool.toml" <<EOF
authority_public_key = "$AUTHORITY_PUBLIC_KEY"
authority_secret_key = "$AUTHORITY_SECRET_KEY"
cert_validity_sec = 3600
listen_address = "127.0.0.1:$port"
coinbase_reward_script = "addr($PAYOUT)"
server_id = 1
pool_signature = "stratumlab bench"
shares_per_minute = $spm
share_batch_size = 1

[template_provider_type.Sv2Tp]
address = "$tdp"
public_key = "$AUTHORITY_PUBLIC_KEY"
EOF
        (
            for v in $(compgen -e | grep '^POOL__' || true); do unset "$v"; done
            exec env NO_COLOR=1 "${penv[@]}" taskset -c "$POOL_CPU" "$pool_bin" -c "$dir/pool.toml"
        ) >"$dir/pool.out" 2>"$dir/pool.err" &
        pool_pid=$!
        pids+=("$pool_pid")
        # With RUST_LOG=warn it says nothing when ready: then its listening port is the sign.
        sv2_ready() {
            kill -0 "$pool_pid" 2>/dev/null || fail "$label: pool_sv2 exited early"
            grep -q 'ready to accept connections' "$dir/pool.out" 2>/dev/null \
                || python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$port" 2>/dev/null
        }
        wait_for 90 sv2_ready || fail "$label: pool_sv2 did not become ready for miners"
        # The listener may come up before the first template: give it the TP's first one.
        sleep 2
        pool_addr=127.0.0.1:$port
    fi

    local total_s
    total_s=$(python3 -c "print(int($WARMUP_S + $WINDOW_S + 3))")
    say "$label: $DEVICES devices, $offered shares/s offered ($spm per minute per channel," \
        "difficulty $diff) against $pool_addr"
    taskset -c "$LOAD_CPU" "$stratumlab" fleet --protocol sv2 --pool "$pool_addr" \
        --authority-key "$AUTHORITY_PUBLIC_KEY" --devices "$DEVICES" \
        --hash-budget "$budget" --nominal-hash-rate "$per_device" --threads 1 \
        --duration "${total_s}s" --drain 3s --json --events "$dir/fleet.ev" \
        >"$dir/fleet.json" 2>"$dir/fleet.err" &
    local fleet_pid=$!
    pids+=("$fleet_pid")

    local perf_pid=""
    if [[ $label == *-perf ]]; then
        (sleep "$WARMUP_S"; exec perf record -F 499 -g -p "$pool_pid" -o "$dir/perf.data" \
            -- sleep "$WINDOW_S") >"$dir/perf.out" 2>&1 &
        perf_pid=$!
        pids+=("$perf_pid")
    fi
    local trace_pid=""
    if [ "${BENCH_TRACE:-0}" = 1 ]; then
        # Counts every system call of every thread of the pool over the window (summary only).
        (sleep "$WARMUP_S"; exec perf trace -s -p "$pool_pid" -o "$dir/trace.txt" \
            -- sleep "$WINDOW_S") >"$dir/trace.out" 2>&1 &
        trace_pid=$!
        pids+=("$trace_pid")
    fi
    # The window: CPU of both processes and CLOCK_MONOTONIC (the events' clock) at its ends.
    python3 - "$pool_pid" "$fleet_pid" "$WARMUP_S" "$WINDOW_S" >"$dir/window.json" <<'EOF'
import json, os, sys, time
pool, fleet, warmup, window = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
tck = os.sysconf("SC_CLK_TCK")
def cpu(path):
    # utime and stime are fields 14 and 15; the command name may hold spaces, so split after ')'.
    with open(f"{path}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / tck
def user_sys(path):
    with open(f"{path}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) / tck, int(rest[12]) / tck
def threads(pid):
    # Per thread name (digits dropped, so a runtime's workers add up): where the pool spends,
    # as (user, system) seconds: system time is the kernel's work for the thread (system
    # calls, wake-ups, the socket and the file system).
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip().rstrip("0123456789-")
            u, s = user_sys(f"/proc/{pid}/task/{tid}")
            a, b = out.get(name, (0.0, 0.0))
            out[name] = (a + u, b + s)
        except OSError:
            pass
    return out
def switches(pid):
    # Context switches per thread name (voluntary: the thread slept, waiting for something;
    # involuntary: preempted), from each thread's status.
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = open(f"/proc/{pid}/task/{tid}/comm").read().strip().rstrip("0123456789-")
            st = dict(l.split(":", 1) for l in open(f"/proc/{pid}/task/{tid}/status") if ":" in l)
            v, n = int(st["voluntary_ctxt_switches"]), int(st["nonvoluntary_ctxt_switches"])
            a, b = out.get(name, (0, 0))
            out[name] = (a + v, b + n)
        except (OSError, KeyError, ValueError):
            pass
    return out
def cores():
    # Busy seconds per core (all but idle and iowait): what else ran on the pool's core.
    out = {}
    for line in open("/proc/stat"):
        f = line.split()
        if f[0].startswith("cpu") and f[0] != "cpu":
            v = [int(x) for x in f[1:]]
            out[f[0][3:]] = (sum(v[:8]) - v[3] - v[4]) / tck
    return out
time.sleep(warmup)
t0, p0, f0, th0, c0, s0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC), cpu(f"/proc/{pool}"), cpu(f"/proc/{fleet}"), threads(pool), cores(), switches(pool)
time.sleep(window)
t1, p1, f1, th1, c1, s1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC), cpu(f"/proc/{pool}"), cpu(f"/proc/{fleet}"), threads(pool), cores(), switches(pool)
by_thread_us = {k: [round(v[0] - th0.get(k, (0, 0))[0], 2), round(v[1] - th0.get(k, (0, 0))[1], 2)]
                for k, v in th1.items()}
by_thread_us = {k: v for k, v in by_thread_us.items() if v[0] + v[1] > 0}
by_thread = {k: round(v[0] + v[1], 2) for k, v in by_thread_us.items()}
# A thread that existed at only one end counts from zero (short-lived helper threads).
cs = {k: [v[0] - s0.get(k, (0, 0))[0], v[1] - s0.get(k, (0, 0))[1]] for k, v in s1.items()}
print(json.dumps({"t0_ns": t0, "t1_ns": t1, "pool_cpu_s": p1 - p0, "fleet_cpu_s": f1 - f0,
                  "pool_cpu_s_by_thread": by_thread,
                  "pool_user_sys_s_by_thread": by_thread_us,
                  "ctxt_switches_by_thread": {k: v for k, v in cs.items() if v[0] or v[1]},
                  "core_busy_s": {k: c1[k] - c0[k] for k in c1},
                  "loadavg_1m": float(open("/proc/loadavg").read().split()[0])}))
EOF
    wait "$fleet_pid" || fail "$label: the fleet failed: $(tail -n 3 "$dir/fleet.err")"
    if [ -n "$perf_pid" ]; then
        wait "$perf_pid" || true
        {
            perf report -i "$dir/perf.data" --no-children --stdio -g none --sort comm,dso
            perf report -i "$dir/perf.data" --no-children --stdio -g none --percent-limit 1 \
                --sort comm,dso,symbol
        } 2>/dev/null | grep -v '^#' | grep '%' | sed 's/ *- *- *$//' >"$dir/perf.txt" || true
        say "$label: perf, self time by symbol (data in $dir/perf.data):"
        sed 's/^/    /' "$dir/perf.txt"
    fi
    [ -z "$trace_pid" ] || wait "$trace_pid" || true
    stop_all
    "$stratumlab" events dump "$dir/fleet.ev" >"$dir/fleet.jsonl" || fail "$label: fleet events do not read"

    python3 - "$label" "$kind" "$offered" "$dir" "$POOL_CPU" >>"$work/rows.jsonl" <<'EOF'
import json, sys
label, kind, offered, d, pool_core = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
w = json.load(open(f"{d}/window.json"))
rep = json.load(open(f"{d}/fleet.json"))
t0, t1 = w["t0_ns"], w["t1_ns"]
sent = {}
accepted = rejected = 0
lat = []
results = []
for line in open(f"{d}/fleet.jsonl"):
    e = json.loads(line)
    k = e.get("kind")
    if k == "share_sent":
        sent[(e["device"], e["seq"])] = e["ts_ns"]
    elif k == "share_result" and e.get("perspective") == "received":
        results.append(e)
for e in results:
    ts = e["ts_ns"]
    # "accepted", or a rejection with its reason.
    ok = e["verdict"] == "accepted"
    if t0 <= ts < t1:
        if ok:
            accepted += 1
        else:
            rejected += 1
    s = sent.get((e["conn"], e["seq"]))
    if ok and s is not None and t0 <= s < t1:
        lat.append((ts - s) / 1e6)
lat.sort()
# perf trace -s: per thread "name (tid), N events, P%", then rows "syscall calls errors ...".
trace = {}
try:
    import re
    thread = None
    for line in open(f"{d}/trace.txt"):
        m = re.match(r"^ (\S.*?) \((\d+)\), (\d+) events", line)
        if m:
            thread = m[1].rstrip("0123456789-")
            trace.setdefault(thread, {})
            continue
        m = re.match(r"^\s+([a-z_0-9]+)\s+(\d+)\s+(\d+)\s+[0-9.]+", line)
        if m and thread is not None:
            calls = trace[thread]
            calls[m[1]] = calls.get(m[1], 0) + int(m[2])
except OSError:
    trace = None
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else None
secs = (t1 - t0) / 1e9
print(json.dumps({
    "label": label, "kind": kind, "offered_per_s": offered, "window_s": secs,
    "accepted": accepted, "rejected": rejected, "accepted_per_s": accepted / secs,
    "pool_cpu_s": w["pool_cpu_s"],
    "pool_cpu_us_per_share": w["pool_cpu_s"] * 1e6 / accepted if accepted else None,
    "pool_cpu_pct": 100 * w["pool_cpu_s"] / secs,
    "fleet_cpu_pct": 100 * w["fleet_cpu_s"] / secs,
    "p50_ms": q(0.50), "p99_ms": q(0.99), "latency_n": len(lat),
    "ready": rep["ready"], "devices": rep["devices"], "disconnects": rep["disconnects"],
    "protocol_errors": rep["protocol_errors"], "rejected_by_reason": rep["shares"]["rejected_by_reason"],
    "pool_cpu_s_by_thread": w["pool_cpu_s_by_thread"],
    "pool_user_sys_s_by_thread": w["pool_user_sys_s_by_thread"],
    "ctxt_switches_by_thread": w["ctxt_switches_by_thread"],
    "syscalls_by_thread": trace,
    # Other processes' CPU on the pool's core (the machine may be shared), % of the window.
    "pool_core_others_pct": 100 * (w["core_busy_s"][pool_core] - w["pool_cpu_s"]) / secs,
    "loadavg_1m": w["loadavg_1m"],
}))
EOF
    local row
    row=$(tail -n 1 "$work/rows.jsonl")
    say "$label: $row"
    python3 -c 'import json,sys; r = json.loads(sys.argv[1]); sys.exit(0 if r["ready"] == r["devices"] and r["protocol_errors"] == 0 and (r["accepted"] > 0 or r["offered_per_s"] == 0) else 1)' "$row" \
        || fail "$label: not every device was ready, protocol errors, or nothing accepted: $row"
}

# 3. The fixed offered load, then the optional sweep.
say "warm-up $WARMUP, window $WINDOW; pool on core $POOL_CPU, fleet and simnet on core $LOAD_CPU"
if [ "$QUICK" != 1 ]; then
    run_one ours ours 0
    run_one pool_sv2 pool_sv2 0
fi
if [ -n "${BENCH_BASELINE:-}" ]; then
    [ -x "$BENCH_BASELINE" ] || fail "BENCH_BASELINE=$BENCH_BASELINE is not an executable"
fi
for offered in "$SHARES_PER_S" ${BENCH_SWEEP:-}; do
    rows=${BENCH_ROWS:-ours pool_sv2}
    if [ -z "${BENCH_ROWS:-}" ] && [ "$QUICK" != 1 ] && [ "$offered" = "$SHARES_PER_S" ]; then
        # Like for like on what an acknowledgement means and on logging.
        rows="$rows ours-dur-off pool_sv2-warn floor"
    fi
    for row in $rows; do
        case $row in
            ours) run_one ours ours "$offered" ;;
            pool_sv2) run_one pool_sv2 pool_sv2 "$offered" ;;
            ours-dur-off) run_one ours-dur-off ours "$offered" -- --durability off ;;
            pool_sv2-warn) run_one pool_sv2-warn pool_sv2 "$offered" RUST_LOG=warn ;;
            floor) run_one floor floor "$offered" ;;
            floor-epoll) run_one floor-epoll floor-epoll "$offered" ;;
            base|base-dur-off)
                [ -n "${BENCH_BASELINE:-}" ] || fail "BENCH_ROWS has $row: set BENCH_BASELINE"
                if [ "$row" = base ]; then
                    run_one base base "$offered"
                else
                    run_one base-dur-off base "$offered" -- --durability off
                fi
                ;;
            *) fail "BENCH_ROWS: unknown row $row" ;;
        esac
    done
done
if [ "${BENCH_PERF:-0}" = 1 ]; then
    command -v perf >/dev/null || fail "BENCH_PERF=1: perf not found"
    run_one ours-perf ours "$SHARES_PER_S"
fi

# 4. The table and the ratios. "net" is CPU per share above the idle baseline (the same
# connections and channels holding still, offered 0) of the same pool program.
python3 - "$work/rows.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
idle = {r["kind"]: r["pool_cpu_pct"] for r in rows if r["offered_per_s"] == 0}
idle.setdefault("base", idle.get("ours"))
for r in rows:
    i = idle.get(r["kind"])
    r["net_us"] = (None if i is None or not r["accepted"] else
                   (r["pool_cpu_pct"] - i) / 100 * r["window_s"] * 1e6 / r["accepted"])
fmt = lambda v, f: "-" if v is None else format(v, f)
print()
print(f"{'pool':<14} {'offered/s':>9} {'accepted/s':>10} {'rej':>4} {'CPU-us/share':>12} {'net':>6} "
      f"{'pool CPU%':>9} {'p50 ms':>7} {'p99 ms':>7} {'gen CPU%':>8} {'others%':>7} {'load':>5}  note")
for r in rows:
    note = "generator-bound" if r["fleet_cpu_pct"] >= 90 else (
        "pool-bound: accepted/s is its saturation throughput" if r["pool_cpu_pct"] >= 95 else "")
    if r["offered_per_s"] == 0:
        note = "idle baseline"
    if r["label"].endswith("-perf"):
        note += " perf attached"
    print(f"{r['label']:<14} {r['offered_per_s']:>9.0f} {r['accepted_per_s']:>10.1f} {r['rejected']:>4} "
          f"{fmt(r['pool_cpu_us_per_share'], '.1f'):>12} {fmt(r['net_us'], '.1f'):>6} {r['pool_cpu_pct']:>9.1f} "
          f"{fmt(r['p50_ms'], '.2f'):>7} {fmt(r['p99_ms'], '.2f'):>7} {r['fleet_cpu_pct']:>8.1f} "
          f"{r['pool_core_others_pct']:>7.1f} {r['loadavg_1m']:>5.1f}  {note}")
print("(others%: other processes' CPU on the pool's core during the window; load: 1-minute load"
      " average at its end. Latency is only comparable between rows with little of either.)")
print()
by = {(r["label"], r["offered_per_s"]): r for r in rows}
ratio = lambda a, b: "-" if a is None or not b else f"{a / b:.2f}x"
for off in sorted({r["offered_per_s"] for r in rows if r["offered_per_s"] > 0}):
    for mine, other in (("ours", "pool_sv2"), ("ours", "pool_sv2-warn"), ("ours-dur-off", "pool_sv2"),
                        ("ours-dur-off", "pool_sv2-warn"), ("base", "pool_sv2"),
                        ("base-dur-off", "pool_sv2"), ("ours", "base"),
                        ("ours-dur-off", "base-dur-off")):
        ours, o = by.get((mine, off)), by.get((other, off))
        if not ours or not o or not ours["accepted"] or not o["accepted"]:
            continue
        rate = o["accepted_per_s"] / ours["accepted_per_s"]
        print(f"{off:.0f} shares/s offered: {other} / {mine}: CPU per share "
              f"{ratio(o['pool_cpu_us_per_share'], ours['pool_cpu_us_per_share'])} "
              f"(net of idle {ratio(o['net_us'], ours['net_us'])}), "
              f"p50 {ratio(o['p50_ms'], ours['p50_ms'])}, p99 {ratio(o['p99_ms'], ours['p99_ms'])}; "
              f"accepted rate {rate:.3f}x"
              + ("" if abs(rate - 1) <= 0.1 else "  (rates differ by more than 10%: CPU per share is not like for like)"))
    for fl in ("floor", "floor-epoll"):
        floor = by.get((fl, off))
        if not floor or not floor["accepted"]:
            continue
        f = floor["pool_cpu_us_per_share"]
        print(f"{off:.0f} shares/s offered: {fl} costs {f:.1f} CPU-us/share; above it:")
        for r in rows:
            if r["offered_per_s"] != off or r["label"] == fl or not r["accepted"]:
                continue
            print(f"    {r['label']:<14} {r['pool_cpu_us_per_share'] - f:>7.1f} CPU-us/share above {fl}"
                  f" ({r['pool_cpu_us_per_share'] / f:.2f}x)")
        for o in ("pool_sv2", "pool_sv2-warn"):
            ref = by.get((o, off))
            if ref and ref["accepted"]:
                print(f"    {o} / {fl}: {ref['pool_cpu_us_per_share'] / f:.2f}x, the most a pool built as {fl}"
                      f" is could be ahead of {o} in CPU per share on this machine at this load")
    bound = [r["label"] for r in rows if r["offered_per_s"] == off and r["fleet_cpu_pct"] >= 90]
    if bound:
        print(f"  generator-bound at {off:.0f}/s ({', '.join(bound)}): no saturation figure from that step")
print()
print("pool CPU in the window by thread (s):")
for r in rows:
    th = sorted(r["pool_cpu_s_by_thread"].items(), key=lambda kv: -kv[1])
    print(f"  {r['label']:<14} {r['offered_per_s']:>6.0f}/s  " + ", ".join(f"{k} {v:.2f}" for k, v in th))
print()
print("kernel work per accepted share, by thread: context switches (voluntary+involuntary) and,"
      " with BENCH_TRACE=1, system calls (the busiest calls in brackets):")
for r in rows:
    n = r["accepted"]
    if not n:
        continue
    cs = r.get("ctxt_switches_by_thread") or {}
    sc = r.get("syscalls_by_thread") or {}
    tot_cs = sum(v[0] + v[1] for v in cs.values())
    tot_sc = sum(sum(c.values()) for c in sc.values())
    print(f"  {r['label']:<14} {r['offered_per_s']:>6.0f}/s  switches {tot_cs / n:.2f}/share"
          + (f", syscalls {tot_sc / n:.2f}/share" if sc else ""))
    for name in sorted(set(cs) | set(sc), key=lambda k: -(sum(cs.get(k, (0, 0))) + sum((sc.get(k) or {}).values()))):
        v = cs.get(name, (0, 0))
        calls = sc.get(name) or {}
        busiest = sorted(calls.items(), key=lambda kv: -kv[1])[:6]
        us = (r.get("pool_user_sys_s_by_thread") or {}).get(name)
        line = f"      {name:<18} "
        if us:
            line += f"CPU-us/share user {us[0] * 1e6 / n:.1f} + system {us[1] * 1e6 / n:.1f}, "
        line += f"switches {v[0] / n:.3f}+{v[1] / n:.3f}"
        if calls:
            line += f", syscalls {sum(calls.values()) / n:.3f} (" + ", ".join(f"{k} {c / n:.3f}" for k, c in busiest) + ")"
        print(line)
EOF
say "done"
