#include "memweave/core/units.hpp"

#include <gtest/gtest.h>

#include <limits>

#include "memweave/core/error.hpp"

namespace memweave {
namespace {

TEST(units_test, sizes_accept_binary_suffixes_in_any_spelling) {
  EXPECT_EQ(parse_bytes("4096", "X"), 4096u);
  EXPECT_EQ(parse_bytes("1K", "X"), 1024u);
  EXPECT_EQ(parse_bytes("1KiB", "X"), 1024u);
  EXPECT_EQ(parse_bytes("512MB", "X"), 512ull << 20);
  EXPECT_EQ(parse_bytes("8GiB", "X"), 8ull << 30);
  EXPECT_EQ(parse_bytes("1.5g", "X"), 3ull << 29);
  EXPECT_EQ(parse_bytes(" 2 T ", "X"), 2ull << 40);
}

TEST(units_test, malformed_size_names_the_variable_and_the_value) {
  for (const char* bad : {"", "GiB", "12 parsecs", "-5", "1..2G", "1e400"}) {
    try {
      (void)parse_bytes(bad, "MEMWEAVE_POOL_BYTES");
      FAIL() << "accepted '" << bad << "'";
    } catch (const invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("MEMWEAVE_POOL_BYTES"), std::string::npos) << what;
      EXPECT_NE(what.find("a size"), std::string::npos) << what;
    }
  }
}

// A bare byte count is whole ("1.5" was 1 byte), a fraction of a unit rounds down to bytes;
// a size beyond 64 bits says so rather than "not a size".
TEST(units_test, a_byte_count_is_whole_and_an_overflow_says_too_large) {
  EXPECT_EQ(parse_bytes("1.3K", "X"), 1331u);
  try {
    (void)parse_bytes("1.5", "--budget");
    FAIL() << "accepted 1.5 bytes";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--budget '1.5' is not a whole number of bytes"),
              std::string::npos)
        << e.what();
  }
  for (const char* big : {"99999999999999999999GiB", "17179869184GiB"}) {
    try {
      (void)parse_bytes(big, "--budget");
      FAIL() << "accepted " << big;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("is out of range: expected a size below 16 EiB"),
                std::string::npos)
          << e.what();
    }
  }
  // With the option's own range, a size past any std::size_t is out of that range (it was
  // "not a size below 16 EiB (the range of the option is smaller still)"; session 42).
  try {
    (void)parse_bytes("99999999999999999999", "--budget", 1024, std::size_t{64} << 40);
    FAIL();
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--budget '99999999999999999999' is out of range: "
                                         "expected a size from 1.00 KiB to 64.00 TiB; change"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(parse_bytes("2KiB", "--budget", 1024, 4096), 2048u);
}

// A number a double cannot hold is out of the option's range, as a large one is; it was "not
// a number" (session 42's note: the wording differed between flags).
TEST(units_test, a_number_past_a_doubles_range_is_out_of_range) {
  for (const char* big : {"1e400", "-1e400", "inf"}) {
    try {
      (void)parse_double(big, "--lr", 1e-12, 1e3);
      FAIL() << "accepted " << big;
    } catch (const invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("--lr '" + std::string(big) +
                                           "' is out of range: expected a number from 1e-12 "
                                           "to 1000"),
                std::string::npos)
          << e.what();
    }
  }
  // Below the least subnormal: the least subnormal, in range where it is (a row of "0 or
  // from 1e-4" took strtod's 0 as its 0, while it refused 1e-320).
  EXPECT_EQ(parse_double("1e-400", "--momentum", 0.0, 1.0),
            std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(parse_double("-1e-400", "X", -1.0, 1.0), -std::numeric_limits<double>::denorm_min());
  EXPECT_THROW((void)parse_double("1e-400", "--lr", 1e-12, 1e3), invalid_argument);
  EXPECT_THROW((void)parse_double("nan", "--lr", 1e-12, 1e3), invalid_argument);
  EXPECT_THROW((void)parse_double("1e400", "X"), invalid_argument);
}

TEST(units_test, numbers_and_booleans_are_strict) {
  EXPECT_DOUBLE_EQ(parse_double("0.25", "X"), 0.25);
  EXPECT_THROW((void)parse_double("0.25x", "X"), invalid_argument);
  EXPECT_THROW((void)parse_double("nan", "X"), invalid_argument);
  EXPECT_EQ(parse_uint("42", "X"), 42u);
  EXPECT_THROW((void)parse_uint("-1", "X"), invalid_argument);
  EXPECT_TRUE(parse_bool("On", "X"));
  EXPECT_FALSE(parse_bool("0", "X"));
  EXPECT_THROW((void)parse_bool("maybe", "X"), invalid_argument);
}

TEST(units_test, integers_are_parsed_to_their_range_naming_the_knob) {
  EXPECT_EQ(parse_int("4096", "--threads", 0, 4096), 4096);
  EXPECT_EQ(parse_int("-3", "X", -5, 5), -3);
  for (const char* bad : {"", "1.5", "1e3", "0x10", "1 2", "+-1", "many"}) {
    EXPECT_THROW((void)parse_int(bad, "--iterations", 1, 100), invalid_argument) << bad;
  }
  // Out of range, including values that do not fit 64 bits: never wrapped.
  for (const char* big : {"4294967296", "4294967297", "9223372036854775808", "-1"}) {
    try {
      (void)parse_int(big, "--iterations", 1, 2147483647);
      FAIL() << "accepted " << big;
    } catch (const invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--iterations '"), std::string::npos) << what;
      EXPECT_NE(what.find("from 1 to 2147483647"), std::string::npos) << what;
      EXPECT_EQ(what.find("unset"), std::string::npos) << what;  // an option, not a variable
    }
  }
  EXPECT_THROW((void)parse_double("1e39", "--lr", 1e-9, 1000), invalid_argument);
  EXPECT_THROW((void)parse_double("0", "--lr", 1e-9, 1000), invalid_argument);
  EXPECT_DOUBLE_EQ(parse_double("0.5", "--lr", 1e-9, 1000), 0.5);
}

TEST(units_test, trim_drops_white_space_at_both_ends_only) {
  EXPECT_EQ(trim(" \t\n first second\r\v\f"), "first second");
  EXPECT_EQ(trim(" \n "), "");
  EXPECT_EQ(trim(""), "");
}

TEST(units_test, bytes_print_with_binary_units) {
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(8ull << 30), "8.00 GiB");
}

}  // namespace
}  // namespace memweave

namespace memweave {
namespace units_apart_test {

// A budget just under a minimum must not read as equal to it (115711 and 115712 bytes both
// printed 113.00 KiB in "budget 113.00 KiB is below ... 113.00 KiB").
TEST(units_test, sizes_that_would_read_the_same_show_their_bytes) {
  const auto [a, b] = format_bytes_apart(115711, 115712);
  EXPECT_EQ(a, "113.00 KiB (115711 bytes)");
  EXPECT_EQ(b, "113.00 KiB (115712 bytes)");
  const auto [c, d] = format_bytes_apart(1024, 2048);
  EXPECT_EQ(c, "1.00 KiB");
  EXPECT_EQ(d, "2.00 KiB");
  const auto [e, f] = format_bytes_apart(4096, 4096);
  EXPECT_EQ(e, f);
  EXPECT_EQ(e, "4.00 KiB");
}

}  // namespace units_apart_test
}  // namespace memweave
