// The README documents every MEMWEAVE_* variable; this test keeps it equal to the table in
// core/config.cpp (name and default), in both directions, and each row as `memweave config
// --markdown` prints it (a meaning edited in one place only drifted).
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

TEST(readme_options_test, readme_rows_are_what_config_markdown_prints) {
  const auto lines = [](std::istream& in) {
    std::map<std::string, std::string> by_name;
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("| `MEMWEAVE_", 0) != 0) continue;
      by_name[line.substr(3, line.find('`', 3) - 3)] = line;
    }
    return by_name;
  };
  const char* src = std::getenv("MEMWEAVE_SOURCE_DIR");
  std::ifstream readme(std::string(src ? src : ".") + "/README.md");
  std::istringstream printed(option_table_markdown());
  const auto documented = lines(readme);
  const auto table = lines(printed);
  ASSERT_FALSE(table.empty());
  for (const auto& [name, row] : table) {
    const auto it = documented.find(name);
    ASSERT_NE(it, documented.end()) << name << " is not documented in README.md";
    EXPECT_EQ(it->second, row) << name << ": README's row differs from config --markdown's";
  }
}

}  // namespace
}  // namespace memweave
