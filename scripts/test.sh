#!/usr/bin/env bash
# Sets up (Debian packages, configure, build) and runs memweave's whole test suite:
#   release: every test but those labelled slow;
#   asan:    the same under AddressSanitizer + UndefinedBehaviorSanitizer (host backends;
#            the cuda backend and its gpu tests are built by release only), but for tests whose
#            code paths run under ASan in smaller tests, and which take 4-10 x their release
#            time there (CMakePresets.json's asan filter):
#            - the weighing of `all`'s size threshold on full-size DenseNet-121 (6 s in
#              release, 40-50 s under ASan): the same weighing runs under ASan on small networks;
#            - Inception v4's, DenseNet-121's and VGG16's cases of the tiled-training test
#              (4, 6 and 2.5 s in release; 17-20 s under ASan): its ResNet-50 case runs the
#              same paths under ASan.
#            - four more since this machine kind's vCPUs became slower (2026-11-30: the suite
#              took 25.6 min, 10.2 of them ASan's tests): refine's shortcuts checked against
#              the whole computation (52 s under ASan; a logic check, and refine runs under
#              ASan in every test that plans `all`), train's timing after all's re-planning
#              trial (35 s; the re-plan runs under ASan in schedule_test's
#              the_first_iteration_measured_on_host_replans_the_schedule_once), ResNet-152
#              filling the host pool under --split (47 s; the drop of host values runs under
#              ASan in split_staging_test's and utp_test's host-memory cases) and
#              tile_cli_test's training (36 s; tiled training runs under ASan in
#              zoo_tiling_test's ResNet-50 case).
#            - one more when the suite reached 19.6 of its 20 minutes (2026-11-30, session 37):
#              the --max-image-side search with --tile on VGG16 (2.6 s in release, 31 s under
#              ASan; a report's contents: the search runs under ASan in image_side_cli_test's
#              other cases, the tiling plan in tiling_plan_test and zoo_tiling_test).
#            - three more when a run took 20.5 minutes (2026-11-30, session 38: the same code
#              had taken 18.5; its ASan tests 331 s): `all` weighing a named algorithm's
#              workspaces against the ladder (36 s under ASan, 7.9 in release; planning with
#              the mode's workspaces runs under ASan in schedule_test's
#              planned_with_the_modes_workspaces_all_runs_as_planned_bit_identically), keeping
#              rebuilt pieces until their use (40 s, 5.7; keep_rebuilt runs under ASan in the
#              weighing test that times it), and plans from measured times checked against
#              their bound (10 s, 1.8; re-planning runs under ASan in
#              the_first_iteration_measured_on_host_replans_the_schedule_once).
#            - two more when runs took 19.9 and 20.4 minutes (2026-11-30, session 39: builds
#              were 11.5 of them on a slow hour): the depth search walking to its limit (a
#              30,032-layer network planned; 4.4 s in release, 25 s under ASan; the search runs
#              under ASan in cli_hardening_test's plan_exits_1_when_nothing_fits, --max-depth,
#              and a_search_flushes_each_policys_answer_as_found, --max-batch) and `all`
#              taking recompute's plan where that is faster in the model (3.2 s, 21 s; the
#              weighing runs under ASan in all_keeps_the_fastest_headroom_run_on_the_null_device).
#            Back under ASan once the host kernels left its checks (below): the zoo oracle's
#            Inception v4 and DenseNet-121 cases (9 and 8 s), the floor training test's
#            DenseNet-121 (70 -> 2.6 s) and the split plans weighed whole (41 -> 10 s).
#            The host kernels (engine/kernels/host) are compiled without the sanitizers'
#            checks for every program but the kernels' own tests, which link a copy with them
#            (engine/kernels/host/CMakeLists.txt says why: 2026-11-30, their loops ran 14-22x
#            their release time and were most of this suite's).
#            Planning at full size runs under ASan since planning on the null device no longer
#            waits for a thread at every eviction (2026-11-29): `all` within 2 % of max(l_i) on
#            every zoo network (9 s under ASan), ResNet-152 filling the host pool under
#            --split (13 s), the weighing against recompute (11 s), the split plans weighed
#            and mixed (17 s each), the staging zoo test's Inception v4 and DenseNet-121 (7
#            and 10 s), and the half-peak schedule test's (15 and 10 s);
#   tsan:    the tests labelled concurrent under ThreadSanitizer.
# The sanitizer builds carry line tables only (-g1): stack traces keep file and line, and
# the builds take a fifth less time than with full debug information. The asan preset builds
# at -O1 (2026-11-30: its build 391 -> about 350 s, its tests' time unchanged at 258 s), and
# every optimized preset compiles the test files at -O1, asan at -O0
# (cmake/memweave_helpers.cmake).
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
