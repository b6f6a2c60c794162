// The one source of memweave_test_pch (tests/CMakeLists.txt): the program exists to build the
// precompiled header the test binaries reuse, with their flags; it does nothing.
int main() {
  return 0;
}
