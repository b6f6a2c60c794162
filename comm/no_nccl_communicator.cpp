// Built without CUDA: no NCCL. When the cuda backend is built, memweave_comm_nccl's
// nccl_communicator.cpp defines this function instead (linked whole ahead of memweave_comm,
// as the cuda kernel launcher shadows the engine's stand-in).
#include "memweave/comm/communicator.hpp"

namespace memweave {

std::unique_ptr<communicator> make_nccl_communicator(communicator&, device&) {
  throw invalid_argument(
      "data parallelism on the cuda device needs NCCL, and memweave was built without CUDA; "
      "use --device host or rebuild with the CUDA toolkit");
}

}  // namespace memweave
