#!/usr/bin/env bash
# Runs every cargo-fuzz target in the repository for the same time each, one after another, on
# nightly, and prints a table of target, executions and crashes at the end.
#
#   bash scripts/fuzz.sh 10m        # 10 minutes per target (also: 600, 600s, 1h)
#
# Targets are found from the [[bin]] names of each crates/*/fuzz/Cargo.toml. New inputs go to a
# scratch corpus under $FUZZ_WORK (default target/fuzz-work, kept between runs), read alongside
# the committed corpus, which is left as it is: merge finds into it by hand (see each fuzz
# directory's README). A crash is written to that fuzz directory's artifacts/<target>/ and
# counted; the script goes on with the next target and exits non-zero at the end.
#
# FUZZ_ARGS adds libFuzzer options to every run (e.g. FUZZ_ARGS='-max_len=200000').
#
# Bounded in time: each build and each run is under `timeout` (the run gets its time plus two
# minutes to start and stop). Needs rustup (it installs nightly if missing) and installs
# cargo-fuzz if `cargo fuzz` is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

usage() {
    echo "usage: bash scripts/fuzz.sh DURATION   (seconds, or with s, m or h: 600, 10m, 1h)" >&2
    exit 2
}
[ $# -eq 1 ] || usage
[[ $1 =~ ^([0-9]+)([smh]?)$ ]] || usage
case "${BASH_REMATCH[2]}" in
    h) secs=$(( 10#${BASH_REMATCH[1]} * 3600 )) ;;
    m) secs=$(( 10#${BASH_REMATCH[1]} * 60 )) ;;
    *) secs=$(( 10#${BASH_REMATCH[1]} )) ;;
esac
[ "$secs" -gt 0 ] || usage

BUILD_LIMIT=${FUZZ_BUILD_LIMIT:-1800}
work=${FUZZ_WORK:-$root/target/fuzz-work}
start=$(date +%s)
say() { printf '[fuzz %5ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

if ! rustup toolchain list | grep -q '^nightly'; then
    say "installing the nightly toolchain"
    timeout 900 rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version > /dev/null 2>&1; then
    say "installing cargo-fuzz"
    timeout 1200 cargo install --locked cargo-fuzz
fi

# The [[bin]] names of a cargo-fuzz manifest, one a line.
bins() {
    awk '
        /^\[\[bin\]\]/ { inbin = 1; next }
        /^\[/ { inbin = 0 }
        inbin && /^name *=/ { gsub(/^name *= *"|".*$/, ""); print }
    ' "$1"
}

rows=()
crashed=0
for manifest in crates/*/fuzz/Cargo.toml; do
    fuzz_dir=$(dirname "$manifest")
    crate_dir=$(dirname "$fuzz_dir")
    crate=$(basename "$crate_dir")
    mapfile -t targets < <(bins "$manifest")
    [ ${#targets[@]} -gt 0 ] || continue
    say "building $crate's targets: ${targets[*]}"
    if ! (cd "$crate_dir" && timeout "$BUILD_LIMIT" cargo +nightly fuzz build -s none); then
        for t in "${targets[@]}"; do rows+=("$crate/$t|-|-|-|build failed"); done
        crashed=1
        continue
    fi
    for t in "${targets[@]}"; do
        scratch=$work/$crate/$t
        artifacts=$root/$fuzz_dir/artifacts/$t
        log=$work/$crate/$t.log
        mkdir -p "$scratch" "$artifacts" "$fuzz_dir/corpus/$t"
        marker=$(mktemp)
        args=(-max_total_time="$secs" -print_final_stats=1)
        # More libFuzzer options for every target, e.g. FUZZ_ARGS='-max_len=200000'.
        read -ra extra <<< "${FUZZ_ARGS:-}"
        args+=("${extra[@]}")
        # A dictionary beside the manifest, named after the target, is used when present.
        [ -f "$fuzz_dir/$t.dict" ] && args+=(-dict="$root/$fuzz_dir/$t.dict")
        say "running $crate/$t for ${secs}s (log: $log)"
        set +e
        (cd "$crate_dir" && timeout --kill-after=30 $(( secs + 120 )) \
            cargo +nightly fuzz run -s none "$t" "$scratch" "fuzz/corpus/$t" -- "${args[@]}") \
            > "$log" 2>&1
        rc=$?
        set -e
        execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
        if [ -z "$execs" ]; then
            # Without the final statistics: the last status line's count (`#N DONE`, `#N pulse`).
            execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true)
        fi
        rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
        crashes=$(find "$artifacts" -type f -newer "$marker" \
            \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
        rm -f "$marker"
        status=ok
        if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
            status="timed out"
        elif [ "$rc" -ne 0 ] || [ "$crashes" -gt 0 ]; then
            status="failed (exit $rc; see $log)"
        fi
        [ "$status" = ok ] || crashed=1
        rows+=("$crate/$t|${execs:--}|${rate:--}|$crashes|$status")
    done
done

say "done"
printf '\n%-28s %14s %9s %8s  %s\n' target executions exec/s crashes status
for r in "${rows[@]}"; do
    IFS='|' read -r t e x c s <<< "$r"
    printf '%-28s %14s %9s %8s  %s\n' "$t" "$e" "$x" "$c" "$s"
done
exit "$crashed"
