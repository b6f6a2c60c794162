// One rank: nothing to exchange. A run without mpirun uses it, so data parallelism costs a
// single process nothing (the executor then keeps the solver's updates in the backward step).
#include <cstdlib>

#include "memweave/comm/communicator.hpp"

namespace memweave {
namespace {

class single_request final : public comm_request {
 public:
  void wait_on(stream&) override {}
  double reduce_seconds() const noexcept override { return 0; }
  double waited_seconds() const noexcept override { return 0; }
};

class single_communicator final : public communicator {
 public:
  int rank() const noexcept override { return 0; }
  int size() const noexcept override { return 1; }
  std::string name() const override { return "single"; }
  std::unique_ptr<comm_request> start_allreduce(std::vector<std::span<float>> buffers, float scale,
                                                stream& after) override {
    if (scale != 1.0f) {
      after.launch([buffers = std::move(buffers), scale] {
        for (std::span<float> b : buffers)
          for (float& x : b) x *= scale;
      });
    }
    return std::make_unique<single_request>();
  }
  void broadcast(std::span<float>, int) override {}
  void broadcast_host(std::span<std::byte>, int) override {}
  std::vector<double> allgather(std::span<const double> values) override {
    return {values.begin(), values.end()};
  }
  void barrier() override {}
  void fail(const std::string&, int) noexcept override {}
};

long environment_size(const char* name) noexcept {
  const char* v = std::getenv(name);
  return v == nullptr ? 0 : std::strtol(v, nullptr, 10);
}

}  // namespace

std::unique_ptr<communicator> make_single_communicator() {
  return std::make_unique<single_communicator>();
}

bool launched_with_several_ranks() noexcept {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (environment_size(v) > 1) return true;
  }
  return false;
}

}  // namespace memweave
