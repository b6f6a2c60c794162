// Shared by train and plan. Single-threaded.
#include "network_run.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "memweave/comm/communicator.hpp"
#include "memweave/core/atomic_file.hpp"
#include "memweave/core/checked.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/log.hpp"
#include "memweave/core/units.hpp"
#include "memweave/device/stream_timeline.hpp"
#include "memweave/engine/checkpoint.hpp"
#include "memweave/engine/layer_memory.hpp"
#include "memweave/engine/route.hpp"
#include "memweave/engine/split_plan.hpp"
#include "memweave/recompute/recompute_plan.hpp"
#include "policy_tiling.hpp"
#include "report_writers.hpp"
#include "stop_signal.hpp"
#include "timeline_writer.hpp"

namespace memweave {

namespace {

// Ranges of the options that are not variables. Each is far above any real use and keeps
// the value inside the type it is stored in; sizes beyond them are caught as tensors
// larger than the address space (engine/graph), naming the layer.
constexpr std::int64_t k_max_classes = 1 << 24;
constexpr double k_min_width = 1e-6;
constexpr double k_min_learning_rate = 1e-12;
constexpr double k_max_learning_rate = 1e3;  // keeps the float finite

// Runs `write`; a failure is kept in `failures` instead of thrown, so that what comes after
// it is still written. A later bad-input failure (an output that could not be written) is
// added to an earlier one's message, so that every output that failed is named; anything
// else keeps the first.
template <class F>
void keep_failures(std::exception_ptr& failures, F&& write) {
  try {
    write();
  } catch (const std::exception& e) {
    if (!failures) {
      failures = std::current_exception();
      return;
    }
    try {
      std::rethrow_exception(failures);
    } catch (const invalid_argument& first) {
      if (dynamic_cast<const invalid_argument*>(&e) != nullptr) {
        failures =
            std::make_exception_ptr(invalid_argument(std::string(first.what()) + "\n" + e.what()));
      }
    } catch (...) {
    }
  }
}

// A file the run reads, by the knob that named it.
struct run_input {
  std::string knob;
  std::filesystem::path path;
};

// Where `path` would be written: absolute, without `.` or `..`, its links followed, so that
// two spellings of one file not made yet (`x`, `./x`, its absolute path, a link to it) are one
// key. A file written in place or beside and renamed over the link's target (reports:
// write_file_atomically) both write where the link leads.
std::string output_key(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(link_target(path), ec);
  if (ec) return path;
  const fs::path dir = fs::weakly_canonical(p.parent_path(), ec);
  return ((ec ? p.parent_path() : dir) / p.filename()).lexically_normal().string();
}

// `replaced`: the file is written beside and renamed over where `path` leads (reports,
// checkpoints, models), so that must not be a device or a pipe either, nor the file this
// process's output goes to; a trace is written in place. `seen`: the outputs checked so
// far, by output_key, and the knob that named each.
void check_output_path(const std::string& knob, const std::string& path, bool replaced,
                       std::map<std::string, std::string>& seen,
                       const std::vector<run_input>& inputs) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Where a link leads is what is written (the link stays), so that is what is checked.
  const fs::path p(replaced ? link_target(path) : path);
  const std::string named =
      knob_value(knob, path) + (p.string() == path ? "" : " (a link to '" + p.string() + "')");
  if (fs::is_directory(p, ec)) {
    throw invalid_argument(named + " is a directory; give a file path");
  }
  // Asked of `path` (the kernel follows /dev/stdout to the pipe; link_target's reading of the
  // link names no file there).
  if (replaced && fs::exists(path, ec) && !fs::is_regular_file(path, ec)) {
    throw invalid_argument(named + " is not a regular file (a device or a pipe), which " + knob +
                           " would replace; give a file path");
  }
  if (replaced) {
    // `--json out.txt > out.txt`, or `--json /dev/stdout` with the output in a file: the file
    // renamed over it took the path, and what memweave printed went to the one unlinked
    // (as root the link /dev/stdout itself was replaced; session 45's hostile run).
    struct stat file {};
    if (::stat(p.c_str(), &file) == 0) {
      for (const int fd : {1, 2}) {
        struct stat stream {};
        if (::fstat(fd, &stream) == 0 && stream.st_dev == file.st_dev &&
            stream.st_ino == file.st_ino) {
          throw invalid_argument(named + " is the file this run's standard " +
                                 (fd == 1 ? "output" : "error") +
                                 " goes to: writing it would lose what memweave prints there; "
                                 "give another path");
        }
      }
    }
  }
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) {
    throw invalid_argument(named +
                           (fs::exists(dir, ec) ? ": '" + dir.string() + "' is not a directory;"
                                                : ": the directory '" + dir.string() +
                                                      "' does not exist; create it or") +
                           " give another path");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw invalid_argument(named + ": the directory '" + dir.string() + "' is not writable (" +
                           std::strerror(errno) + "); give another path");
  }
  for (const run_input& in : inputs) {
    if (fs::equivalent(p, in.path, ec)) {  // false (with ec) where either does not exist
      throw invalid_argument(named + " is the file " + in.knob +
                             " reads: writing it would destroy that input; give the output "
                             "another path");
    }
  }
  if (const auto [it, added] = seen.emplace(output_key(path), knob); !added) {
    throw invalid_argument(named + " is also the path " + it->second +
                           " writes in this run; give each output its own path");
  }
  // Can it be written at all (root passes access() where /proc refuses a file)? Checked now,
  // so that a run does not train for hours and then fail to write its results. A report or
  // checkpoint is written to a file beside where `path` leads and renamed over it: such a
  // file is made and removed again. A trace is written in place: an existing one is opened
  // without truncating it, a new one made and removed again.
  const std::string probe =
      replaced ? p.string() + ".memweave-check-" + std::to_string(::getpid()) : path;
  const bool existed = !replaced && fs::exists(p, ec);
  const int fd = ::open(
      probe.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK | (existed ? 0 : O_CREAT), 0644);
  if (fd < 0) {
    throw invalid_argument(named + " cannot be written (" + std::strerror(errno) +
                           "); give another path");
  }
  ::close(fd);
  if (!existed) fs::remove(probe, ec);
}

