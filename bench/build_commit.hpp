// SPDX-License-Identifier: Apache-2.0
// The commit the bench was built from (git describe --always --dirty at build time, or
// "unknown" outside a git checkout), so every result it writes names the code it measured.
#pragma once

namespace epc::bench {

extern const char* const kBuildCommit;

}  // namespace epc::bench
