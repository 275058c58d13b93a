// SPDX-License-Identifier: Apache-2.0
// The order in which HT combine across nodes sums one token's per-rank terms, shared by the
// flat and the expert-packed reference combines.
#pragma once

#include "tests/reference/numeric.hpp"

namespace epc::ref {

// Nodes ascending; the token's own node (`own_node`) adds its ranks' terms one by one in rank
// order, every other node adds one partial of its ranks' terms, summed in fp32 and rounded to
// bf16 (what crosses between nodes once per (token, node)). `term(d, &value)` says whether
// rank d holds a term, and writes it.
template <typename Term>
float sum_across_nodes(int nranks, int node_size, int own_node, Term&& term) {
  float acc = 0.0f;
  for (int node = 0; node < nranks / node_size; ++node) {
    const bool own = node == own_node;
    float partial = 0.0f;
    bool any = false;
    for (int d = node * node_size; d < (node + 1) * node_size; ++d) {
      float value = 0.0f;
      if (!term(d, &value)) continue;
      if (own) {
        acc = acc + value;
      } else {
        partial = partial + value;
        any = true;
      }
    }
    if (any) acc = acc + bf16_to_float(float_to_bf16(partial));
  }
  return acc;
}

}  // namespace epc::ref