// The files the run reads: --init-from's checkpoint, the model file, the data files, the
// conv algorithm cache (which the run also writes, itself).
std::vector<run_input> run_inputs(const network_run_options& o, const std::string& data) {
  namespace fs = std::filesystem;
  std::vector<run_input> in;
  if (!o.init_path.empty()) in.push_back({"--init-from", o.init_path});
  if (is_onnx_net(o.net)) in.push_back({"--net", o.net});
  if (data.starts_with("cifar10:")) {
    const fs::path d = data.substr(8);
    std::error_code ec;
    if (fs::is_directory(d, ec)) {
      for (const auto& e : fs::directory_iterator(d, ec)) in.push_back({"--data", e.path()});
    } else {
      in.push_back({"--data", d});
    }
  }
  if (!o.executor.conv_ws.cache_path.empty()) {
    in.push_back({"MEMWEAVE_CONV_CACHE", o.executor.conv_ws.cache_path});
  }
  return in;
}

}  // namespace

void write_run_outputs(const network_run_options& o, const run_report& report, std::ostream& out) {
  for (const policy_report& p : report.policies) {
    // Only what this run wrote: a policy that stopped before running leaves none (and a
    // file of that name from an earlier run is not this run's).
    if (!p.timeline_path.empty()) {
      out << "wrote " << p.timeline_path << "\n";
    } else if (!o.timeline.empty()) {
      // Said, so that a file of that name left by an earlier run is not taken for this one's.
      out << "--trace-timeline: none written for " << p.policy
          << " (it stopped before its first step)\n";
    }
  }
  // Each output is tried even when one before it fails; the first failure is thrown after.
  std::exception_ptr first;
  const auto write = [&](const char* knob, const std::string& path, auto writer) {
    if (path.empty()) return;
    keep_failures(first, [&] {
      from_knob(knob, [&] { write_file(path, report, writer); });
      out << "wrote " << path << "\n";
    });
  };
  write("--json", o.json, write_json);
  write("--csv", o.csv, write_csv);
  write("--svg", o.svg, write_svg);
  if (first) std::rethrow_exception(first);
}

