#!/usr/bin/env bash
# Sets up (Debian packages, configure, build) and runs memweave's whole test suite:
#   release: every test but those labelled slow;
#   asan:    the same under AddressSanitizer + UndefinedBehaviorSanitizer (host backends;
#            the cuda backend and its gpu tests are built by release only), but for tests whose
#            code paths run under ASan in smaller tests, and which take 5-10 x their release
#            time there (CMakePresets.json's asan filter):
#            - planning at full size on the null device (`all` at 1.02 x max(l_i) on every
#              zoo network, 6 s in release; ResNet-152
#              at batch 1700 filling the host pool under --split, 15 s and 70 s under ASan;
#              the weighing of `all` against recompute on full-size DenseNet-121, 6 s, and of
#              its size threshold there, 14 s): the same planner runs under ASan on the small
#              networks, and the full host pool in split_staging_test;
#            - Inception v4's and DenseNet-121's cases of the zoo oracle (14 and 11 s in
#              release, 48 and 38 s under ASan), of the tiled-training test (4 and 3 s; VGG16's
#              too, 12 s, 43 s under ASan), of the half-peak schedule test (9 and 7 s), of the
#              floor training test (DenseNet-121, 8 s) and of the below-the-largest-layer
#              staging test (4 and 6 s, 25 and 44 s under ASan): their ResNet-50 and VGG16
#              cases run the same paths under ASan;
#            - the split staging tests that weigh each of the five split plans on its own and
#              then all of them (5 s in release, 27-34 s under ASan), and that mix them region
#              by region and train the mix (3.6 s, 18 s under ASan): split_cli_test's
#              all_runs_the_fastest_split_plan_and_says_which weighs and mixes them under ASan;
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
