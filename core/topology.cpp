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
    fail_argument(format("num_nodes is %d; with lsa_size %d it must satisfy lsa_size * "
                         "num_nodes == nranks (%d): every node holds the same number of ranks",
                         t.num_nodes, t.lsa_size, t.nranks));
  }
}

}  // namespace epc