network_run_options read_network_run_options(cli_args& args) {
  network_run_options o;
  auto net = args.get("net");
  MEMWEAVE_EXPECTS(net.has_value(),
                   "--net is required: one of alexnet, vgg16, resnet50, "
                   "resnet101, resnet152, resnet:<n1>,<n2>,<n3>,<n4>, "
                   "inception_v4, densenet121, or an ONNX model file (PATH.onnx)");
  o.net = *net;
  const bool onnx = is_onnx_net(o.net);
  if (!onnx) from_knob("--net", [&] { check_zoo_name(o.net); });
  // A model file's batch may be its own (0); a zoo network's defaults to 32.
  o.zoo.batch = args.get_int("batch", 1, k_max_batch).value_or(onnx ? 0 : 32);
  const auto side = args.get_int("image-side", 1, k_max_image_side);
  const auto classes = args.get_int("classes", 1, k_max_classes);
  const auto width = args.get_double("width", k_min_width, k_max_width_scale);
  if (onnx) {
    const char* given = side ? "--image-side" : classes ? "--classes" : width ? "--width" : nullptr;
    MEMWEAVE_EXPECTS(given == nullptr, std::string(given ? given : "") +
                                           " does not apply to an ONNX model (--net " + o.net +
                                           "): its shapes and classes are the model's own");
  }
  o.zoo.image_side = side.value_or(0);
  o.zoo.classes = classes.value_or(1000);
  o.zoo.width_scale = width.value_or(1.0);

  const auto policy = args.get("policy");
  const std::string policy_knob = policy ? "--policy" : "MEMWEAVE_POLICY";
  o.policies = split_list(policy ? *policy : option_string("MEMWEAVE_POLICY"), policy_knob);
  MEMWEAVE_EXPECTS(!o.policies.empty(),
                   policy_knob + " is empty: give a policy or a comma-separated list");
  std::set<std::string> seen;
  for (const auto& p : o.policies) {
    (void)from_knob(policy_knob, [&] { return executor_policy::parse(p); });
    MEMWEAVE_EXPECTS(seen.insert(p).second,
                     policy_knob + " lists '" + p + "' twice; give each policy once");
  }
  o.budget_bytes = args.get_bytes("budget", 1, k_max_budget).value_or(0);
  o.executor.heap = heap_options::from_environment();
  MEMWEAVE_EXPECTS(o.budget_bytes == 0 || o.executor.heap.grow_bytes == 0,
                   "MEMWEAVE_POOL_GROW=" + option_raw("MEMWEAVE_POOL_GROW").value_or("") +
                       " with --budget " + *args.get("budget") +
                       ": the budget is all the device memory the run may use, and a heap that "
                       "grows would take more; unset MEMWEAVE_POOL_GROW (it is for the drop-in "
                       "allocator and runs without --budget)");
  if (auto fit = args.get("fit")) {
    MEMWEAVE_EXPECTS(*fit == "best" || *fit == "first",
                     "--fit '" + *fit + "': expected best or first");
    o.executor.heap.fit = *fit == "best" ? fit_policy::best : fit_policy::first;
  }
  if (auto ws = args.get("conv-ws")) {
    // Only the mode comes from the option: the reserve and the cache file stay the
    // environment's, read (and checked) only here.
    const conv_ws_options mode = conv_ws_options::parse(*ws, "--conv-ws");
    o.executor.conv_ws.reserve_bytes = option_bytes("MEMWEAVE_CONV_WS_RESERVE").value_or(0);
    o.executor.conv_ws.cache_path = option_string("MEMWEAVE_CONV_CACHE");
    o.executor.conv_ws.mode = mode.mode;
    o.executor.conv_ws.fixed_algorithm = mode.fixed_algorithm;
    o.executor.conv_ws.source = mode.source;
  } else {
    o.executor.conv_ws = conv_ws_options::from_environment();
  }
  const auto recompute = args.get("recompute");
  o.executor.recompute_strategy = recompute ? *recompute : option_string("MEMWEAVE_RECOMPUTE");
  (void)from_knob(recompute ? "--recompute" : "MEMWEAVE_RECOMPUTE",
                  [&] { return parse_recompute_strategy(o.executor.recompute_strategy); });
  o.executor.schedule = schedule_options::from_environment();
  o.executor.replan_from_measured = option_bool("MEMWEAVE_SCHEDULE_REPLAN");
  const auto model = args.get("cost-model");
  const std::string model_name = model ? *model : option_string("MEMWEAVE_COST_MODEL");
  o.executor.model = cost_model::preset(model_name, model ? "--cost-model" : "MEMWEAVE_COST_MODEL");
  o.model_from_device = model_name == "auto";
  const auto seed = args.get_int("seed", 0, std::numeric_limits<std::int64_t>::max());
  o.executor.seed = static_cast<std::uint64_t>(seed.value_or(1));
  o.seed_given = seed.has_value();
  const auto lr = args.get_double("lr", k_min_learning_rate, k_max_learning_rate);
  o.executor.learning_rate = static_cast<float>(lr.value_or(0.01));
  o.lr_given = lr.has_value();
  o.executor.threads = static_cast<int>(args.get_int_or_variable("threads", "MEMWEAVE_THREADS"));
  // Absent: 0, the executor's "MEMWEAVE_HOST_POOL_BYTES" (plan then models a large host).
  o.executor.host_pool_bytes =
      args.get_bytes_of_variable("host-pool", "MEMWEAVE_HOST_POOL_BYTES").value_or(0);
  // An ONNX model's image size is its own (--image-side does not apply to it).
  if (is_onnx_net(o.net)) o.executor.shape_knobs = "--batch";
  // Host memory running out names what sized it, as the user gave it.
  if (args.given().count("host-pool") != 0) {
    o.executor.host_pool_knob = "--host-pool";
  } else if (option_raw("MEMWEAVE_HOST_POOL_BYTES")) {
    o.executor.host_pool_knob = "MEMWEAVE_HOST_POOL_BYTES";
  }
  o.executor.prefetch_distance =
      static_cast<int>(args.get_int_or_variable("prefetch-distance", "MEMWEAVE_PREFETCH_DISTANCE"));
  o.json = args.get_path("json");
  o.csv = args.get_path("csv");
  o.svg = args.get_path("svg");
  o.timeline = args.get_path("trace-timeline");
  return o;
}

bool is_onnx_net(const std::string& net) {
  // Any case: a model saved as X.ONNX is one too (it was taken for an unknown zoo name).
  const std::string_view ext = ".onnx";
  return net.size() > ext.size() &&
         std::equal(
             ext.begin(), ext.end(), net.end() - static_cast<std::ptrdiff_t>(ext.size()),
             [](char e, char c) { return e == std::tolower(static_cast<unsigned char>(c)); });
}

void load_onnx_net(network_run_options& o) {
  if (is_onnx_net(o.net) && !o.onnx_file)
    o.onnx_file = std::make_shared<onnx_model>(o.net, "--net");
}

network make_planning_network(const network_run_options& o, std::int64_t batch) {
  if (!is_onnx_net(o.net)) {
    zoo_options z = o.zoo;
    z.batch = batch;
    return tile_if_asked(make_network(o.net, z), o);
  }
  MEMWEAVE_EXPECTS(o.onnx_file != nullptr, "make_planning_network: load_onnx_net(o) first");
  return tile_if_asked(o.onnx_file->import(batch, false).net, o);
}

std::size_t heap_block_of(const network_run_options& o) noexcept {
  return o.executor.heap.block_bytes ? o.executor.heap.block_bytes : 1024;
}

namespace {

// A split or tiling floor over the budget where large heap blocks round every tensor up says
// so (MEMWEAVE_BLOCK_BYTES=1GiB made a 1.5 MB network's floor 11 GiB, blamed on --budget), as
// check_budget's own message does.
template <typename F>
auto naming_large_blocks(std::size_t block, F&& plan) {
  try {
    return plan();
  } catch (const budget_too_small& e) {
    if (block <= 1024) throw;
    throw budget_too_small(std::string(e.what()) + "; every tensor takes whole heap blocks of " +
                           format_bytes(block) +
                           " (MEMWEAVE_BLOCK_BYTES): smaller blocks need less");
  }
}

}  // namespace

network tile_if_asked(network net, const network_run_options& o,
                      std::vector<tiled_segment_choice>* segments, bool name_least_budget) {
  if (segments != nullptr) segments->clear();
  if (!o.tile) return net;
  MEMWEAVE_EXPECTS(o.budget_bytes != 0,
                   "--tile cuts the layers over the budget into tiles: give --budget");
  const std::size_t block = heap_block_of(o);
  tiling_plan p = naming_large_blocks(block, [&] {
    // Tiled segments run on host and null only (cuda refuses them): the host's candidates
    // size a fixed algorithm's workspace, as the executor's floor check does.
    return plan_tiling(net, o.budget_bytes, block, "--budget", name_least_budget,
                       &o.executor.conv_ws);
  });
  if (segments != nullptr) *segments = std::move(p.segments);
  return std::move(p.net);
}

