#!/usr/bin/env bash
# Installs every pinned third-party tool (scripts/tools.sh) that is not installed yet, in the
# order CI first needs them; with names (`install-tools.sh para`), only those (waiting for an
# installer already at work on one). CI runs this in the background from its start, so that the tools build while the workspace's tests
# leave cores idle (real-time runs, linking), and the checks find them ready or wait for the one
# still building.
#
# Needs: cargo; for the SV2 reference roles, Cap'n Proto (Debian's capnproto and libcapnp-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
say() { printf '[install-tools %4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }
# shellcheck source=scripts/tools.sh
source scripts/tools.sh

declare -A versions=(
    [pool_sv2]=$POOL_SV2_VERSION
    [translator_sv2]=$TRANSLATOR_SV2_VERSION
    [para]=$PARA_VERSION
    [jd_client_sv2]=$JD_CLIENT_SV2_VERSION
)
wanted=("$@")
[ "${#wanted[@]}" -gt 0 ] || wanted=(pool_sv2 translator_sv2 para jd_client_sv2)
for name in "${wanted[@]}"; do
    [ -n "${versions[$name]:-}" ] || { say "no pinned tool named $name"; exit 2; }
    install_pinned "$name" "${versions[$name]}"
    say "$name: $pinned_bin"
done
say "installed: ${wanted[*]}"
