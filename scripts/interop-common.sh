# Shared by the bench scripts (sourced, not run). Before sourcing, set `script` (a short name
# for messages and the work directory) and `log_files` (files in $work to show on failure).
# Gives: $work (a fresh directory, removed on exit unless INTEROP_KEEP=1), `pids` (processes
# stopped on exit: TERM, then KILL after 5 s), say, fail, wait_for SECS CMD..., and
# from scripts/tools.sh the pinned tools' versions, $tools and install_pinned.

start=$(date +%s)
say() { printf '[%s %3ss] %s\n' "$script" "$(( $(date +%s) - start ))" "$*"; }
fail() { failure="$*"; say "FAIL: $*"; exit 1; }
failure=

work=$(mktemp -d "${TMPDIR:-/tmp}/$script.XXXXXX")
pids=()
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    if [ "$rc" -ne 0 ]; then
        for f in "${log_files[@]}"; do
            [ -f "$work/$f" ] || continue
            echo "---- last lines of $f"
            tail -n 40 "$work/$f"
        done
        # Again after the logs, so that the reason is in the last lines CI shows.
        [ -z "$failure" ] || say "FAIL: $failure"
    fi
    if [ "${INTEROP_KEEP:-0}" = 1 ]; then
        echo "work directory kept: $work"
    else
        rm -rf "$work"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits up to $1 seconds for `$2 ...` to succeed.
wait_for() {
    local secs=$1
    shift
    local deadline=$(( $(date +%s) + secs ))
    until "$@"; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# shellcheck source=scripts/tools.sh
source scripts/tools.sh