void split_parts_if_asked(const network& net, const network_run_options& o, executor_options& eo,
                          bool host_algorithms) {
  if (!o.split) return;
  MEMWEAVE_EXPECTS(o.budget_bytes != 0,
                   "--split runs the steps over the budget in micro-batches: give --budget");
  const route r(net);
  const tensor_table table(net, r);
  const layer_memory memory(table);
  const std::size_t block = heap_block_of(o);
  // An evaluation runs the forward steps alone.
  const bool evaluation = eo.evaluation_only;
  // The workspaces are the host's candidates': on cuda, whose CONV algorithms are cuDNN's
  // and chosen where the step runs, none.
  split_plan plan;
  try {
    plan = naming_large_blocks(block, [&] {
      return plan_splits(net, table, memory, o.executor.model, o.budget_bytes, block, "--budget",
                         true, evaluation,
                         host_algorithms ? promised_workspace_bytes(table, o.executor.conv_ws)
                                         : std::vector<std::size_t>{});
    });
  } catch (const budget_too_small&) {
    // Below the split floor. A policy that moves nothing to host memory runs its split steps
    // whole on the device anyway (l_i must fit): it runs unsplit, and its row names its own
    // floor (every row was told the split floor, 20 KiB where liveness needed 435).
    if (eo.policy.evict_to_host) throw;
    return;
  }
  eo.split_parts = plan.parts(table.step_count());
  eo.channel_parts = plan.channel_parts(table.step_count());
  eo.split_channel_groups = true;
  eo.split_weighed = o.split_weighed && option_bool("MEMWEAVE_SPLIT_WEIGH");
  eo.split_regions = static_cast<int>(*option_int("MEMWEAVE_SPLIT_REGIONS"));
  eo.split_compress = option_string("MEMWEAVE_SPLIT_COMPRESS") == "fp16";
}

std::string describe_tiling(const network_run_options& o) {
  return describe_segments(o.tiling);
}

network make_run_network(network_run_options& o, bool weights,
                         std::optional<imported_model>* onnx) {
  if (!is_onnx_net(o.net)) {
    network net = make_network(o.net, o.zoo);
    if (o.tile) o.untiled = std::make_shared<const network>(net);
    return tile_if_asked(std::move(net), o, &o.tiling, true);
  }
  load_onnx_net(o);
  imported_model m = o.onnx_file->import(o.zoo.batch, weights);
  o.initial_weights = std::move(m.weights);
  network net = std::move(m.net);
  if (onnx) {
    m.net = network();  // its net and weights were moved out: the bindings are what export needs
    onnx->emplace(std::move(m));
  }
  if (o.tile) o.untiled = std::make_shared<const network>(net);
  return tile_if_asked(std::move(net), o, &o.tiling, true);
}

void check_init_matches(const network_run_options& o, const network& net, bool evaluation) {
  if (!o.init) return;
  const route steps(net);
  const tensor_table table(net, steps);
  const std::string mismatch =
      checkpoint_mismatch(table, checkpoint_names(table, !evaluation), *o.init, o.init_path,
                          "'" + net.name() + "' (--net " + o.net + ")");
  if (!mismatch.empty()) throw invalid_argument("--init-from: " + mismatch);
}

std::optional<network> make_run_network_or_unfit(network_run_options& o, bool weights,
                                                 std::optional<imported_model>* onnx,
                                                 const std::string& command, std::ostream& out) {
  try {
    return make_run_network(o, weights, onnx);
  } catch (const budget_too_small& e) {
    // --tile below the least segment step: does not fit (exit 1), as a policy below its floor.
    out << "memweave " << command << " " << o.net << ": --tile does not fit: " << e.what() << "\n";
    return std::nullopt;
  }
}

std::string failure_text(const std::exception& e, const communicator* comm) {
  if (comm != nullptr && comm->peer_failure_code() != 0) return "stopped: " + comm->peer_failure();
  return e.what();
}

namespace {

bool parallel(const network_run_options& o) noexcept {
  return o.executor.comm != nullptr && o.executor.comm->size() > 1;
}

}  // namespace

std::string weights_text(const network_run_options& o) {
  return o.init                       ? "from " + o.init_path
         : !o.initial_weights.empty() ? std::string("the model's")
                                      : std::string("initial (seed)");
}

std::string trace_path_of(const network_run_options& o, const std::string& policy) {
  std::string path = o.executor.heap.trace_path;
  if (path.empty()) return path;
  if (o.policies.size() > 1) path += "." + policy;
  // Each rank's heap is its own: rank N > 0 writes beside rank 0's file, never into it
  // (two ranks truncating one file made a trace no replay could read).
  if (parallel(o) && o.executor.comm->rank() > 0) {
    path += ".rank" + std::to_string(o.executor.comm->rank());
  }
  return path;
}

double null_link_gbps(const network_run_options& o) {
  const double set = *option_double("MEMWEAVE_HOST_LINK_GBPS");
  return set > 0 ? set : o.executor.model.link_bytes_per_s / 1e9;
}

device_options planning_device(const network_run_options& o, std::size_t capacity) {
  device_options dev;
  dev.kind = "null";
  dev.capacity_bytes = capacity;
  if (option_raw("MEMWEAVE_DEVICE_BYTES"))
    dev.capacity_bytes = *option_bytes("MEMWEAVE_DEVICE_BYTES");
  dev.host_link_gbps = null_link_gbps(o);
  return dev;
}

