// SPDX-License-Identifier: Apache-2.0
// Where the ranks are: how many, how many share one NVLink (LSA) domain, how many domains.
#pragma once

#include <cstdint>

namespace epc {

struct Topology {
  int nranks = 0;
  int lsa_size = 0;   // ranks per LSA team (NVLink domain); every team has the same size
  int num_nodes = 0;  // LSA teams
  // Ranks epcomm treats as one node: the LSA team, or a virtual node inside it (a testing
  // aid, EpcGroupConfig.virtual_node_size). Data crosses between nodes only through the
  // network transport. 0 means lsa_size (set by with_virtual_nodes).
  int node_size = 0;

  int nodes() const { return nranks / node_size; }
  int node_of(int rank) const { return rank / node_size; }
  // Ranks outside one's own node: how many peers the network transport serves.
  int remote_ranks() const { return nranks - node_size; }
};

constexpr int kMaxRanks = 65536;

// Throws epc::Error (EPC_ERR_INVALID_ARGUMENT) unless nranks == lsa_size * num_nodes, all >= 1.
void check_topology(const Topology& topo);

// `topo` with node_size set from a configuration's virtual_node_size (0: the LSA team);
// throws epc::Error (EPC_ERR_INVALID_ARGUMENT) unless it divides lsa_size.
Topology with_virtual_nodes(Topology topo, uint32_t virtual_node_size);

}  // namespace epc
