// The cuda kernels' choices that need no GPU: MEMWEAVE_CUDNN_DETERMINISTIC read into
// cuda_kernel_options, and the fixed fallback algorithms per pass (deterministic ones when
// asked). Runs on any machine of a cuda-enabled build.
#include <gtest/gtest.h>

#include <string>

#include "engine/kernels/cuda/cuda_kernels.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "support/scoped_env.hpp"

namespace memweave::kernels::cuda {
namespace {

using memweave::test::scoped_env;

TEST(cuda_options, deterministic_is_off_by_default_and_read_from_the_environment) {
  ::unsetenv("MEMWEAVE_CUDNN_DETERMINISTIC");
  EXPECT_FALSE(cuda_kernel_options::from_environment().deterministic);
  {
    scoped_env env("MEMWEAVE_CUDNN_DETERMINISTIC", "1");
    EXPECT_TRUE(cuda_kernel_options::from_environment().deterministic);
  }
  {
    scoped_env env("MEMWEAVE_CUDNN_DETERMINISTIC", "off");
    EXPECT_FALSE(cuda_kernel_options::from_environment().deterministic);
  }
}

TEST(cuda_options, a_bad_deterministic_value_is_rejected_naming_the_variable) {
  scoped_env env("MEMWEAVE_CUDNN_DETERMINISTIC", "maybe");
  try {
    (void)cuda_kernel_options::from_environment();
    FAIL() << "'maybe' was accepted";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("MEMWEAVE_CUDNN_DETERMINISTIC='maybe'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(validate_environment(), invalid_argument);
}

TEST(cuda_options, fallbacks_are_the_no_workspace_ones_or_deterministic_ones) {
  EXPECT_EQ(conv_fallback_algorithm(conv_pass::forward, false),
            CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
  EXPECT_EQ(conv_fallback_algorithm(conv_pass::backward_data, false),
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
  EXPECT_EQ(conv_fallback_algorithm(conv_pass::backward_filter, false),
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  EXPECT_EQ(conv_fallback_algorithm(conv_pass::forward, true),
            CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
  EXPECT_EQ(conv_fallback_algorithm(conv_pass::backward_data, true),
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  EXPECT_EQ(conv_fallback_algorithm(conv_pass::backward_filter, true),
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  for (conv_pass pass :
       {conv_pass::forward, conv_pass::backward_data, conv_pass::backward_filter}) {
    EXPECT_TRUE(conv_algo_documented_deterministic(pass, conv_fallback_algorithm(pass, true)))
        << to_string(pass);
  }
}

TEST(cuda_options, the_atomic_backward_algorithms_are_the_non_deterministic_ones) {
  EXPECT_FALSE(conv_algo_documented_deterministic(conv_pass::backward_data,
                                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_0));
  EXPECT_FALSE(conv_algo_documented_deterministic(conv_pass::backward_filter,
                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0));
  EXPECT_FALSE(conv_algo_documented_deterministic(conv_pass::backward_filter,
                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3));
  for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a) {
    EXPECT_TRUE(conv_algo_documented_deterministic(conv_pass::forward, a)) << a;
  }
  EXPECT_TRUE(conv_algo_documented_deterministic(
      conv_pass::backward_data, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED));
  EXPECT_TRUE(conv_algo_documented_deterministic(conv_pass::backward_filter,
                                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT));
}

}  // namespace
}  // namespace memweave::kernels::cuda
