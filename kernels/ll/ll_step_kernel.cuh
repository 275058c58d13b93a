// One launch per low-latency operation when it can be: the sending and receiving parts of a
// dispatch (or combine) as one kernel saves a launch and the gap between two kernels. The
// receiving part spins until every peer has sent, so the fused kernel is only launched when
// all its blocks can be resident at once (else a waiting block could keep a sending block
// of the same launch off the GPU until the timeout); otherwise the two parts run as two
// kernels, as they always do for EPC_FLAG_SEND_ONLY.
#pragma once

#include "kernels/common/resident_blocks.hpp"

namespace epc::kernels {

constexpr int kLlThreads = 512;

}  // namespace epc::kernels
