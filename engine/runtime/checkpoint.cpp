// The checkpoint file (docs/CHECKPOINT.md): built in memory, checksummed with the
// transfer engine's 64-bit checksum, and written atomically; read whole and checked
// completely before the executor is touched.
#include "memweave/engine/checkpoint.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "memweave/core/atomic_file.hpp"
#include "memweave/core/error.hpp"
#include "memweave/core/quoted.hpp"
#include "memweave/core/units.hpp"
#include "memweave/core/whole_file.hpp"
#include "memweave/swap/transfer_engine.hpp"

namespace memweave {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the checkpoint format is little-endian, as the engine's hosts are");

constexpr char k_magic[8] = {'M', 'W', 'C', 'K', 'P', 'T', '\r', '\n'};
// Magic, version, count, iteration, seed, solver, 0 (version 1; version 2 adds the schedule's
// 36 bytes, which the reader's bounds checks cover).
constexpr std::size_t k_header_bytes = 48;
constexpr std::size_t k_trailer_bytes = 8;  // checksum
constexpr std::uint32_t k_max_name = 4096;

// A tensor name read from a file, in a message: any bytes may be there (a NUL cut the
// message at it, a newline broke it: session 42's hostile run).
std::string shown(const std::string& name) {
  return quote_text(name, 256);
}

// What a checkpoint refuses in tensor `name`'s values: one that is not finite, or a negative
// running variance; empty when there is none.
std::string unsound_value(const std::string& name, const std::vector<float>& values) {
  const bool variance = name.ends_with("running_var");
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (std::isfinite(v) && !(variance && v < 0)) continue;
    return "tensor " + shown(name) + " holds " + format_number(v) + " at index " +
           std::to_string(i) + ": " +
           (variance ? "a variance must be finite and not negative" : "values must be finite");
  }
  return "";
}

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

// Reads fields off the file's bytes, each read checked against what is left before the
// trailer: a truncated file is reported as such, naming what was cut.
class reader {
 public:
  reader(const std::string& bytes, std::size_t end, const std::string& path)
      : bytes_(bytes), end_(end), path_(path) {}
  template <class T>
  T get(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  const char* take(std::size_t n, const std::string& what) {
    need(n, what);
    const char* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::size_t left() const noexcept { return end_ - pos_; }

 private:
  void need(std::size_t n, const std::string& what) const {
    if (n > end_ - pos_) {
      throw invalid_argument("checkpoint '" + path_ + "' is truncated or corrupt: " + what +
                             " needs " + std::to_string(n) + " bytes at offset " +
                             std::to_string(pos_) + ", but only " + std::to_string(end_ - pos_) +
                             " remain before the checksum");
    }
  }
  const std::string& bytes_;
  std::size_t end_;
  const std::string& path_;
  std::size_t pos_ = sizeof k_magic + sizeof(std::uint32_t);  // after magic and version
};

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

// What a version-2 file may record of a schedule: the fields its kind uses, each to the range
// --lr-schedule and --warmup take (the others are written as 0 and not read); `what` names
// the first one out of range, or is empty.
std::string schedule_fault(const lr_schedule& s) {
  if (s.warmup < 0 || s.warmup > std::numeric_limits<std::int32_t>::max()) {
    return "warm-up " + std::to_string(s.warmup) + " (expected 0 to 2^31 - 1)";
  }
  if (s.type == lr_schedule::kind::step && s.every < 1) {
    return "step interval " + std::to_string(s.every) + " (expected at least 1)";
  }
  if (s.type == lr_schedule::kind::step && !(s.gamma > 0.0 && s.gamma <= 1.0)) {
    return "step factor " + std::to_string(s.gamma) + " (expected in (0, 1])";
  }
  if (s.type == lr_schedule::kind::cosine && s.t_max < 1) {
    return "cosine length " + std::to_string(s.t_max) + " (expected at least 1)";
  }
  return {};
}

}  // namespace

checkpoint_state checkpoint_state_of(const executor& ex, std::int64_t iterations) {
  return {iterations, ex.seed(), ex.solver(), std::nullopt};
}

void save_checkpoint(const executor& ex, const std::string& path, const checkpoint_state& state) {
  state.solver.validate("save_checkpoint");
  if (state.schedule) {
    if (const std::string fault = schedule_fault(*state.schedule); !fault.empty()) {
      throw invalid_argument("save_checkpoint '" + path + "': the learning-rate schedule has a " +
                             fault + ", which a checkpoint cannot record; nothing written");
    }
  }
  if (state.iteration < 0 || state.iteration > checkpoint_max_iteration) {
    throw invalid_argument("save_checkpoint '" + path + "': iteration " +
                           std::to_string(state.iteration) + " is not from 0 to " +
                           std::to_string(checkpoint_max_iteration) +
                           ", what a checkpoint records; nothing written");
  }
  const std::vector<std::string> names = ex.persistent_names();
  std::string out;
  out.append(k_magic, sizeof k_magic);
  put<std::uint32_t>(out, checkpoint_version);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(names.size()));
  put<std::int64_t>(out, state.iteration);
  put<std::uint64_t>(out, state.seed);
  put<float>(out, state.solver.learning_rate);
  put<float>(out, state.solver.momentum);
  put<float>(out, state.solver.weight_decay);
  put<std::uint32_t>(out, 0);
  // The schedule: its kind (0: none recorded), then the fields it uses (0 where it uses none).
  lr_schedule sc{lr_schedule::kind::constant, 0, 0.0, 0, 0};
  if (state.schedule) {
    const lr_schedule& s = *state.schedule;
    sc.type = s.type;
    sc.warmup = s.warmup;
    if (s.type == lr_schedule::kind::step) sc.every = s.every, sc.gamma = s.gamma;
    if (s.type == lr_schedule::kind::cosine) sc.t_max = s.t_max;
  }
  put<std::uint32_t>(out, state.schedule ? static_cast<std::uint32_t>(sc.type) + 1 : 0);
  put<std::int64_t>(out, sc.every);
  put<double>(out, sc.gamma);
  put<std::int64_t>(out, sc.t_max);
  put<std::int64_t>(out, sc.warmup);
  for (const std::string& name : names) {
    const tensor_info& info = ex.find_tensor(name);
    const std::vector<float> v = ex.read(name);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(name.size()));
    out += name;
    for (std::int64_t d : {info.shape.n, info.shape.c, info.shape.h, info.shape.w}) {
      put<std::int64_t>(out, d);
    }
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  put<std::uint64_t>(out, transfer_checksum(out.data(), out.size()));
  write_file_atomically(path, out, "checkpoint");
}

