// A compile-only check of the GIN transport, never launched. The dispatch and combine
// kernels already contain GinNetTransport::put and ::signal (NetTransport branches on its
// kind at run time), but no kernel reads signals through the transport yet, so this one
// instantiates every device method of the GIN path (put, signal, read_signal, flush) and the
// transport-routed waits of device/signal_wait.cuh for the library's GPU architectures.
// Nothing calls it: group creation refuses groups that would use GIN (core/gin_support.hpp),
// and the GIN path has never run on network hardware.
#include "kernels/device/chunk_flag.cuh"
#include "kernels/device/signal_wait.cuh"
#include "kernels/net_transport_gin.hpp"
#include "kernels/peer_transport.hpp"

namespace epc::kernels {

struct GinTransportCheckParams {
  PeerTransport transport;  // with net.kind == NetKind::kGin
  uint64_t data_offset;
  uint64_t bytes;
  uint64_t flag_offset;     // one word per rank
  int rank;
  int nranks;
  uint64_t timeout_ns;
  DeviceError* error;
};

// Every rank puts `bytes` to every other rank and raises its word there; then waits for
// every rank's word through the transport, once per block and once per warp.
__global__ void gin_transport_check_kernel(GinTransportCheckParams p) {
  const PeerTransport& t = p.transport;
  const GinNetTransport& gin = t.net.gin;
  const uint64_t mine = p.flag_offset + static_cast<uint64_t>(p.rank) * sizeof(uint64_t);
  for (int peer = 0; peer < p.nranks; ++peer) {
    if (peer == p.rank) continue;
    gin.put(t.window, peer, p.data_offset, p.data_offset, p.bytes, static_cast<int>(threadIdx.x),
            static_cast<int>(blockDim.x));
    __syncthreads();
    if (threadIdx.x == 0) gin.signal(peer, peer / t.node_size, mine, 1);
  }
  if (threadIdx.x == 0) gin.flush();
  if (!wait_for_every_peer_signal(t, p.flag_offset, p.nranks, AtLeast{1}, nullptr, p.timeout_ns, p.error,
                                  kPhaseNone, p.rank)) {
    return;
  }
  warp_wait_for_every_peer_signal(t, p.flag_offset, p.nranks, AtLeast{1}, p.timeout_ns, p.error, kPhaseNone,
                                  p.rank);
  if (threadIdx.x == 0 && gin.read_signal(mine, t.node_begin / t.node_size) != 0) t.flush();
}

}  // namespace epc::kernels
