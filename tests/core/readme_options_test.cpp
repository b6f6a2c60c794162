// The README documents every MEMWEAVE_* variable; this test keeps it equal to the table in
// core/config.cpp (name and default), in both directions.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "memweave/core/config.hpp"

namespace memweave {
namespace {

std::map<std::string, std::string> readme_rows() {
  const char* src = std::getenv("MEMWEAVE_SOURCE_DIR");
  std::ifstream in(std::string(src ? src : ".") + "/README.md");
  std::map<std::string, std::string> rows;
  if (!in) return rows;
  // | `MEMWEAVE_X` | `default` or unset | meaning |
  const std::regex row(R"(^\| `(MEMWEAVE_[A-Z0-9_]+)` \| (?:`([^`]*)`|unset) \|)");
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, row)) rows[m[1]] = m[2];
  }
  return rows;
}

TEST(readme_options_test, readme_table_matches_the_option_table) {
  const auto rows = readme_rows();
  ASSERT_FALSE(rows.empty()) << "README.md not found or has no option table";
  for (const auto& o : option_table()) {
    auto it = rows.find(std::string(o.name));
    ASSERT_NE(it, rows.end()) << o.name << " is not documented in README.md";
    EXPECT_EQ(it->second, o.default_value) << o.name << ": README default differs";
  }
  for (const auto& [name, _] : rows) {
    EXPECT_NE(find_option(name), nullptr) << name << " is in README.md but not in the table";
  }
}

}  // namespace
}  // namespace memweave