namespace {

// Version 2's schedule record (docs/CHECKPOINT.md).
std::optional<lr_schedule> read_schedule(reader& r, const std::string& path) {
  const auto kind = r.get<std::uint32_t>("the schedule's kind");
  lr_schedule s;
  s.every = r.get<std::int64_t>("the schedule's step interval");
  s.gamma = r.get<double>("the schedule's step factor");
  s.t_max = r.get<std::int64_t>("the schedule's cosine length");
  s.warmup = r.get<std::int64_t>("the schedule's warm-up");
  const auto corrupt = [&](const std::string& what) {
    return invalid_argument("checkpoint '" + path + "' is corrupt: its learning-rate schedule " +
                            what + " (docs/CHECKPOINT.md)");
  };
  if (kind == 0) {
    if (s.every != 0 || s.gamma != 0.0 || s.t_max != 0 || s.warmup != 0) {
      throw corrupt("is recorded as none, with fields that are not 0");
    }
    return std::nullopt;
  }
  if (kind > 3) throw corrupt("has kind " + std::to_string(kind) + " (expected 0 to 3)");
  s.type = static_cast<lr_schedule::kind>(kind - 1);
  if (const std::string fault = schedule_fault(s); !fault.empty()) {
    throw corrupt("has a " + fault);
  }
  return s;
}

}  // namespace

