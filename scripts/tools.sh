# The pinned third-party tools the interop checks, the benches and the lab's reference
# configurations use, and how they are installed (sourced, not run). The versions are the ones
# crates/lab/src/third_party.rs looks for.
#
# Gives: $tools (where they are installed, by name and version), the *_VERSION pins, and
# install_pinned NAME VERSION, which sets `pinned_bin`. Uses `say` and `fail` where the sourcing
# script defines them.

POOL_SV2_VERSION=0.7.0
TRANSLATOR_SV2_VERSION=0.6.0
JD_CLIENT_SV2_VERSION=0.6.0
PARA_VERSION=0.6.0

# The same place as .ci/run's clean-up of their shared build directory, and the lab's default.
tools="${STRATUMLAB_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stratumlab-ci}"

declare -F say >/dev/null || say() { printf '[tools] %s\n' "$*"; }
declare -F fail >/dev/null || fail() { say "FAIL: $*"; exit 1; }

# Installs the pinned third-party tool `$1` (a crates.io package whose binary has the same name)
# at version `$2` under $tools/$1-$2, unless a binary of that version is already there, and
# sets `pinned_bin` to the binary's path. The SV2 reference roles compile Cap'n Proto schemas:
# capnp and its standard schemas must be installed for them.
#
# Every tool builds in one target directory, $tools/build: the reference roles share most of
# their dependency graph (translator_sv2 and jd_client_sv2 all but a handful of their ~500
# locked crates, pool_sv2 319 of its 344 with translator_sv2), so on a new machine each crate
# compiles once rather than once per tool. .ci/run removes it when every tool is installed.
#
# A lock per tool lets two installers meet (CI installs every tool in the background while the
# interop checks that need them wait for theirs): the second waits and then finds it installed.
install_pinned() {
    local name=$1 version=$2
    local root="$tools/$name-$version"
    pinned_bin="$root/bin/$name"
    mkdir -p "$tools"
    local lock
    exec {lock}>"$tools/.$name-$version.lock"
    if ! flock -n "$lock"; then
        say "$name $version: another installer is at work; waiting for it"
        flock "$lock"
    fi
    if [ -x "$pinned_bin" ] && "$pinned_bin" --version 2>/dev/null | grep -q "$version"; then
        say "$name $version: cached at $pinned_bin"
        exec {lock}>&-
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
    exec {lock}>&-
}
