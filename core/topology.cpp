// SPDX-License-Identifier: Apache-2.0
#include "core/topology.hpp"

#include "core/error.hpp"

namespace epc {

void check_topology(const Topology& t) {
  if (t.nranks < 1 || t.nranks > kMaxRanks) {
    fail_argument(format("nranks is %d; it must be in [1, %d]", t.nranks, kMaxRanks));
  }
  if (t.lsa_size < 1 || t.lsa_size > t.nranks) {
    fail_argument(format("lsa_size is %d; it must be in [1, nranks=%d]", t.lsa_size, t.nranks));
  }
  if (t.num_nodes < 1 || static_cast<long long>(t.lsa_size) * t.num_nodes != t.nranks) {
    fail_argument(
        format("num_nodes is %d; with lsa_size %d it must satisfy lsa_size * "
               "num_nodes == nranks (%d): every node holds the same number of ranks",
               t.num_nodes, t.lsa_size, t.nranks));
  }
  if (t.node_size != 0 && (t.node_size < 1 || t.lsa_size % t.node_size != 0)) {
    fail_argument(format("node size is %d; it must divide the LSA team size %d", t.node_size, t.lsa_size));
  }
}

Topology with_virtual_nodes(Topology t, uint32_t virtual_node_size) {
  if (virtual_node_size == 0) {
    t.node_size = t.lsa_size;
    return t;
  }
  if (virtual_node_size > static_cast<uint32_t>(t.lsa_size) ||
      static_cast<uint32_t>(t.lsa_size) % virtual_node_size != 0) {
    fail_argument(
        format("EpcGroupConfig.virtual_node_size is %u; it must divide the NVLink (LSA) "
               "team size %d (or be 0: a node is the whole team)",
               virtual_node_size, t.lsa_size));
  }
  t.node_size = static_cast<int>(virtual_node_size);
  return t;
}

}  // namespace epc