std::string timeline_path_of(const network_run_options& o, const std::string& policy) {
  if (o.timeline.empty() || o.policies.size() <= 1) return o.timeline;
  // trace.json -> trace.utp.json (a viewer still knows it by its extension).
  const std::string ext = ".json";
  const std::string& t = o.timeline;
  if (t.size() > ext.size() && t.compare(t.size() - ext.size(), ext.size(), ext) == 0) {
    return t.substr(0, t.size() - ext.size()) + "." + policy + ext;
  }
  return t + "." + policy + ext;
}

void warn_unused_variables(const network_run_options& o) {
  if (o.budget_bytes != 0) {
    for (const char* v : {"MEMWEAVE_POOL_BYTES", "MEMWEAVE_POOL_FRACTION"}) {
      const auto raw = option_raw(v);
      if (raw && !raw->empty()) {
        log(log_level::warn, std::string(v) + "=" + *raw +
                                 " is not used: --budget sizes the device heap (the variable is "
                                 "for the drop-in allocator and runs without --budget)");
      }
    }
  }
  if (option_string("MEMWEAVE_SPLIT_COMPRESS") == "fp16" && !o.split) {
    log(log_level::warn,
        "MEMWEAVE_SPLIT_COMPRESS=fp16 compresses the micro-tensors of --split's staged steps: "
        "this run has no --split, so it does nothing");
  }
  const bool all = std::find(o.policies.begin(), o.policies.end(), "all") != o.policies.end();
  if (o.executor.schedule.compress && !all) {
    log(log_level::warn,
        "MEMWEAVE_SCHEDULE_COMPRESS=fp16 compresses the swaps of the memory schedule, which "
        "only the policy all plans: this run has none, so it does nothing");
  }
  if (option_string("MEMWEAVE_SCHEDULE_CONV_MODE") != "auto" &&
      o.executor.conv_ws.mode == conv_ws_mode::dynamic) {
    log(log_level::warn,
        "MEMWEAVE_SCHEDULE_CONV_MODE plans the convolutions of a mode that names their "
        "algorithm (--conv-ws none, max or fixed:NAME): under dynamic it does nothing");
  }
}

void check_device_option(const device_options& dev, const std::string& kind) {
  if (kind == "host") return;  // always there
  const auto named = [&](const error& e) {
    return "--device " + kind + ": " + e.what() +
           " (with --device given, MEMWEAVE_DEVICE is not read: give --device host for the "
           "simulated device)";
  };
  try {
    (void)make_device(dev);
  } catch (const no_device_error& e) {
    throw no_device_error(named(e));
  } catch (const device_error& e) {
    throw device_error(named(e));
  }
}

void check_output_paths(const network_run_options& o, const std::string& data) {
  std::map<std::string, std::string> seen;
  // The convolution algorithm cache is written too, at the run's end, where it may not exist
  // yet (then no input check sees it).
  if (!o.executor.conv_ws.cache_path.empty()) {
    seen.emplace(output_key(o.executor.conv_ws.cache_path), "MEMWEAVE_CONV_CACHE");
  }
  const std::vector<run_input> in = run_inputs(o, data);
  if (!o.json.empty()) check_output_path("--json", o.json, true, seen, in);
  if (!o.csv.empty()) check_output_path("--csv", o.csv, true, seen, in);
  if (!o.svg.empty()) check_output_path("--svg", o.svg, true, seen, in);
  if (!o.export_onnx.empty()) check_output_path("--export-onnx", o.export_onnx, true, seen, in);
  if (!o.save.empty()) check_output_path("--save", o.save, true, seen, in);
  for (const auto& p : o.policies) {
    const std::string trace = trace_path_of(o, p);
    if (!trace.empty()) check_output_path("MEMWEAVE_TRACE", trace, false, seen, in);
    const std::string timeline = timeline_path_of(o, p);
    if (!timeline.empty()) check_output_path("--trace-timeline", timeline, true, seen, in);
  }
}

namespace {

// Every rank's figures to every rank (rank 0 reports them); the tightest rank has the
// highest peak (the first of them on a tie).
void gather_ranks(communicator& comm, policy_report& p) {
  const double mine[] = {static_cast<double>(p.peak_bytes),
                         static_cast<double>(p.bytes_offloaded + p.bytes_prefetched),
                         p.seconds_per_iteration, p.allreduce_seconds, p.allreduce_wait_seconds};
  constexpr std::size_t per = std::size(mine);
  const std::vector<double> all = comm.allgather(mine);
  p.rank_reports.clear();
  for (int r = 0; r < comm.size(); ++r) {
    const double* v = all.data() + static_cast<std::size_t>(r) * per;
    rank_report q;
    q.rank = r;
    q.peak_bytes = static_cast<std::size_t>(v[0]);
    q.bytes_moved = static_cast<std::uint64_t>(v[1]);
    q.seconds_per_iteration = v[2];
    q.allreduce_seconds = v[3];
    q.allreduce_wait_seconds = v[4];
    p.rank_reports.push_back(q);
  }
  p.tightest_rank = 0;
  for (const rank_report& q : p.rank_reports) {
    if (q.peak_bytes > p.rank_reports[static_cast<std::size_t>(p.tightest_rank)].peak_bytes) {
      p.tightest_rank = q.rank;
    }
  }
}

}  // namespace

bool does_not_fit(const std::exception& e) noexcept {
  return dynamic_cast<const out_of_memory*>(&e) || dynamic_cast<const budget_too_small*>(&e);
}

