#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One format for every language, with pinned tools:
#   C, C++, CUDA  clang-format (.clang-format; the public header and generated files excepted
#                 by .clang-format-ignore)
#   Python        ruff format (ruff.toml)
#   Rust          rustfmt, through cargo fmt (bindings/rust/rustfmt.toml)
#   Go            gofmt
#   Julia         .JuliaFormatter.toml records the format; no Julia runs on our machines
# Usage: tools/format.sh           rewrite the files
#        tools/format.sh --check   list what differs and exit 1 (CI)
# tools/dev.sh format and format-check install the pinned versions first.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT_VERSION=19.1.7
RUFF_VERSION=0.14.14
check=0
[ "${1:-}" = --check ] && check=1

fail() { printf 'format.sh: %s\n' "$*" >&2; exit 2; }
clang-format --version 2>/dev/null | grep -q "version $CLANG_FORMAT_VERSION" ||
  fail "clang-format $CLANG_FORMAT_VERSION is needed (pip install clang-format==$CLANG_FORMAT_VERSION, or tools/dev.sh format)"
ruff --version 2>/dev/null | grep -q "^ruff $RUFF_VERSION" ||
  fail "ruff $RUFF_VERSION is needed (pip install ruff==$RUFF_VERSION, or tools/dev.sh format)"

status=0
# The checkout's sources: tracked ones still on disk, and new ones git does not ignore (a file
# not yet added is formatted and checked too, so it is right before its first commit).
sources() {
  git ls-files --cached --others --exclude-standard "$@" | sort -u | while IFS= read -r f; do
    [ -f "$f" ] && printf '%s\n' "$f"
  done
}
mapfile -t c_files < <(sources '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.cuh')
mapfile -t py_files < <(sources '*.py')
if [ "$check" = 1 ]; then
  clang-format --dry-run -Werror "${c_files[@]}" || status=1
  ruff format --check "${py_files[@]}" || status=1
  if command -v cargo >/dev/null; then
    (cd bindings/rust && cargo fmt --check) || status=1
  else
    echo "format.sh: no cargo here, Rust not checked"
  fi
  if command -v gofmt >/dev/null; then
    unformatted=$(gofmt -l bindings/go)
    [ -z "$unformatted" ] || { echo "gofmt would change: $unformatted"; status=1; }
  else
    echo "format.sh: no gofmt here, Go not checked"
  fi
  [ "$status" = 0 ] && echo "format.sh: every file is formatted"
  exit "$status"
fi
clang-format -i "${c_files[@]}"
ruff format "${py_files[@]}"
if command -v cargo >/dev/null; then (cd bindings/rust && cargo fmt); fi
if command -v gofmt >/dev/null; then gofmt -w bindings/go; fi
