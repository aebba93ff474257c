# Shared by the interop scripts (sourced, not run). Before sourcing, set `script` (a short name
# for messages and the work directory) and `log_files` (files in $work to show on failure).
# Gives: $work (a fresh directory, removed on exit unless INTEROP_KEEP=1), `pids` (processes
# stopped on exit: TERM, then KILL after 5 s), say, fail, wait_for SECS CMD..., free_port,
# $tools (where pinned third-party tools are installed) and install_pinned.

start=$(date +%s)
# The same place as .ci/run's clean-up of their shared build directory.
tools="${STRATUMLAB_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stratumlab-ci}"
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

# Installs the pinned third-party tool `$1` (a crates.io package whose binary has the same name)
# at version `$2` under $tools/$1-$2, unless a binary of that version is already there, and
# sets `pinned_bin` to the binary's path. The SV2 reference roles compile Cap'n Proto schemas:
# capnp and its standard schemas must be installed for them.
#
# Every tool builds in one target directory, $tools/build: the reference roles share most of
# their dependency graph (translator_sv2 and jd_client_sv2 all but a handful of their ~500
# locked crates, pool_sv2 319 of its 344 with translator_sv2), so on a new machine each crate
# compiles once rather than once per tool. .ci/run removes it when every tool is installed.
install_pinned() {
    local name=$1 version=$2
    local root="$tools/$name-$version"
    pinned_bin="$root/bin/$name"
    if [ -x "$pinned_bin" ] && "$pinned_bin" --version 2>/dev/null | grep -q "$version"; then
        say "$name $version: cached at $pinned_bin"
        return
    fi
    if [[ $name == *_sv2 ]]; then
        command -v capnp >/dev/null || fail "capnp not found: install Debian's capnproto and libcapnp-dev"
        [ -f /usr/include/capnp/c++.capnp ] || fail "Cap'n Proto schemas missing (/usr/include/capnp/c++.capnp): install libcapnp-dev"
    fi
    say "installing $name $version into $root (a cold build takes minutes)"
    local t0
    t0=$(date +%s)
    # Not the workspace's target directory: that would mix their builds with ours and hold its lock.
    cargo install --locked "$name" --version "=$version" --root "$root" \
        --target-dir "$tools/build" --quiet
    say "$name installed in $(( $(date +%s) - t0 ))s"
}
