#!/usr/bin/env bash
# Sets up (Debian packages, configure, build) and runs memweave's whole test suite:
#   release: every test but those labelled slow;
#   asan:    the same under AddressSanitizer + UndefinedBehaviorSanitizer (host backends;
#            the cuda backend and its gpu tests are built by release only), but for the
#            full-size planning test (the planner's logic at full size, 13 s in release
#            and 5 x that under ASan) and the zoo oracle's Inception v4 and DenseNet-121
#            (14 and 11 s in release, 48 and 38 s under ASan): the same code paths run under
#            ASan in the oracle's other networks, the random DAGs and the schedule tests
#            (likewise the tiled-training zoo test's Inception v4, DenseNet-121 and VGG16, 4, 3
#            and 12 s in release, VGG16 43 s under ASan: the tiling runs under ASan in its
#            other networks and tests; and the weighing of `all` against recompute on
#            full-size DenseNet-121, 6 s in release, and of its size threshold there, 14 s:
#            the weighing runs under ASan wherever `all` has a budget; and the half-peak schedule test's Inception v4 and
#            DenseNet-121 and the floor training test's DenseNet-121 (9, 7 and 8 s in
#            release; the two tests took 95 and 32 s under ASan with them): their ResNet-50 and
#            VGG16 run the same paths under ASan);
#   tsan:    the tests labelled concurrent under ThreadSanitizer.
# The sanitizer builds carry line tables only (-g1): stack traces keep file and line, and
# the builds take a fifth less time than with full debug information.
# scripts/test.sh --slow also runs the slow tests (release). GPU tests (label gpu) skip
# with a message when no CUDA device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
slow=0
[ "${1:-}" = "--slow" ] && slow=1

scripts/setup.sh release asan tsan
status=0
ctest --preset release || status=1
ctest --preset asan || status=1
ctest --preset tsan || status=1
if ((slow)); then
  ctest --test-dir build/release -L slow --output-on-failure || status=1
fi
if ((status)); then echo "test.sh: FAILED"; else echo "test.sh: all suites passed"; fi
exit $status
