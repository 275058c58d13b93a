#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the bindings' GPU test binaries here, for a GPU machine that has no Rust or Go
# toolchain, into OUT_DIR (default .gpu/bindings; tools/gpu/stage.sh calls this):
#   rust-gpu_ll-linked   Rust LL dispatch/combine test, libepcomm linked (found at run time
#                        through LD_LIBRARY_PATH, which takes precedence over its RUNPATH)
#   rust-gpu_ll-dlopen   the same test with the dlopen feature (loads $EPCOMM_LIB)
#   rust-gpu_ht-linked   Rust HT dispatch/combine test (EXACT and CAPACITY handles), linked
#   rust-gpu_ht-dlopen   the same test with the dlopen feature
#   rust-gpu-linked      the Rust group-lifecycle GPU test
#   rust-ll_step         the Rust example of one LL step (bindings/rust/epcomm/examples), linked
#   go-epcomm.test       the Go package's tests (go test -c), the GPU ones included
#   go-llstep            the Go example of one LL step (bindings/go/examples/llstep)
# Run them with tools/gpu/run_bindings.sh. Usage: build_bindings.sh [BUILD_DIR] [OUT_DIR]
# A binding whose toolchain is missing here is skipped with a message.
set -euo pipefail
# Paths are relative to where it is run from; everything else to the repository root.
build=$(cd "${1:-build}" && pwd)
out=${2:-.gpu/bindings}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
root=$PWD
lib_dir=$build/capi
[ -f "$lib_dir/libepcomm.so" ] || { echo "build_bindings: no $lib_dir/libepcomm.so; build first" >&2; exit 1; }

log() { printf '[build_bindings] %s\n' "$*" >&2; }

# The executable cargo built for test target $1, from cargo's JSON messages on stdin.
cargo_executable() {
  python3 -c '
import json, sys
for line in sys.stdin:
    try:
        message = json.loads(line)
    except ValueError:
        continue
    if message.get("reason") == "compiler-artifact" and message.get("executable") \
            and message["target"]["name"] == sys.argv[1]:
        print(message["executable"])' "$1" | tail -n 1
}

if command -v cargo >/dev/null; then
  export EPCOMM_LIB_DIR=$lib_dir CARGO_TARGET_DIR=$build/bindings/rust/cargo-target
  for variant in linked dlopen; do
    features=()
    [ "$variant" = dlopen ] && features=(--features dlopen)
    messages=$("$root/bindings/rust/cargo-offline.sh" test --no-run --manifest-path "$root/bindings/rust/Cargo.toml" \
      -p epcomm --test gpu_ll --test gpu_ht --test gpu "${features[@]}" --message-format=json)
    for target in gpu_ll gpu_ht gpu; do
      [ "$target" = gpu ] && [ "$variant" = dlopen ] && continue
      exe=$(cargo_executable "$target" <<<"$messages")
      [ -n "$exe" ] || { log "cargo built no executable for test $target ($variant)"; exit 1; }
      # Debug info is most of a test binary's size and not needed to run it.
      strip --strip-debug -o "$out/rust-$target-$variant" "$exe"
    done
  done
  messages=$("$root/bindings/rust/cargo-offline.sh" build --manifest-path "$root/bindings/rust/Cargo.toml" \
    -p epcomm --example ll_step --message-format=json)
  exe=$(cargo_executable ll_step <<<"$messages")
  [ -n "$exe" ] || { log "cargo built no executable for example ll_step"; exit 1; }
  strip --strip-debug -o "$out/rust-ll_step" "$exe"
  log "Rust: $(cd "$out" && ls rust-* | tr '\n' ' ')"
else
  log "cargo not found: no Rust GPU test binaries"
fi

if command -v go >/dev/null; then
  (
    cd "$root/bindings/go"
    export CGO_ENABLED=1 CGO_CFLAGS="-I$root/capi/include" CGO_LDFLAGS="-L$lib_dir" \
      GOCACHE=$build/bindings/go/gocache GOPATH=$build/bindings/go/gopath GOTOOLCHAIN=local \
      GOPROXY=off GOFLAGS=-buildvcs=false
    # The header and library from the variables above, not from pkg-config.
    go test -tags epcomm_nopkgconfig -c -o "$out/go-epcomm.test" ./epcomm
    go build -tags epcomm_nopkgconfig -o "$out/go-llstep" ./examples/llstep
  )
  log "Go: go-epcomm.test go-llstep"
else
  log "go not found: no Go GPU test binary"
fi
