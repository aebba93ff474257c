#!/usr/bin/env bash
# Installs every pinned third-party tool (scripts/tools.sh) that is not installed yet, in the
# order CI first needs them. Each interop check installs its own tools when run alone; CI runs
# this in the background from its start, so that the tools build while the workspace's tests
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

install_pinned pool_sv2 "$POOL_SV2_VERSION"
install_pinned translator_sv2 "$TRANSLATOR_SV2_VERSION"
install_pinned para "$PARA_VERSION"
install_pinned jd_client_sv2 "$JD_CLIENT_SV2_VERSION"
say "every pinned tool is installed"