bool plan_fits_budget(const network& net, const network_run_options& o, const std::string& policy,
                      const device_options& dev) {
  // Whether it fits does not depend on which split plan runs fastest.
  network_run_options fitting = o;
  fitting.split_weighed = false;
  // A stop asked before or while a probe ran (one that cut `all`'s weighing short threw
  // interrupted) leaves it without an answer: the search is told (throw_if_stop_requested).
  auto fits = [&](const network_run_options& run) {
    bool fitted = false;
    try {
      fitted = run_policy(net, run, policy, dev, 1, nullptr, nullptr, nullptr).fits;
    } catch (const error& e) {
      throw_if_stop_requested();
      if (does_not_fit(e)) return false;
      throw;
    }
    throw_if_stop_requested();
    return fitted;
  };
  // `all` fits where any configuration its weighing runs fits, and the weighing runs the
  // cache alone too (executor::weigh_policy): that one plans no schedule (the schedule
  // planner's time grows with the square of the steps: a weighed plan of a ResNet of 4116
  // layers takes 27 s), so it is asked first, and the whole weighing only where it fails.
  if (executor_policy::parse(policy).planned && o.budget_bytes != 0 &&
      o.executor.weigh_alternatives) {
    network_run_options reactive = fitting;
    reactive.executor = on_cache_alone(fitting.executor);
    reactive.executor.weigh_alternatives = false;
    if (fits(reactive)) return true;
  }
  return fits(fitting);
}

