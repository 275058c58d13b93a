#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cargo, offline. Where Debian's librust-pkg-config-dev is installed, the one build
# dependency (pkg-config, from crates.io) is patched to that package's sources in
# /usr/share/cargo/registry, so nothing is fetched (a [patch] rather than a source
# replacement: `cargo package --workspace` can then still resolve the workspace's own
# crates). Without it this is plain `cargo --offline`: crates already downloaded into
# ~/.cargo are used. Usage: bindings/rust/cargo-offline.sh SUBCOMMAND [ARGS...]
set -euo pipefail
registry=${EPCOMM_CARGO_REGISTRY:-/usr/share/cargo/registry}
config=()
for dir in "$registry"/pkg-config-0.3.*; do
  [ -f "$dir/Cargo.toml" ] && config=(--config "patch.crates-io.pkg-config.path=\"$dir\"")
done
# After the subcommand, so that external ones (clippy) get them too.
[ $# -gt 0 ] || { echo "usage: $0 SUBCOMMAND [ARGS...]" >&2; exit 2; }
command=$1
shift
exec "${CARGO:-cargo}" "$command" --offline "${config[@]}" "$@"
