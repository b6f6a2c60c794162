// Collectives between the ranks of a data-parallel run: the only door of memweave to MPI and
// NCCL (no other file includes mpi.h or nccl.h). Three implementations:
//   single  one rank (no MPI): every collective is a no-op; what runs without mpirun;
//   mpi     OpenMPI, buffers in host memory (the host device); one progress thread makes
//           every MPI call (MPI_THREAD_FUNNELED), in the order collectives were asked for,
//           which is the same order on every rank;
//   nccl    NCCL, buffers in device memory (the cuda device), bootstrapped by the mpi
//           communicator broadcasting the ncclUniqueId; host-side collectives go to it.
//
// Reduction order (results bit-identical from run to run): mpi sums with a ring written on
// MPI point-to-point (reduce-scatter then allgather, chunk c of N summed as
// ((x[c+1] + x[c+2]) + ...) + x[c] around the ring, whatever MPI_Allreduce's algorithm
// would be), so every rank ends with the same bits, run after run. nccl relies on NCCL's
// ring being deterministic for a fixed topology (NCCL_ALGO=Ring, NCCL_PROTO=Simple).
//
// Failures: a rank that fails calls fail(); every other rank's pending or next collective
// throws rank_failed naming it (the collectives poll for that notice while they wait), so
// nobody hangs in a collective the failed rank will never join.
//
// Thread-safety: one thread calls the communicator (the one driving the executor); the
// work start_allreduce enqueues runs on a stream, in that stream's order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"

namespace memweave {

/// Another rank failed: what() names it and says why.
class rank_failed : public error {
 public:
  rank_failed(int rank, const std::string& what)
      : error("rank " + std::to_string(rank) + " failed: " + what), rank_(rank) {}
  int rank() const noexcept { return rank_; }

 private:
  int rank_;
};

/// One non-blocking reduction in flight.
class comm_request {
 public:
  virtual ~comm_request() = default;
  /// Work enqueued on `s` after this call runs once the reduction is done (host: a task
  /// that blocks the stream's worker; cuda: an event wait). A failed reduction (another
  /// rank failed) surfaces as that stream's error.
  virtual void wait_on(stream& s) = 0;
  /// After the stream that waited is synchronized: seconds the reduction itself took, and
  /// seconds the waiting stream was blocked on it (what backward did not hide).
  virtual double reduce_seconds() const noexcept = 0;
  virtual double waited_seconds() const noexcept = 0;
};

class communicator {
 public:
  virtual ~communicator() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  /// "single", "mpi" or "nccl".
  virtual std::string name() const = 0;

  /// Sums each buffer over the ranks, in place, every rank's contribution multiplied by
  /// `scale` first (its share of the global batch); buffers are in the memory the
  /// communicator works on (host for mpi, device for nccl). Starts once the work enqueued
  /// on `after` so far is done; returns at once.
  virtual std::unique_ptr<comm_request> start_allreduce(std::vector<std::span<float>> buffers,
                                                        float scale, stream& after) = 0;
  /// Rank `root`'s buffer to every rank (the communicator's memory); blocking.
  virtual void broadcast(std::span<float> buffer, int root) = 0;
  /// Host memory, blocking: rank `root`'s bytes to every rank (same size everywhere).
  virtual void broadcast_host(std::span<std::byte> buffer, int root) = 0;
  /// Host memory, blocking: every rank's values, rank-major (each rank gives as many).
  virtual std::vector<double> allgather(std::span<const double> values) = 0;
  virtual void barrier() = 0;
  /// This rank failed with `what` (already reported by the caller): tells every other rank,
  /// waits (a few seconds at most) until each has heard of it or reported its own failure,
  /// then ends the whole job (MPI_Abort with `exit_code`). With one rank it returns.
  virtual void fail(const std::string& what, int exit_code) noexcept = 0;
  /// The exit code the first rank heard to have failed gave fail() (1 does not fit, 2 bad
  /// input, 3 a device failure or a bug), or 0 when none was heard of: a rank that fails
  /// because another did ends the job with that rank's code, not with its own collective's
  /// failure (an internal error's 3, or whichever rank aborted first).
  virtual int peer_failure_code() const noexcept { return 0; }
  /// "rank N failed: <its message>" once peer_failure_code() is not 0, else "": what a rank
  /// that stopped because of it reports, rather than its own abandoned collective's error.
  virtual std::string peer_failure() const { return {}; }
};

/// The one-rank communicator.
std::unique_ptr<communicator> make_single_communicator();
/// MPI_COMM_WORLD (MPI is initialized here and finalized when it is destroyed).
std::unique_ptr<communicator> make_mpi_communicator();
/// NCCL over the ranks of `host` (which bootstraps it and serves the host collectives; it
/// must outlive the result) on the cuda device `dev`. Throws invalid_argument when memweave
/// was built without CUDA and NCCL.
std::unique_ptr<communicator> make_nccl_communicator(communicator& host, device& dev);
/// Whether this process was started by an MPI launcher with more than one rank
/// (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_SIZE above 1).
bool launched_with_several_ranks() noexcept;

}  // namespace memweave