policy_report run_policy(const network& net, const network_run_options& o,
                         const std::string& policy, const device_options& device_opts,
                         int iterations, data_source* data, std::ostream* progress,
                         std::string* device_name, std::exception_ptr* output_error,
                         bool* heap_made) {
  auto dev = make_device(device_opts);
  if (device_name) *device_name = dev->name();
  executor_options eo = o.executor;
  if (o.model_from_device) eo.model = cost_model::for_device(*dev);
  // A heap trace that could not be written whole (a full disk): told when the heap closes it,
  // so it lives longer than the executor.
  std::string trace_error;
  eo.heap.on_trace_error = [&trace_error](const std::string& m) {
    if (trace_error.empty()) trace_error = m;
  };
  // Data parallelism on the cuda device: NCCL over the MPI ranks, on this device.
  std::unique_ptr<communicator> nccl;
  if (parallel(o) && dev->kind() == device_kind::cuda) {
    nccl = make_nccl_communicator(*o.executor.comm, *dev);
    eo.comm = nccl.get();
  }
  eo.policy = executor_policy::parse(policy);
  eo.budget_bytes = o.budget_bytes;
  eo.heap.trace_path = trace_path_of(o, policy);
  // A stop asked while `all` weighs its configurations ends the policy there (a split plan
  // at a large batch weighed for minutes after the first SIGTERM; session 44's hostile run).
  if (!parallel(o)) eo.stop = [] { return stop_requested() != 0; };
  // Declared before the executor, which records into it until it is destroyed.
  std::optional<stream_timeline> timeline;
  // Rank 0 speaks for all, as for the reports (every rank writing one path made it invalid
  // JSON).
  if (!o.timeline.empty() && (!parallel(o) || o.executor.comm->rank() == 0)) {
    eo.timeline = &timeline.emplace(*dev);
  }
  policy_report report;
  report.image_side = net[net.data_layer()].output_shape.h;
  // A policy that ends without its weights says so where it asked for them to be saved: the
  // row's failure alone left the user looking for the file (session 45's review).
  const std::string unsaved = o.save.empty() ? "" : "; --save " + o.save + " not written";
  // Under --tile, run_policies tiles a policy that does not fit anew (policy_tiling.hpp), and
  // says so where that does not fit either.
  const std::string& not_fitting = unsaved;
  std::unique_ptr<executor> ex;
  try {
    split_parts_if_asked(net, o, eo, dev->kind() != device_kind::cuda);
    ex = std::make_unique<executor>(net, *dev, eo);
    if (heap_made != nullptr) *heap_made = true;
  } catch (const error& e) {  // below the policy's floor, or not even the parameters fit
    // Data parallelism: one rank not fitting stops every rank (train_command.cpp).
    if (!does_not_fit(e) || parallel(o)) throw;
    report.policy = policy;
    report.fits = false;
    report.failure = e.what() + not_fitting;
    // What the network is, whatever ran: its row said max(l_i) 0 B.
    const route steps(net);
    const tensor_table table(net, steps);
    report.max_layer_bytes = layer_memory(table).max_layer_bytes();
    report.persistent_bytes = table.persistent_bytes();
    return report;
  }
  // The model's weights, then a checkpoint's (--init-from wins).
  if (dev->touches_memory()) {
    for (const auto& [name, values] : o.initial_weights) ex->write(name, values);
  }
  if (o.init) {
    // The checkpoint's tensors, then the settings resolved from it and the command line.
    (void)from_knob("--init-from", [&] { return load_checkpoint(*ex, *o.init, o.init_path); });
    ex->set_seed(eo.seed);
  }
  const solver_settings base{eo.learning_rate, eo.momentum, eo.weight_decay};
  // The last iteration's streams, written on every way out below once the executor ran
  // (destroying it first waits for its streams, so every span is complete).
  auto save_timeline = [&] {
    if (!timeline) return;
    ex.reset();
    const std::string path = timeline_path_of(o, policy);
    std::ostringstream text;
    write_timeline_trace(text, timeline->spans(),
                         o.net + " batch " + std::to_string(net.batch()) + ", " + policy);
    // Replaced atomically, like the reports: a full disk leaves an earlier file whole and
    // no half-written one that takes the space the other outputs need.
    write_file_atomically(path, text.view(), "--trace-timeline");
    report.timeline_path = path;
  };
  // Timed: every iteration but the first (it allocates and plans; the only one of a run of
  // one), and of those, where there are any, only the ones after all's re-planning trial
  // (each of its iterations also re-places the parameters for the other schedule): the
  // speed the run goes on at.
  double measured_s = 0, settled_s = 0;
  int measured = 0, settled = 0, settled_first = 0;
  std::vector<double> losses;
  try {
    for (int it = 0; it < iterations; ++it) {
      // A stop asked (Ctrl-C, SIGTERM): the iterations run are finished work, reported,
      // saved and written as a whole run's are, with how many ran.
      if (stop_requested() != 0) break;
      const std::int64_t batch = o.first_iteration + it;
      solver_settings now = base;
      now.learning_rate = static_cast<float>(o.schedule.rate(base.learning_rate, batch));
      ex->set_solver(now);
      const bool was_settled = ex->settled();
      const auto t0 = std::chrono::steady_clock::now();
      const double loss = ex->run_iteration(dev->touches_memory() ? data : nullptr, batch);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      losses.push_back(loss);
      if (!std::isfinite(loss)) {
        // Not a success: kept as a failed row with everything it measured.
        char lr[32];
        std::snprintf(lr, sizeof lr, "%g", static_cast<double>(eo.learning_rate));
        report = ex->report();
        report.losses = std::move(losses);
        report.iterations_run = it + 1;  // the JSON said 0 beside 12 losses (hostile run)
        report.fits = false;
        report.failed = true;
        // The first loss comes before any update: no learning rate made it (a model's weights
        // near float's largest were blamed on --lr; session 42's hostile run).
        report.failure = it == 0 ? "policy " + policy + ": the loss of iteration 1 is " +
                                       std::to_string(loss) + ", before any update: the weights (" +
                                       weights_text(o) +
                                       ") give outputs that are not finite; check their values"
                                 : "policy " + policy + ": the loss of iteration " +
                                       std::to_string(it + 1) + " is " + std::to_string(loss) +
                                       ": training diverged; lower --lr (now " + lr + ")";
        report.failure += unsaved;
        save_timeline();
        return report;
      }
      if (it > 0 || iterations == 1) measured_s += s, ++measured;
      if (it > 0 && was_settled) {
        if (settled++ == 0) settled_first = it + 1;
        settled_s += s;
      }
      if (progress) {
        // The iteration's peak, as its row reports it (the heap's own peak is reset step by
        // step: executor::step_heap_peak).
        const std::size_t in_use = ex->heap().stats().bytes_in_use;
        const std::size_t peak = ex->report().peak_bytes;
        char line[256];
        std::snprintf(line, sizeof line,
                      "%-9s iter %4d/%d  loss %9.5f  %8.1f img/s  in use %11s  peak %11s\n",
                      policy.c_str(), it + 1, iterations, loss,
                      static_cast<double>(net.batch()) / s, format_bytes(in_use).c_str(),
                      format_bytes(peak).c_str());
        *progress << line << std::flush;
      }
    }
  } catch (const out_of_memory& e) {
    if (parallel(o)) throw;
    // The steps that ran stay in the report: where memory was when it ran out, and the
    // iterations before (their losses).
    report = ex->report();
    report.iterations_run = static_cast<int>(losses.size());
    report.losses = std::move(losses);
    report.fits = false;
    report.failure = e.what() + not_fitting;
    save_timeline();
    return report;
  }
  // Fewer than asked where a signal stopped the run.
  const int done = static_cast<int>(losses.size());
  report = ex->report();
  report.losses = std::move(losses);
  report.iterations_run = done;
  if (done < iterations) {
    report.stopped_by = signal_name(stop_requested());
    if (done == 0) {  // nothing ran: no figures to give
      report.fits = false;
      report.failure = "stopped by " + report.stopped_by + " before its first iteration";
    }
  }
  // The last update may have diverged with every loss finite (a loss is taken before its
  // update): its weights would be saved and exported, and a resumed run refuses them (session
  // 45's hostile run). Not a success, and nothing of them is written.
  std::string unsound;
  if (dev->touches_memory() && done > 0) unsound = unsound_persistent_value(*ex);
  if (!unsound.empty()) {
    char lr[32];
    std::snprintf(lr, sizeof lr, "%g", static_cast<double>(eo.learning_rate));
    report.fits = false;
    report.failed = true;
    report.failure = "policy " + policy + ": after the update of iteration " +
                     std::to_string(o.first_iteration + done) + ", " + unsound +
                     ": training diverged; lower --lr (now " + lr + ")";
    report.failure += unsaved;
    if (o.on_trained) report.failure += "; the model not exported";
  }
  // What the run leaves besides its report: a failure to write one (a full disk) loses
  // neither the row nor the other outputs.
  const auto keep_going = [&](const std::function<void()>& write) {
    if (output_error == nullptr || parallel(o)) return write();
    keep_failures(*output_error, write);
  };
  // Under data parallelism every rank holds the same weights: rank 0 saves them.
  if (!o.save.empty() && unsound.empty() && dev->touches_memory() &&
      (!parallel(o) || o.executor.comm->rank() == 0)) {
    keep_going([&] {
      from_knob("--save", [&] {
        // The base rate, not the last iteration's scheduled one the executor holds: a run
        // resumed from the file takes it as its --lr and schedules it again.
        checkpoint_state state = checkpoint_state_of(*ex, o.first_iteration + done);
        state.solver.learning_rate = base.learning_rate;
        state.schedule = o.schedule;  // which a resumed run continues
        save_checkpoint(*ex, o.save, state);
      });
      if (progress) {
        *progress << "saved the weights after iteration " << o.first_iteration + done << " to "
                  << o.save << "\n";
      }
    });
  }
  if (o.on_trained && unsound.empty()) keep_going([&] { o.on_trained(policy, *ex); });
  keep_going(save_timeline);
  ex.reset();  // its heap closes the trace
  if (!trace_error.empty()) {
    keep_going([&] { throw invalid_argument("MEMWEAVE_TRACE: " + trace_error); });
  }
  if (dev->touches_memory() && measured > 0) {
    if (settled > 0) {
      report.seconds_per_iteration = settled_s / settled;
      report.timed_first = settled_first;
    } else {
      report.seconds_per_iteration = measured_s / measured;
      report.timed_first = done == 1 ? 1 : 2;
    }
    report.timed_last = done;
    report.images_per_s = static_cast<double>(net.batch()) / report.seconds_per_iteration;
  }
  if (parallel(o)) {
    // Images of the global batch per second.
    report.images_per_s *=
        static_cast<double>(o.executor.global_batch) / static_cast<double>(net.batch());
    gather_ranks(*o.executor.comm, report);
  }
  return report;
}

