// SPDX-License-Identifier: Apache-2.0
// Where a token's low-latency message lies in a destination's slot: record [source][index].
// To a peer, a source sends only the tokens with an entry there, back to back: the index is
// the token's place on that rank (the tokens before it with an entry there, the handle's
// token_places), and the signal carries their count, so a receiver walks only the messages
// that came and no message is a header alone. A rank's messages to itself keep one record per
// token, the index being the token: a fused launch reads them in place by token
// (ll_own_messages.cuh), and its combine numbers them the same whether the dispatch was fused
// or split. Dispatch writes and places messages, and combine returns partials, through these
// two getters only.
#pragma once

#include "kernels/wire/ll_params.hpp"

namespace epc::kernels {

// Token t's index among this rank's messages to `dest`. `place`: t's place on dest
// (token_places[t][dest]), which a caller may have loaded early; unused when dest is this
// rank.
__device__ __forceinline__ int message_index(const LlCommon& c, int t, int dest, int place) {
  return dest == c.geo.rank ? t : place;
}
__device__ __forceinline__ int message_index(const LlCommon& c, int t, int dest) {
  return dest == c.geo.rank ? t : c.handle.token_places[static_cast<size_t>(t) * c.geo.nranks + dest];
}

// The messages this rank sends `dest` in a dispatch of its routing: the count its signal to
// dest carries.
__device__ __forceinline__ uint32_t messages_to(const LlCommon& c, int dest) {
  return static_cast<uint32_t>(dest == c.geo.rank ? c.num_tokens : c.handle.rank_tokens[dest]);
}

}  // namespace epc::kernels
