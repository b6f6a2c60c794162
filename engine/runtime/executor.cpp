// The executor's step loop. One thread drives it; kernels run on the device's compute
// stream (a worker thread on `host`), so the loop's own work (allocation, bookkeeping)
// overlaps the kernels, and the loop only waits at the end of an iteration.
//
// Invariants: ptr_[t] is non-null exactly while tensor t is resident; bytes_live_ and
// tensors_live_ are the sums over resident tensors; they equal the plan's numbers at every
// step (tests compare them).
#include "memweave/engine/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/kernels/host/host_kernels.hpp"
#include "engine/layers/layer_step.hpp"
#include "engine/runtime/conv_selection.hpp"
#include "engine/solver/sgd.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/units.hpp"

namespace memweave {
namespace k = kernels::host;

namespace {

using clock_type = std::chrono::steady_clock;

// The null device's throughput model (a Pascal-class GPU, as the paper's TITAN Xp): fp32
// flops per second and device-memory bytes per second. A step costs the larger of its
// compute and memory time.
constexpr double k_model_flops = 12e12;
constexpr double k_model_bytes_per_s = 500e9;

std::uint64_t mix(std::uint64_t x) noexcept {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

memory_policy parse_memory_policy(const std::string& name) {
  if (name == "baseline") return memory_policy::baseline;
  if (name == "liveness") return memory_policy::liveness;
  throw invalid_argument("unknown memory policy '" + name + "': expected baseline or liveness");
}

struct executor::kernel_state {
  k::kernel_context context;
  sgd_options sgd;
  kernel_state(int threads, sgd_options s) : context(threads), sgd(s) {}
};

// What workspace selection decided for one CONV step.
struct executor::conv_step {
  host_conv_choice forward, data, filter;
  std::size_t workspace_bytes = 0;
  std::string name;      // for the step record
  double seconds = 0.0;  // measured or modelled time of the chosen algorithms
};

executor::executor(const network& net, device& dev, const executor_options& options)
    : net_(net), dev_(dev), options_(options), route_(net), table_(net, route_) {
  liveness_ = std::make_unique<liveness>(table_);
  layer_memory_ = std::make_unique<layer_memory>(table_);
  plan_ = liveness_->plan(options.policy);

  // The least any policy needs: every persistent tensor plus the transient tensors of the
  // most demanding step, each rounded to whole heap blocks.
  const std::size_t block = options.heap.block_bytes ? options.heap.block_bytes : 1024;
  auto rounded = [block](std::size_t b) { return (b + block - 1) / block * block; };
  std::size_t persistent = 0;
  for (tensor_id t : plan_.persistent) persistent += rounded(table_[t].bytes);
  std::size_t worst_step = 0, worst_index = 0;
  for (std::size_t s = 0; s < table_.step_count(); ++s) {
    std::size_t b = 0;
    for (const auto& a : table_.accesses(s)) {
      if (!table_[a.tensor].persistent) b += rounded(table_[a.tensor].bytes);
    }
    if (b > worst_step) worst_step = b, worst_index = s;
  }
  const std::size_t minimum = persistent + worst_step;
  const memory_info mem = dev.memory();
  if (options.budget_bytes != 0) {
    if (options.budget_bytes > mem.free_bytes) {
      throw invalid_argument("budget " + format_bytes(options.budget_bytes) +
                             " exceeds the device's free memory " + format_bytes(mem.free_bytes) +
                             " (" + dev.name() +
                             "); lower --budget, or raise MEMWEAVE_DEVICE_BYTES on host/null");
    }
    if (options.budget_bytes < minimum) {
      const route_step rs = route_.at(worst_index);
      throw invalid_argument(
          "budget " + format_bytes(options.budget_bytes) + " is below what any policy can run " +
          net.name() + " at batch " + std::to_string(net.batch()) + " with: parameters and state " +
          format_bytes(persistent) + " plus the tensors of step " +
          std::to_string(worst_index + 1) + " (" + net[rs.layer].name + " " +
          to_string(rs.direction) + ") " + format_bytes(worst_step) + " = " +
          format_bytes(minimum) + "; raise --budget to at least that, or lower --batch");
    }
  }

  heap_options h = options.heap;
  if (options.budget_bytes != 0) h.pool_bytes = options.budget_bytes;
  heap_ = std::make_unique<device_heap>(dev, h);
  kernels_ = std::make_unique<kernel_state>(
      options.threads, sgd_options{options.learning_rate, options.momentum, options.weight_decay});
  // Timings are valid for one backend and thread count; the null device uses its model.
  selector_ = std::make_unique<conv_workspace_selector>(
      options.conv_ws, dev.touches_memory()
                           ? "host threads=" + std::to_string(kernels_->context.threads())
                           : "null model");
  ptr_.assign(table_.size(), nullptr);
  initialize_persistent();
}

executor::~executor() {
  try {
    dev_.get_stream(stream_role::compute).synchronize();
  } catch (...) {
    // A failed kernel was already reported by run_iteration; memory goes back regardless.
  }
  for (tensor_id t = 0; t < ptr_.size(); ++t) {
    if (ptr_[t] != nullptr) free_tensor(t);
  }
}

void executor::allocate_tensor(tensor_id t, std::size_t step) {
  const tensor_info& info = table_[t];
  void* p = heap_->try_allocate(info.bytes);
  if (p == nullptr) {
    const heap_stats st = heap_->stats();
    std::string where = "before the first iteration";
    if (step < route_.step_count()) {
      const route_step rs = route_.at(step);
      where = "at step " + std::to_string(step + 1) + " (" + net_[rs.layer].name + " " +
              to_string(rs.direction) + ")";
    }
    throw out_of_memory("out of budget " + where + ": tensor " + info.name + " (" +
                            to_string(info.role) + ") needs " + format_bytes(info.bytes) + "; " +
                            heap_->describe_failure(info.bytes),
                        info.bytes, st.free_bytes, st.largest_free_run);
  }
  ptr_[t] = p;
  bytes_live_ += info.bytes;
  ++tensors_live_;
}

void executor::free_tensor(tensor_id t) noexcept {
  (void)heap_->deallocate(ptr_[t]);
  ptr_[t] = nullptr;
  bytes_live_ -= table_[t].bytes;
  --tensors_live_;
}

void executor::initialize_persistent() {
  for (tensor_id t : plan_.persistent) allocate_tensor(t, route_.step_count());
  if (!dev_.touches_memory()) return;
  // Values are a pure function of (seed, tensor, element), so every policy starts equal.
  stream& compute = dev_.get_stream(stream_role::compute);
  std::vector<std::vector<float>> host(plan_.persistent.size());
  for (std::size_t i = 0; i < plan_.persistent.size(); ++i) {
    const tensor_info& info = table_[plan_.persistent[i]];
    std::vector<float>& v = host[i];
    v.assign(info.bytes / sizeof(float), 0.0f);
    const std::string suffix = info.name.substr(info.name.rfind('.') + 1);
    if (suffix == "weight") {
      // He-uniform: bound sqrt(6 / fan_in), fan_in = inputs per output element.
      const double fan_in = static_cast<double>(info.shape.per_image());
      const double bound = std::sqrt(6.0 / std::max(1.0, fan_in));
      for (std::size_t j = 0; j < v.size(); ++j) {
        const std::uint64_t r = mix(mix(options_.seed * 1000003u + info.id) + j);
        v[j] = static_cast<float>((static_cast<double>(r >> 11) * 0x1.0p-52 - 1.0) * bound);
      }
    } else if (suffix == "gamma" || suffix == "running_var") {
      std::fill(v.begin(), v.end(), 1.0f);
    }
    compute.copy_async(ptr_[info.id], v.data(), info.bytes, copy_kind::host_to_device);
  }
  compute.synchronize();
}

double executor::run_iteration(data_source* data, std::int64_t iteration) {
  const bool touches = dev_.touches_memory();
  MEMWEAVE_EXPECTS(!touches || data != nullptr,
                   "run_iteration needs a data source on a device that computes");
  stream& compute = dev_.get_stream(stream_role::compute);
  const double sim_start = compute.simulated_time_s();
  steps_.clear();
  steps_.reserve(route_.step_count());
  tensors_allocated_ = 0;
  bookkeeping_s_ = 0;
  loss_ = 0;
  for (std::size_t s = 0; s < route_.step_count(); ++s) run_step(s, data, iteration);
  compute.synchronize();
  simulated_s_ = compute.simulated_time_s() - sim_start;
  return loss_;
}

void executor::run_step(std::size_t s, data_source* data, std::int64_t iteration) {
  const auto t0 = clock_type::now();
  const route_step rs = route_.at(s);
  const layer& l = net_[rs.layer];
  const layer_tensors& lt = table_.of(l.id);
  const step_plan& sp = plan_.steps[s];
  for (tensor_id t : sp.allocate) allocate_tensor(t, s);
  tensors_allocated_ += sp.allocate.size();

  const bool forward = rs.direction == pass::forward;
  // Functional tensors first; then the convolution's workspace from what is left.
  conv_step conv;
  void* workspace = nullptr;
  if (l.type == layer_type::conv && table_.has_work(s)) {
    const bool data_grad = table_.of(l.inputs[0]).output_grad != invalid_tensor;
    conv = choose_conv(l, forward, data_grad);
    if (conv.workspace_bytes != 0) {
      workspace = heap_->try_allocate(conv.workspace_bytes);
      if (workspace == nullptr) {
        if (options_.conv_ws.mode == conv_ws_mode::max) {
          const heap_stats st = heap_->stats();
          throw out_of_memory("out of budget at step " + std::to_string(s + 1) + " (" + l.name +
                                  "): MEMWEAVE_CONV_WS=max wants a workspace of " +
                                  format_bytes(conv.workspace_bytes) + " for " + conv.name + "; " +
                                  heap_->describe_failure(conv.workspace_bytes),
                              conv.workspace_bytes, st.free_bytes, st.largest_free_run);
        }
        conv = conv_step{};  // the no-workspace algorithm always runs
        conv.name = forward ? "direct" : "direct/direct";
      }
    }
    bytes_live_ += conv.workspace_bytes;
  }
  step_record rec;
  rec.step = static_cast<int>(s + 1);
  rec.layer = l.name;
  rec.pass = forward ? 'F' : 'B';
  rec.bytes_live = bytes_live_;
  rec.heap_bytes = heap_->stats().bytes_in_use;
  rec.tensors_live = static_cast<int>(tensors_live_);
  rec.workspace_bytes = conv.workspace_bytes;
  rec.algorithm = conv.name;
  steps_.push_back(std::move(rec));

  stream& compute = dev_.get_stream(stream_role::compute);
  if (table_.has_work(s)) {
    std::vector<shape4> in_shapes;
    in_shapes.reserve(l.inputs.size());
    for (layer_id i : l.inputs) in_shapes.push_back(net_[i].output_shape);
    if (!dev_.touches_memory()) {
      const double flops =
          forward ? layers::forward_flops(l, in_shapes) : layers::backward_flops(l, in_shapes);
      const auto& row = layer_memory_->of(l.id);
      const double bytes = static_cast<double>(forward ? row.forward_bytes : row.backward_bytes);
      const double compute_s = l.type == layer_type::conv ? conv.seconds : flops / k_model_flops;
      compute.launch({}, std::max(compute_s, bytes / k_model_bytes_per_s));
    } else if (l.type == layer_type::data) {
      // The batch is made on the host and copied in on the compute stream; staging_ stays
      // untouched until the iteration's final synchronize.
      const shape4 img = l.output_shape;
      staging_.resize(static_cast<std::size_t>(img.count() + img.n));
      data->fill(iteration, img.n, staging_.data(), staging_.data() + img.count());
      compute.copy_async(ptr_[lt.output], staging_.data(), img.bytes(), copy_kind::host_to_device);
      compute.copy_async(ptr_[lt.labels], staging_.data() + img.count(),
                         static_cast<std::size_t>(img.n) * sizeof(float),
                         copy_kind::host_to_device);
    } else {
      auto f = [this](tensor_id t) {
        return t == invalid_tensor ? nullptr : static_cast<float*>(ptr_[t]);
      };
      layers::step_io io;
      io.l = &l;
      io.input_shapes = std::move(in_shapes);
      for (layer_id i : l.inputs) io.inputs.push_back(f(table_.of(i).output));
      io.output = f(lt.output);
      for (tensor_id t : lt.params) io.params.push_back(f(t));
      for (tensor_id t : lt.aux) io.aux.push_back(f(t));
      if (l.type == layer_type::softmax_loss) io.labels = f(table_.labels());
      io.workspace = workspace;
      io.workspace_bytes = conv.workspace_bytes;
      io.algo = conv.forward.algo;
      io.chunk = conv.forward.chunk;
      io.data_algo = conv.data.algo;
      io.data_chunk = conv.data.chunk;
      io.filter_algo = conv.filter.algo;
      io.filter_chunk = conv.filter.chunk;
      io.seed = mix(mix(options_.seed * 1000003u + l.id) + static_cast<std::uint64_t>(iteration));
      const auto accesses = table_.accesses(s);
      std::vector<std::pair<float*, float*>> updates;  // (gradient, weight) for the solver
      std::vector<float*> momenta;
      std::vector<std::size_t> counts;
      if (forward) {
        if (l.type == layer_type::softmax_loss) io.loss = &loss_;
      } else {
        io.output_grad = f(lt.output_grad);
        for (layer_id i : l.inputs) {
          const tensor_id g = table_.of(i).output_grad;
          bool accumulate = false;
          for (const auto& a : accesses) {
            if (a.tensor == g) accumulate = a.mode == access_mode::accumulate;
          }
          io.input_grads.push_back({f(g), accumulate});
        }
        for (tensor_id t : lt.param_grads) io.param_grads.push_back(f(t));
        std::size_t trained = 0;
        for (std::size_t p = 0; p < l.param_tensors.size(); ++p) {
          if (!l.param_tensors[p].trained) continue;
          updates.emplace_back(f(lt.param_grads[trained]), f(lt.params[p]));
          momenta.push_back(f(lt.momenta[trained]));
          counts.push_back(table_[lt.params[p]].bytes / sizeof(float));
          ++trained;
        }
      }
      const layers::step_fn fn = forward ? layers::layer_steps_for(l.type).forward
                                         : layers::layer_steps_for(l.type).backward;
      kernel_state* ks = kernels_.get();
      compute.launch([fn, ks, io = std::move(io), updates = std::move(updates),
                      momenta = std::move(momenta), counts = std::move(counts)] {
        fn(ks->context, io);
        for (std::size_t i = 0; i < updates.size(); ++i) {
          sgd_update(ks->context, ks->sgd, counts[i], updates[i].first, updates[i].second,
                     momenta[i]);
        }
      });
    }
  }
  if (workspace != nullptr) (void)heap_->deallocate(workspace);  // stream order keeps it safe
  bytes_live_ -= conv.workspace_bytes;
  for (tensor_id t : sp.free) free_tensor(t);
  bookkeeping_s_ += std::chrono::duration<double>(clock_type::now() - t0).count();
}

executor::conv_step executor::choose_conv(const layer& l, bool forward, bool input_has_gradient) {
  const auto& p = std::get<conv_params>(l.params);
  const shape4& in = net_[l.inputs[0]].output_shape;
  const bool touches = dev_.touches_memory();
  const std::size_t available = heap_->largest_free_run();
  auto pick = [&](k::conv_pass pass) -> const conv_candidate& {
    const auto& candidates =
        selector_->candidates(conv_key(touches ? "host" : "model", pass, in, p), [&] {
          if (!touches) return model_host_conv(pass, in, p, k_model_flops);
          // Measure alone: kernels still queued would share the cores and skew the times.
          dev_.get_stream(stream_role::compute).synchronize();
          return measure_host_conv(kernels_->context, pass, in, p);
        });
    return selector_->choose(candidates, available);
  };
  conv_step c;
  if (forward) {
    const conv_candidate& f = pick(k::conv_pass::forward);
    c.forward = parse_conv_candidate(f.algorithm);
    c.workspace_bytes = f.workspace_bytes;
    c.name = f.algorithm;
    c.seconds = f.seconds;
    return c;
  }
  const conv_candidate& f = pick(k::conv_pass::backward_filter);
  c.filter = parse_conv_candidate(f.algorithm);
  c.workspace_bytes = f.workspace_bytes;
  c.seconds = f.seconds;
  c.name = f.algorithm;
  if (input_has_gradient) {
    const conv_candidate& d = pick(k::conv_pass::backward_data);
    c.data = parse_conv_candidate(d.algorithm);
    c.workspace_bytes = std::max(c.workspace_bytes, d.workspace_bytes);
    c.seconds += d.seconds;
    c.name = d.algorithm + "/" + f.algorithm;
  }
  return c;
}

policy_report executor::report() const {
  policy_report r;
  r.policy = to_string(options_.policy);
  r.max_layer_bytes = layer_memory_->max_layer_bytes();
  r.persistent_bytes = plan_.persistent_bytes;
  r.tensors_allocated = tensors_allocated_;
  for (const step_record& s : steps_) {
    if (s.heap_bytes > r.peak_bytes) r.peak_bytes = s.heap_bytes, r.peak_step = s.step;
    r.peak_live_bytes = std::max(r.peak_live_bytes, s.bytes_live);
  }
  if (!steps_.empty()) {
    r.bookkeeping_us_per_step = 1e6 * bookkeeping_s_ / static_cast<double>(steps_.size());
  }
  if (!dev_.touches_memory()) r.seconds_per_iteration = simulated_s_;
  r.steps = steps_;
  return r;
}

std::vector<float> executor::read_tensor(tensor_id t) const {
  MEMWEAVE_EXPECTS(t < ptr_.size(), "tensor id " + std::to_string(t) + " is out of range");
  MEMWEAVE_EXPECTS(ptr_[t] != nullptr, "tensor " + table_[t].name + " is not resident");
  MEMWEAVE_EXPECTS(dev_.touches_memory(), "the " + std::string(to_string(dev_.kind())) +
                                              " device holds no values to read");
  std::vector<float> out(table_[t].bytes / sizeof(float));
  stream& compute = dev_.get_stream(stream_role::compute);
  compute.copy_async(out.data(), ptr_[t], table_[t].bytes, copy_kind::device_to_host);
  compute.synchronize();
  return out;
}

std::vector<std::vector<float>> executor::read_persistent() const {
  std::vector<std::vector<float>> out;
  for (tensor_id t : plan_.persistent) out.push_back(read_tensor(t));
  return out;
}

}  // namespace memweave