policy_report run_policy_retiling(const network& net, const network_run_options& o,
                                  const std::string& policy, const device_options& dev,
                                  int iterations, data_source* data, std::ostream* progress,
                                  std::string* device_name, std::exception_ptr* output_error,
                                  bool* heap_made) {
  policy_report row = run_policy(net, o, policy, dev, iterations, data, progress, device_name,
                                 output_error, heap_made);
  if (!o.tile || !o.untiled || row.fits || row.failed || !row.stopped_by.empty()) return row;
  // The budget's segments did not fit this policy; tiled finer, it may.
  std::optional<policy_tiling> finer;
  try {
    tiling_ladder ladder(*o.untiled, o);
    finer = retile_for_policy(ladder, o, policy, o.tiling);
  } catch (const stopped_by_signal&) {
    return row;  // the stop is the caller's to act on (stop_requested)
  }
  if (!finer) {
    row.failure +=
        "; that is with the budget's tiled segments, and tiled for smaller targets "
        "(half an octave apart, down to the finest tiles) it did not fit either";
    return row;
  }
  row = run_policy(finer->net, o, policy, dev, iterations, data, progress, device_name,
                   output_error, heap_made);
  row.tiling_target_bytes = finer->target_bytes;
  row.tiling = std::move(finer->segments);
  return row;
}

int run_policies(const network& net, const network_run_options& o, const device_options& dev,
                 int iterations, data_source* data, run_report& report, std::ostream& out,
                 std::ostream* progress) {
  std::exception_ptr first_error, output_error;
  // Ctrl-C or SIGTERM stops at the next iteration and writes what finished (stop_signal.hpp);
  // not under data parallelism, whose ranks must stop together (the signal ends them there).
  std::optional<stop_signal_scope> stop_scope;
  if (!parallel(o)) stop_scope.emplace();
  for (const std::string& policy : o.policies) {
    if (stop_requested() != 0) break;  // the policies not begun are not run
    bool heap_made = false;
    try {
      report.policies.push_back(run_policy_retiling(net, o, policy, dev, iterations, data, progress,
                                                    &report.device, &output_error, &heap_made));
      if (o.amend) o.amend(report.policies.back());
    } catch (const interrupted& e) {
      // Stopped before its first iteration: a row of no figures, and the run ends as a stop.
      policy_report stopped;
      stopped.policy = policy;
      stopped.fits = false;
      stopped.stopped_by = signal_name(stop_requested());
      stopped.failure =
          "stopped by " + stopped.stopped_by + " before its first iteration (" + e.what() + ")";
      report.policies.push_back(std::move(stopped));
    } catch (const std::exception& e) {
      // Kept as a row; the policies after it still run and everything is written. Under data
      // parallelism every rank stops (train_command.cpp: the failure reached all of them), but
      // only after rank 0 wrote what the policies before it finished (they were thrown away:
      // session 42's hostile run).
      policy_report failed;
      failed.policy = policy;
      failed.fits = false;
      // A rank below the policy's floor (rethrown by run_policy so that every rank stops), or
      // stopped by another rank that was, does not fit, as one process would not: its row read
      // ERR (session 47's hostile run). 1 is a failure's code for "does not fit".
      const communicator* comm = o.executor.comm;
      failed.failed = !does_not_fit(e) && !(comm != nullptr && comm->peer_failure_code() == 1);
      failed.failure = failure_text(e, o.executor.comm);
      report.policies.push_back(std::move(failed));
      if (!first_error) first_error = std::current_exception();
      if (parallel(o)) break;
    }
    const std::string trace = trace_path_of(o, policy);
    if (!trace.empty()) {
      // A policy that stopped before its heap was made (below its floor) wrote none: the line
      // named a file that was not there (session 43's hostile run). Asked of the heap, not of
      // the file's time, which a device (/dev/null) does not keep (session 45's). A trace
      // whose writing failed is told as an error at the end.
      out << "heap trace of " << policy << ": "
          << (heap_made ? trace : "none written (it stopped before its heap was made)") << "\n";
    }
  }
  if (!parallel(o) || o.executor.comm->rank() == 0) {
    write_summary(out, report);
    keep_failures(output_error, [&] { write_run_outputs(o, report, out); });
  }
  if (const int signal = stop_requested(); signal != 0) throw stopped_by_signal(signal);
  if (first_error) std::rethrow_exception(first_error);
  if (output_error) std::rethrow_exception(output_error);
  for (const auto& p : report.policies) {
    if (p.failed) throw invalid_argument(p.failure);  // diverged
  }
  for (const auto& p : report.policies) {
    if (p.fits) return 0;
  }
  return 1;
}

}  // namespace memweave