checkpoint_file read_checkpoint(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw invalid_argument("checkpoint '" + path + "' is a directory; give a checkpoint file");
  }
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    // A device (/dev/zero) would be read until memory runs out, a pipe wait forever.
    throw invalid_argument("checkpoint '" + path +
                           "' is not a regular file (a device or a pipe); give a checkpoint file");
  }
  const auto not_a_checkpoint = [&] {
    return invalid_argument("'" + path +
                            "' is not a memweave checkpoint (it does not start with the "
                            "MWCKPT signature; see docs/CHECKPOINT.md)");
  };
  {
    // The signature before the whole file: a large file of another kind was read whole
    // first (3 GiB, 22 s; session 45's hostile run).
    char head[sizeof k_magic] = {};
    std::ifstream in(path, std::ios::binary);
    // A short file or a read error (/proc/self/mem) is told by the whole read below.
    if (in.read(head, sizeof head) && std::memcmp(head, k_magic, sizeof k_magic) != 0) {
      throw not_a_checkpoint();
    }
  }
  const std::string bytes = read_whole_file(path, "checkpoint");
  if (bytes.size() < sizeof k_magic || std::memcmp(bytes.data(), k_magic, sizeof k_magic) != 0) {
    throw not_a_checkpoint();
  }
  if (bytes.size() < k_header_bytes + k_trailer_bytes) {
    throw invalid_argument(
        "checkpoint '" + path + "' is truncated: " + std::to_string(bytes.size()) +
        " bytes, less than the " + std::to_string(k_header_bytes + k_trailer_bytes) +
        " of a header and checksum");
  }
  std::uint32_t version = 0;
  std::memcpy(&version, bytes.data() + sizeof k_magic, sizeof version);
  const std::size_t end = bytes.size() - k_trailer_bytes;
  // The checksum first: a corrupt file is then named so, not by whichever field its damage
  // reached first (a flipped byte read as a name length, or as a name).
  std::uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + end, sizeof stored);
  const std::uint64_t computed = transfer_checksum(bytes.data(), end);
  if (version != 1 && version != checkpoint_version) {
    // Another format's trailer may sum otherwise: a mismatch is said, not taken for proof (a
    // flipped byte of the version read as "format version 5570562" alone; session 43).
    throw invalid_argument(
        "checkpoint '" + path + "' has format version " + std::to_string(version) +
        "; this build reads versions 1 and " + std::to_string(checkpoint_version) +
        (stored != computed ? "; and its checksum does not match: the file is corrupt, or "
                              "written by a build of another format"
                            : ""));
  }
  if (stored != computed) {
    throw invalid_argument("checkpoint '" + path + "' is truncated or corrupt: checksum " +
                           hex(computed) + " computed, " + hex(stored) +
                           " stored (its last 8 bytes sum what precedes them)");
  }
  reader r(bytes, end, path);
  checkpoint_file f;
  const auto count = r.get<std::uint32_t>("the tensor count");
  f.state.iteration = r.get<std::int64_t>("the iteration");
  // At most 2^53, so that adding a run's iterations to it cannot overflow (INT64_MAX wrapped
  // to a negative iteration).
  if (f.state.iteration < 0 || f.state.iteration > checkpoint_max_iteration) {
    throw invalid_argument("checkpoint '" + path + "' is corrupt: iteration " +
                           std::to_string(f.state.iteration) + " is not from 0 to " +
                           std::to_string(checkpoint_max_iteration));
  }
  f.state.seed = r.get<std::uint64_t>("the seed");
  f.state.solver.learning_rate = r.get<float>("the learning rate");
  f.state.solver.momentum = r.get<float>("the momentum");
  f.state.solver.weight_decay = r.get<float>("the weight decay");
  // Checked here, naming the file: the command line takes the solver from it before any
  // load (a NaN learning rate was blamed on executor_options).
  f.state.solver.validate("checkpoint '" + path + "' is corrupt: its solver");
  if (const auto reserved = r.get<std::uint32_t>("the reserved word"); reserved != 0) {
    throw invalid_argument("checkpoint '" + path + "' is corrupt: its reserved word is " +
                           std::to_string(reserved) + ", not 0 (docs/CHECKPOINT.md)");
  }
  if (version >= 2) f.state.schedule = read_schedule(r, path);
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::string which =
        "tensor record " + std::to_string(i + 1) + " of " + std::to_string(count);
    checkpoint_tensor t;
    const auto name_bytes = r.get<std::uint32_t>(which + " (name length)");
    if (name_bytes == 0 || name_bytes > k_max_name) {
      throw invalid_argument("checkpoint '" + path + "' is corrupt: " + which + " has a name of " +
                             std::to_string(name_bytes) + " bytes (expected 1 to " +
                             std::to_string(k_max_name) + ")");
    }
    t.name.assign(r.take(name_bytes, which + " (name)"), name_bytes);
    std::int64_t dims[4];
    for (std::int64_t& d : dims) d = r.get<std::int64_t>(which + " " + shown(t.name) + " (shape)");
    t.shape = {dims[0], dims[1], dims[2], dims[3]};
    std::uint64_t elements = 1;
    for (std::int64_t d : dims) {
      // Each dimension at least 1, and the product bounded by what is left of the file.
      if (d < 1) {
        throw invalid_argument("checkpoint '" + path + "' is corrupt: tensor " + shown(t.name) +
                               " has shape " + to_string(t.shape) +
                               " (each dimension must be at least 1)");
      }
      if (static_cast<std::uint64_t>(d) > r.left() / sizeof(float) / elements) {
        throw invalid_argument("checkpoint '" + path + "' is truncated or corrupt: tensor " +
                               shown(t.name) + " has shape " + to_string(t.shape) +
                               ", more than the " + std::to_string(r.left()) + " bytes left hold");
      }
      elements *= static_cast<std::uint64_t>(d);
    }
    const char* p = r.take(elements * sizeof(float), which + " " + shown(t.name) + " (values)");
    t.values.resize(elements);
    std::memcpy(t.values.data(), p, elements * sizeof(float));
    f.tensors.push_back(std::move(t));
  }
  if (r.left() != 0) {
    throw invalid_argument("checkpoint '" + path + "' is corrupt: " + std::to_string(r.left()) +
                           " bytes follow its " + std::to_string(count) +
                           " tensors before the checksum");
  }
  // Sound bytes, but values no run that trains leaves: training from them gives NaN at once
  // (the ONNX importer refuses them alike).
  for (const checkpoint_tensor& t : f.tensors) {
    if (const std::string fault = unsound_value(t.name, t.values); !fault.empty()) {
      throw invalid_argument("checkpoint '" + path + "': " + fault +
                             " (from a run that diverged?); give another checkpoint");
    }
  }
  return f;
}

