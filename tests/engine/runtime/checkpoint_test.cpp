// Checkpoints and per-iteration solver settings: resuming is bit-identical to training
// straight through (batches, dropout masks and the learning-rate schedule continue at the
// saved iteration); a truncated, foreign, corrupt or mismatched file is an error that loads
// nothing; schedules and settings give hand-computed values and refuse bad ones.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "engine_test_util.hpp"
#include "memweave/engine/checkpoint.hpp"
#include "memweave/swap/transfer_engine.hpp"

namespace memweave {
namespace {

using test::policy_options;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("memweave_ckpt_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Trains iterations [from, to) with a step schedule set before each, appending the losses.
void train_range(executor& ex, data_source& data, const lr_schedule& schedule, std::int64_t from,
                 std::int64_t to, std::vector<double>& losses) {
  for (std::int64_t it = from; it < to; ++it) {
    solver_settings s = ex.solver();
    s.learning_rate = static_cast<float>(schedule.rate(0.02, it));
    ex.set_solver(s);
    losses.push_back(ex.run_iteration(&data, it));
  }
}

TEST(checkpoint, resuming_is_bit_identical_to_training_straight_through) {
  const network net = test::tiny_trainable_net();
  const shape4 img = net[net.data_layer()].output_shape;
  const lr_schedule schedule = lr_schedule::parse("step:2:0.5", "test");
  const std::string path = temp_path("resume");
  for (const std::string policy : {"liveness", "utp"}) {
    const executor_options o = policy_options(policy);
    test::training_result straight;
    {
      auto dev = test::make_test_device("host");
      auto data = make_synthetic_source(img, net.classes(), 7);
      executor ex(net, *dev, o);
      train_range(ex, *data, schedule, 0, 5, straight.losses);
      straight.persistent = ex.read_persistent();
    }
    test::training_result resumed;
    {
      auto dev = test::make_test_device("host");
      auto data = make_synthetic_source(img, net.classes(), 7);
      executor ex(net, *dev, o);
      train_range(ex, *data, schedule, 0, 2, resumed.losses);
      save_checkpoint(ex, path, checkpoint_state_of(ex, 2));
    }
    {
      auto dev = test::make_test_device("host");
      auto data = make_synthetic_source(img, net.classes(), 7);
      executor_options other = o;
      other.seed = 99;  // the checkpoint replaces the initial values and the dropout seed
      other.momentum = 0.5f;
      executor ex(net, *dev, other);
      const checkpoint_state st = load_checkpoint(ex, path);
      EXPECT_EQ(st.iteration, 2);
      EXPECT_EQ(ex.solver().momentum, o.momentum);
      EXPECT_EQ(ex.seed(), o.seed);
      train_range(ex, *data, schedule, st.iteration, 5, resumed.losses);
      resumed.persistent = ex.read_persistent();
    }
    test::expect_bit_identical(straight, resumed, policy);
  }
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp-" + std::to_string(::getpid())));
  std::filesystem::remove(path);
}

TEST(checkpoint, a_bad_file_is_a_clear_error_and_loads_nothing) {
  const network net = test::tiny_trainable_net();
  auto dev = test::make_test_device("host");
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  executor ex(net, *dev, policy_options("liveness"));
  ex.run_iteration(data.get(), 0);
  const std::string good = temp_path("good"), bad = temp_path("bad");
  save_checkpoint(ex, good, checkpoint_state_of(ex, 1));
  const std::string bytes = slurp(good);
  // A fresh executor, whose tensors must stay as they are after every failed load.
  auto dev2 = test::make_test_device("host");
  executor fresh(net, *dev2, policy_options("liveness"));
  const auto before = fresh.read_persistent();
  auto expect_refused = [&](const std::string& contents, const std::string& words) {
    spit(bad, contents);
    try {
      (void)load_checkpoint(fresh, bad);
      ADD_FAILURE() << "accepted a file that should hold: " << words;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
    EXPECT_EQ(fresh.read_persistent(), before) << words;
  };
  expect_refused("", "not a memweave checkpoint");
  expect_refused("weights,1,2,3\n", "not a memweave checkpoint");
  expect_refused(bytes.substr(0, 30), "truncated");
  expect_refused(bytes.substr(0, bytes.size() / 2), "truncated");
  expect_refused(bytes.substr(0, bytes.size() - 1), "truncated or corrupt");
  // A damaged record is named by the checksum, checked first: a version flipped to 1 read
  // version 2's schedule as a tensor record, whose name then held a NUL that cut the message
  // off ("tensor '\x01", session 42's hostile run).
  std::string old_version = bytes;
  old_version[8] = 1;
  expect_refused(old_version, "truncated or corrupt: checksum");
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;  // inside some tensor's values
  expect_refused(flipped, "checksum");
  std::string future = bytes;
  future[8] = 3;  // version 3
  expect_refused(future,
                 "format version 3; this build reads versions 1 and 2; and its "
                 "checksum does not match: the file is corrupt");
  // Header fields that pass the checksum (recomputed) but not the format: a hostile run's
  // solver NaN (blamed on executor_options), an iteration that overflowed, a reserved word.
  const auto resealed = [&](std::size_t offset, const void* field, std::size_t n) {
    std::string b = bytes;
    std::memcpy(b.data() + offset, field, n);
    const std::uint64_t sum = transfer_checksum(b.data(), b.size() - 8);
    std::memcpy(b.data() + b.size() - 8, &sum, 8);
    return b;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  expect_refused(resealed(32, &nan, 4), "its solver: learning_rate = nan");
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  expect_refused(resealed(16, &huge, 8), "iteration 9223372036854775807 is not from 0 to");
  const std::uint32_t reserved = 5;
  expect_refused(resealed(44, &reserved, 4), "its reserved word is 5, not 0");
  // The schedule's record (version 2): a kind past cosine, a step factor past 1, fields set
  // where none is recorded.
  const std::uint32_t kind = 7;
  expect_refused(resealed(48, &kind, 4), "its learning-rate schedule has kind 7");
  const std::uint32_t step = 2;
  const double gamma = 1.5;
  std::string step_schedule = resealed(48, &step, 4);
  const std::int64_t one = 1;
  std::memcpy(step_schedule.data() + 52, &one, 8);
  std::memcpy(step_schedule.data() + 60, &gamma, 8);
  std::memcpy(step_schedule.data() + 68, &one, 8);
  const std::uint64_t step_sum = transfer_checksum(step_schedule.data(), step_schedule.size() - 8);
  std::memcpy(step_schedule.data() + step_schedule.size() - 8, &step_sum, 8);
  expect_refused(step_schedule, "its learning-rate schedule has a step factor 1.5");
  // A schedule is saved with the fields its kind uses, and one a checkpoint cannot record is
  // refused before anything is written (it was saved, then refused by every reader).
  {
    checkpoint_state cosine = checkpoint_state_of(ex, 1);
    cosine.schedule = lr_schedule{lr_schedule::kind::cosine, 0, 0.0, 100, 5};  // step's unused
    const std::string path = temp_path("cosine");
    save_checkpoint(ex, path, cosine);
    ASSERT_TRUE(read_checkpoint(path).state.schedule.has_value());
    EXPECT_EQ(read_checkpoint(path).state.schedule->describe(), "cosine:100 warmup 5");
    checkpoint_state steep = cosine;
    steep.schedule = lr_schedule{lr_schedule::kind::step, 1, 2.0, 1, 0};
    const std::string before_save = slurp(path);
    try {
      save_checkpoint(ex, path, steep);
      ADD_FAILURE() << "a step factor of 2 was saved";
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("step factor 2"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("nothing written"), std::string::npos) << e.what();
    }
    EXPECT_EQ(slurp(path), before_save);
    std::filesystem::remove(path);
  }
  const std::int64_t warmup = 3;
  expect_refused(resealed(76, &warmup, 8), "is recorded as none, with fields that are not 0");
  // Version 1 (no schedule record) is still read: the schedule is then unknown.
  {
    std::string v1 = bytes.substr(0, 48) + bytes.substr(84);
    v1[8] = 1;
    const std::uint64_t sum = transfer_checksum(v1.data(), v1.size() - 8);
    std::memcpy(v1.data() + v1.size() - 8, &sum, 8);
    spit(bad, v1);
    const checkpoint_file f = read_checkpoint(bad);
    EXPECT_FALSE(f.state.schedule.has_value());
    EXPECT_EQ(f.tensors.size(), read_checkpoint(good).tensors.size());
  }
  // A tensor's dimension of 0 (past the checksum): said so, not "more than the bytes left".
  std::uint32_t name_bytes = 0;
  std::memcpy(&name_bytes, bytes.data() + 84, 4);  // the first tensor's record
  const std::int64_t zero = 0;
  expect_refused(resealed(88 + name_bytes, &zero, 8), "(each dimension must be at least 1)");
  // A checkpoint of another network: names and shapes differ.
  network_builder b("other");
  auto x = b.data({4, 3, 8, 8}, 5);
  b.softmax_loss(b.fc(b.relu(b.conv(x, conv_params{.out_channels = 2}, "conv1")),
                      fc_params{.out_features = 5}, "fc1"));
  const network other = std::move(b).build();
  auto dev3 = test::make_test_device("host");
  executor ex3(other, *dev3, policy_options("liveness"));
  const std::string other_path = temp_path("other");
  save_checkpoint(ex3, other_path, checkpoint_state_of(ex3, 0));
  expect_refused(slurp(other_path), "does not match network 'tiny'");
  expect_refused(slurp(other_path), "'conv1.weight' has shape 2x3x1x1 in the file, 4x3x3x3");
  expect_refused(slurp(other_path), "missing from the file (18): 'bn1.gamma'");
  // Not loaded, but readable: the file itself is sound.
  EXPECT_EQ(read_checkpoint(other_path).tensors.size(), ex3.persistent_names().size());
  // A name with any bytes in it (a file sealed by hand): shown with its control bytes as
  // \xNN, the message whole after it. Raw, a NUL ended the message where the command line
  // printed it, and a newline broke its line (session 42's hostile run).
  {
    checkpoint_file odd = read_checkpoint(good);
    odd.tensors.front().name = std::string("w\0\n\"x", 5);
    try {
      (void)load_checkpoint(fresh, odd, bad);
      ADD_FAILURE() << "a tensor the network lacks was loaded";
    } catch (const invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'w\\x00\\x0a\"x'"), std::string::npos) << what;
      EXPECT_EQ(what.find('\0'), std::string::npos);
      EXPECT_NE(what.find("missing from the file"), std::string::npos) << what;
    }
    EXPECT_EQ(fresh.read_persistent(), before);
  }
  EXPECT_THROW((void)load_checkpoint(fresh, temp_path("absent")), invalid_argument);
  try {
    (void)load_checkpoint(fresh, std::filesystem::temp_directory_path().string());
    ADD_FAILURE() << "a directory was loaded";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  // A device would be read until memory runs out, a pipe without a writer wait forever.
  const std::string fifo = temp_path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& p : {std::string("/dev/zero"), fifo}) {
    try {
      (void)read_checkpoint(p);
      ADD_FAILURE() << p << " was read";
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(fifo);
  EXPECT_THROW(save_checkpoint(ex, "/nonexistent_dir_memweave/x.ckpt", checkpoint_state_of(ex, 1)),
               invalid_argument);
  // An iteration no checkpoint records is not written (its reader would refuse the file).
  try {
    save_checkpoint(ex, good, checkpoint_state_of(ex, checkpoint_max_iteration + 1));
    ADD_FAILURE() << "an iteration past 2^53 was saved";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is not from 0 to 9007199254740992"), std::string::npos)
        << e.what();
  }
  // Values no training leaves, in a sound file: a NaN weight, a negative running variance.
  {
    auto dev4 = test::make_test_device("host");
    executor broken(net, *dev4, policy_options("liveness"));
    for (const std::string& name : broken.persistent_names()) {
      const bool weight = name.ends_with(".weight"), variance = name.ends_with("running_var");
      if (!weight && !variance) continue;
      std::vector<float> values = broken.read(name);
      values.back() = weight ? std::numeric_limits<float>::quiet_NaN() : -1.0f;
      broken.write(name, values);
      save_checkpoint(broken, bad, checkpoint_state_of(broken, 1));
      try {
        (void)load_checkpoint(fresh, bad);
        ADD_FAILURE() << name << " loaded with " << values.back();
      } catch (const invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("tensor '" + name + "' holds"), std::string::npos)
            << e.what();
      }
      EXPECT_EQ(fresh.read_persistent(), before);
      values.back() = 0.5f;
      broken.write(name, values);
    }
  }
  // And the good one loads.
  EXPECT_EQ(load_checkpoint(fresh, good).iteration, 1);
  EXPECT_EQ(fresh.read_persistent(), ex.read_persistent());
  for (const auto& p : {good, bad, other_path}) std::filesystem::remove(p);
}

TEST(solver_settings, schedules_give_hand_computed_rates) {
  const lr_schedule step = lr_schedule::parse("step:3:0.1", "--lr-schedule");
  EXPECT_DOUBLE_EQ(step.rate(0.5, 0), 0.5);
  EXPECT_DOUBLE_EQ(step.rate(0.5, 2), 0.5);
  EXPECT_DOUBLE_EQ(step.rate(0.5, 3), 0.05);
  EXPECT_NEAR(step.rate(0.5, 7), 0.005, 1e-15);
  const lr_schedule cosine = lr_schedule::parse("cosine:4", "--lr-schedule");
  EXPECT_DOUBLE_EQ(cosine.rate(1.0, 0), 1.0);
  EXPECT_NEAR(cosine.rate(1.0, 1), (1 + std::sqrt(0.5)) / 2, 1e-15);  // cos(pi/4)
  EXPECT_NEAR(cosine.rate(1.0, 2), 0.5, 1e-15);
  EXPECT_NEAR(cosine.rate(1.0, 4), 0.0, 1e-15);
  EXPECT_NEAR(cosine.rate(1.0, 9), 0.0, 1e-15);
  lr_schedule warm = lr_schedule::parse("constant", "--lr-schedule");
  warm.warmup = 4;
  EXPECT_DOUBLE_EQ(warm.rate(0.2, 0), 0.05);
  EXPECT_DOUBLE_EQ(warm.rate(0.2, 2), 0.15);
  EXPECT_DOUBLE_EQ(warm.rate(0.2, 4), 0.2);
  for (const char* bad : {"", "step", "step:0:0.1", "step:3:1.5", "cosine:0", "cosine:x",
                          "linear:3", "step:3:0.1:2"}) {
    try {
      (void)lr_schedule::parse(bad, "--lr-schedule");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--lr-schedule"), std::string::npos) << e.what();
    }
  }
}

// Two iterations with the settings changed in between: the second update follows the new
// ones (v = mu v + lr (g + wd w), w -= v, checked on a bias from its watched gradient).
TEST(solver_settings, changed_between_iterations_the_next_update_uses_them) {
  const network net = test::tiny_trainable_net();
  auto dev = test::make_test_device("host");
  auto data = make_synthetic_source(net[net.data_layer()].output_shape, net.classes(), 7);
  executor ex(net, *dev, policy_options("liveness"));
  ex.watch_gradients();
  ex.run_iteration(data.get(), 0);
  const solver_settings next{0.5f, 0.25f, 0.125f};
  ex.set_solver(next);
  EXPECT_EQ(ex.solver(), next);
  const auto w0 = ex.read("fc1.bias");
  const auto v0 = ex.read("fc1.bias.momentum");
  ex.run_iteration(data.get(), 1);
  const auto g = ex.parameter_gradient("fc1.bias");
  const auto w1 = ex.read("fc1.bias");
  for (std::size_t i = 0; i < w0.size(); ++i) {
    const float v = next.momentum * v0[i] + next.learning_rate * (g[i] + next.weight_decay * w0[i]);
    EXPECT_FLOAT_EQ(w1[i], w0[i] - v) << i;
  }
  for (const solver_settings bad :
       {solver_settings{-1.0f, 0.9f, 0.0f}, solver_settings{0.1f, 1.0f, 0.0f},
        solver_settings{0.1f, 0.9f, NAN}}) {
    EXPECT_THROW(ex.set_solver(bad), invalid_argument);
  }
  // The value as given: std::to_string printed -1e-9 as -0.000000, inside [0, 1000].
  try {
    ex.set_solver(solver_settings{-1e-9f, 0.9f, 0.0f});
    ADD_FAILURE() << "a negative learning rate was taken";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("learning_rate = -1e-09: expected a finite number in "
                                         "[0, 1000]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(ex.solver(), next);
}

}  // namespace
}  // namespace memweave
