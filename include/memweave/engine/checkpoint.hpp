// Checkpoints: every persistent tensor of an executor (parameters, momenta, BN running
// statistics) by name, with the training state that resuming needs besides them (the next
// iteration, which numbers the batches, the dropout masks and the learning-rate schedule's
// position, and the solver's settings). The file format is docs/CHECKPOINT.md: versioned,
// checksummed, little-endian.
//
// Saving writes a temporary file beside the target and renames it over it, so a crash or a
// full disk leaves the previous file whole. Loading reads and checks the whole file (magic,
// version, checksum, every record's bounds, and every name and shape against the network)
// before it writes any tensor: a truncated, foreign, corrupt or mismatched file is an
// invalid_argument naming the file and what is wrong, and the executor is left unchanged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memweave/engine/executor.hpp"
#include "memweave/engine/solver_settings.hpp"
#include "memweave/engine/tensor_table.hpp"

namespace memweave {

/// The file format version this build writes. It reads it and version 1, which records no
/// learning-rate schedule (checkpoint_state::schedule empty).
inline constexpr std::uint32_t checkpoint_version = 2;

/// The largest iteration a checkpoint records (2^53: a double counts it exactly, and adding
/// a run's iterations to it cannot overflow).
inline constexpr std::int64_t checkpoint_max_iteration = std::int64_t{1} << 53;

/// What a checkpoint holds besides the tensors.
struct checkpoint_state {
  std::int64_t iteration = 0;  ///< the next iteration to run (iterations done so far)
  std::uint64_t seed = 1;      ///< executor::seed(): the dropout masks of later iterations
  solver_settings solver;      ///< the settings when saved (memweave train: its base rate)
  /// The learning-rate schedule and warm-up that scaled the base rate (memweave train):
  /// resuming without --lr-schedule and --warmup continues it. Empty where none was recorded
  /// (a version-1 file; a caller that schedules its own rate).
  std::optional<lr_schedule> schedule;
};

/// One tensor of a checkpoint file.
struct checkpoint_tensor {
  std::string name;
  shape4 shape;
  std::vector<float> values;
};

/// The state of `ex` after `iterations` iterations (its seed and solver settings).
checkpoint_state checkpoint_state_of(const executor& ex, std::int64_t iterations);

/// Writes every persistent tensor of `ex` and `state` to `path` (atomically: a temporary
/// file renamed over it). Throws invalid_argument naming `path` when it cannot be written
/// (the previous file, if any, stays); the executor's device must hold values (not null).
void save_checkpoint(const executor& ex, const std::string& path, const checkpoint_state& state);

/// The first value of ex's persistent tensors (in persistent_names' order) that a checkpoint
/// refuses: not finite, or a negative running variance; described as "tensor 'conv1.weight'
/// holds nan at index 0", or empty where there is none. The device must hold values.
std::string unsound_persistent_value(const executor& ex);

/// A checkpoint file's contents.
struct checkpoint_file {
  checkpoint_state state;
  std::vector<checkpoint_tensor> tensors;  ///< in the file's order
};

/// Reads and checks `path` (magic, version, every record's bounds, checksum) without an
/// executor. Throws invalid_argument naming the file and the fault.
checkpoint_file read_checkpoint(const std::string& path);

/// The names of the tensors a checkpoint of `table`'s network holds, as an executor lists
/// them (executor::persistent_names): every persistent tensor, without the momenta where
/// `with_momenta` is false (an executor that only evaluates keeps none).
std::vector<std::string> checkpoint_names(const tensor_table& table, bool with_momenta);

/// Why `file` (read from `path`) cannot be loaded into `table`'s network, whose persistent
/// tensors are `names`: each must be in the file once with its shape, and nothing else.
/// The message load_checkpoint throws, naming the network by `network_text` (its own name
/// quoted when empty); empty when the file matches. A command checks this before it runs
/// anything, so that a mismatched file is refused once, not by every policy.
std::string checkpoint_mismatch(const tensor_table& table, const std::vector<std::string>& names,
                                const checkpoint_file& file, const std::string& path,
                                const std::string& network_text = "");

/// Loads `path` into `ex`: the file must hold exactly ex's persistent tensors (each name
/// once, each shape equal); then every tensor is written and the solver's settings and the
/// seed set.
/// Returns the state saved (the caller resumes at state.iteration). On any fault nothing is
/// written: invalid_argument naming the file and every missing, unknown or mismatched
/// tensor (the first few).
checkpoint_state load_checkpoint(executor& ex, const std::string& path);
/// The same from a file already read (`path` names it in messages).
checkpoint_state load_checkpoint(executor& ex, const checkpoint_file& file,
                                 const std::string& path);

}  // namespace memweave
