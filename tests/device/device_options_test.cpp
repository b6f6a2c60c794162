// device_options::from_environment and make_device: parsing of the MEMWEAVE_DEVICE*
// variables, rejection of bad values with the variable named, and backend choice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "memweave/core/error.hpp"
#include "memweave/device/device.hpp"

namespace memweave {
namespace {

constexpr const char* k_vars[] = {"MEMWEAVE_DEVICE", "MEMWEAVE_CUDA_DEVICE",
                                  "MEMWEAVE_DEVICE_BYTES", "MEMWEAVE_HOST_LINK_GBPS"};

// Each test starts and ends with the four variables unset.
class device_options_test : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v : k_vars) ::unsetenv(v);
  }
  // The message of the invalid_argument that from_environment() throws ("" if none).
  static std::string rejection() {
    try {
      (void)device_options::from_environment();
    } catch (const invalid_argument& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(device_options_test, defaults_when_unset) {
  const device_options o = device_options::from_environment();
  EXPECT_EQ(o.kind, "auto");
  EXPECT_EQ(o.cuda_ordinal, 0);
  EXPECT_EQ(o.capacity_bytes, 8ull << 30);
  EXPECT_EQ(o.host_link_gbps, 0.0);
}

TEST_F(device_options_test, reads_every_variable) {
  ::setenv("MEMWEAVE_DEVICE", "null", 1);
  ::setenv("MEMWEAVE_CUDA_DEVICE", "3", 1);
  ::setenv("MEMWEAVE_DEVICE_BYTES", "512M", 1);
  ::setenv("MEMWEAVE_HOST_LINK_GBPS", "12.5", 1);
  const device_options o = device_options::from_environment();
  EXPECT_EQ(o.kind, "null");
  EXPECT_EQ(o.cuda_ordinal, 3);
  EXPECT_EQ(o.capacity_bytes, 512ull << 20);
  EXPECT_DOUBLE_EQ(o.host_link_gbps, 12.5);
}

TEST_F(device_options_test, empty_values_mean_unset) {
  ::setenv("MEMWEAVE_DEVICE", "", 1);
  ::setenv("MEMWEAVE_DEVICE_BYTES", "", 1);
  const device_options o = device_options::from_environment();
  EXPECT_EQ(o.kind, "auto");
  EXPECT_EQ(o.capacity_bytes, 8ull << 30);
}

TEST_F(device_options_test, unknown_kind_is_rejected_naming_the_variable) {
  ::setenv("MEMWEAVE_DEVICE", "gpu", 1);
  const std::string m = rejection();
  EXPECT_NE(m.find("MEMWEAVE_DEVICE"), std::string::npos) << m;
  EXPECT_NE(m.find("gpu"), std::string::npos) << m;
}

TEST_F(device_options_test, fractional_ordinal_is_rejected_naming_the_variable) {
  ::setenv("MEMWEAVE_CUDA_DEVICE", "1.5", 1);
  const std::string m = rejection();
  EXPECT_NE(m.find("MEMWEAVE_CUDA_DEVICE"), std::string::npos) << m;
  ::setenv("MEMWEAVE_CUDA_DEVICE", "first", 1);
  EXPECT_NE(rejection().find("MEMWEAVE_CUDA_DEVICE"), std::string::npos);
}

TEST_F(device_options_test, malformed_or_zero_capacity_is_rejected_naming_the_variable) {
  ::setenv("MEMWEAVE_DEVICE_BYTES", "lots", 1);
  std::string m = rejection();
  EXPECT_NE(m.find("MEMWEAVE_DEVICE_BYTES"), std::string::npos) << m;
  ::setenv("MEMWEAVE_DEVICE_BYTES", "0", 1);
  m = rejection();
  EXPECT_NE(m.find("MEMWEAVE_DEVICE_BYTES"), std::string::npos) << m;
}

TEST_F(device_options_test, negative_or_malformed_link_speed_is_rejected_naming_the_variable) {
  ::setenv("MEMWEAVE_HOST_LINK_GBPS", "-1", 1);
  std::string m = rejection();
  EXPECT_NE(m.find("MEMWEAVE_HOST_LINK_GBPS"), std::string::npos) << m;
  ::setenv("MEMWEAVE_HOST_LINK_GBPS", "fast", 1);
  m = rejection();
  EXPECT_NE(m.find("MEMWEAVE_HOST_LINK_GBPS"), std::string::npos) << m;
}

TEST_F(device_options_test, make_device_rejects_an_unknown_kind_naming_it) {
  device_options o;
  o.kind = "tpu";
  try {
    (void)make_device(o);
    FAIL() << "make_device accepted kind 'tpu'";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'tpu'"), std::string::npos) << e.what();
  }
}

TEST_F(device_options_test, make_device_rejects_bad_simulated_settings) {
  device_options o;
  o.kind = "host";
  o.capacity_bytes = 0;
  EXPECT_THROW((void)make_device(o), invalid_argument);
  o.capacity_bytes = 1 << 20;
  o.host_link_gbps = -2.0;
  EXPECT_THROW((void)make_device(o), invalid_argument);
  // Issue 11: so slow that a copy's duration overflowed, which turned the throttle off.
  for (double tiny : {1e-300, 1e-7, std::nan("")}) {
    o.host_link_gbps = tiny;
    EXPECT_THROW((void)make_device(o), invalid_argument) << tiny;
  }
  o.host_link_gbps = 1e-4;
  EXPECT_EQ(make_device(o)->kind(), device_kind::host);
}

TEST_F(device_options_test, make_device_builds_each_simulated_kind) {
  device_options o;
  o.capacity_bytes = 1 << 20;
  o.kind = "host";
  EXPECT_EQ(make_device(o)->kind(), device_kind::host);
  o.kind = "null";
  EXPECT_EQ(make_device(o)->kind(), device_kind::null);
}

TEST_F(device_options_test, auto_picks_cuda_only_when_a_gpu_is_present) {
  device_options o;
  o.kind = "auto";
  o.capacity_bytes = 1 << 20;
  const auto d = make_device(o);
  EXPECT_EQ(d->kind(), cuda_device_present() ? device_kind::cuda : device_kind::host);
}

TEST_F(device_options_test, cuda_without_a_gpu_says_to_use_host) {
  if (cuda_device_present()) GTEST_SKIP() << "a CUDA device is present: nothing to refuse";
  device_options o;
  o.kind = "cuda";
  try {
    (void)make_device(o);
    FAIL() << "make_device gave a cuda device without a GPU";
  } catch (const no_device_error& e) {
    EXPECT_NE(std::string(e.what()).find("MEMWEAVE_DEVICE=host"), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), status::no_device);
  }
}

TEST_F(device_options_test, backend_built_matches_the_build) {
#if MEMWEAVE_HAVE_CUDA
  EXPECT_TRUE(cuda_backend_built());
#else
  EXPECT_FALSE(cuda_backend_built());
  EXPECT_FALSE(cuda_device_present());
#endif
}

TEST(device_names, kinds_roles_and_copies_have_names) {
  EXPECT_STREQ(to_string(device_kind::cuda), "cuda");
  EXPECT_STREQ(to_string(device_kind::host), "host");
  EXPECT_STREQ(to_string(device_kind::null), "null");
  EXPECT_STREQ(to_string(stream_role::host_to_device), "host_to_device");
  EXPECT_STREQ(to_string(copy_kind::device_to_device), "device_to_device");
}

}  // namespace
}  // namespace memweave