std::string unsound_persistent_value(const executor& ex) {
  for (const std::string& name : ex.persistent_names()) {
    if (std::string fault = unsound_value(name, ex.read(name)); !fault.empty()) return fault;
  }
  return "";
}

checkpoint_state load_checkpoint(executor& ex, const std::string& path) {
  return load_checkpoint(ex, read_checkpoint(path), path);
}

std::vector<std::string> checkpoint_names(const tensor_table& table, bool with_momenta) {
  std::vector<bool> momentum(table.size(), false);
  if (!with_momenta) {
    for (const layer& l : table.net().layers()) {
      for (tensor_id m : table.of(l.id).momenta) momentum[m] = true;
    }
  }
  // As liveness lists the persistent tensors (executor::persistent_names): the empty ones are
  // neither allocated nor saved.
  std::vector<std::string> names;
  for (const tensor_info& t : table.tensors()) {
    if (t.persistent && t.bytes > 0 && !momentum[t.id]) names.push_back(t.name);
  }
  return names;
}

std::string checkpoint_mismatch(const tensor_table& table, const std::vector<std::string>& names,
                                const checkpoint_file& f, const std::string& path,
                                const std::string& network_text) {
  std::vector<std::string> missing, unknown, shapes, twice;
  std::set<std::string> seen;
  for (const checkpoint_tensor& t : f.tensors) {
    const tensor_id id = table.find(t.name);
    if (id == invalid_tensor || !table[id].persistent) {
      unknown.push_back(shown(t.name));
    } else if (table[id].shape != t.shape) {
      shapes.push_back(shown(t.name) + " has shape " + to_string(t.shape) + " in the file, " +
                       to_string(table[id].shape) + " in the network");
    }
    if (!seen.insert(t.name).second) twice.push_back(shown(t.name));
  }
  for (const std::string& name : names) {
    if (!seen.contains(name)) missing.push_back("'" + name + "'");
  }
  const std::size_t faults = missing.size() + unknown.size() + shapes.size() + twice.size();
  std::string m;
  if (faults != 0) {
    m = "checkpoint '" + path + "' does not match network " +
        (network_text.empty() ? "'" + table.net().name() + "'" : network_text) + " (" +
        std::to_string(faults) + " faults; nothing was loaded)";
    auto group = [&m](const char* what, const std::vector<std::string>& items) {
      if (items.empty()) return;
      m += std::string("; ") + what + " (" + std::to_string(items.size()) + "): ";
      for (std::size_t i = 0; i < std::min<std::size_t>(items.size(), 4); ++i) {
        m += (i == 0 ? "" : ", ") + items[i];
      }
      if (items.size() > 4) m += ", ...";
    };
    group("missing from the file", missing);
    group("not persistent tensors of the network", unknown);
    group("shapes differ", shapes);
    group("in the file twice", twice);
  }
  return m;
}

checkpoint_state load_checkpoint(executor& ex, const checkpoint_file& f, const std::string& path) {
  f.state.solver.validate("checkpoint '" + path + "'");
  // Every name and shape is checked before anything is written.
  const std::string mismatch = checkpoint_mismatch(ex.table(), ex.persistent_names(), f, path);
  if (!mismatch.empty()) throw invalid_argument(mismatch);
  for (const checkpoint_tensor& t : f.tensors) ex.write(t.name, t.values);
  ex.set_solver(f.state.solver);
  ex.set_seed(f.state.seed);
  return f.state;
}

}  // namespace memweave
