// Where the ranks are: how many, how many share one NVLink (LSA) domain, how many domains.
#pragma once

namespace epc {

struct Topology {
  int nranks = 0;
  int lsa_size = 0;   // ranks per LSA team (NVLink domain); every team has the same size
  int num_nodes = 0;  // LSA teams
};

constexpr int kMaxRanks = 65536;

// Throws epc::Error (EPC_ERR_INVALID_ARGUMENT) unless nranks == lsa_size * num_nodes, all >= 1.
void check_topology(const Topology& topo);

}  // namespace epc
