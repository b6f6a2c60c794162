// The `memweave` program: dispatches to a subcommand. Exit codes (README): 0 ran and a
// policy fits, 1 no policy asked for fits its budget, 2 bad input (every memweave::error
// but a device failure: one line on stderr), 3 internal error (a device failure or a bug).
#include <csignal>
#include <cstring>
#include <iostream>
#include <new>
#include <string>

#include "cli_args.hpp"
#include "commands.hpp"
#include "memweave/alloc/static_tls.hpp"
#include "memweave/core/config.hpp"
#include "memweave/core/error.hpp"
#include "stop_signal.hpp"

namespace {

constexpr const char* k_usage = R"(usage: memweave <command> [options]

commands:
  train   train a network under a memory budget
          --net NAME|PATH.onnx --batch N --iterations N --budget SIZE --policy baseline,liveness,offload,utp,recompute,all
          [--data synthetic|cifar10:PATH] [--device auto|host|cuda] [--image-side N]
          [--width SCALE] [--classes N] [--conv-ws dynamic|none|max|fixed:ALGO]
          [--fit best|first] [--recompute cost_aware|speed_centric|memory_centric]
          [--host-pool SIZE (pinned host memory for offloads; plan: 256GiB)]
          [--prefetch-distance N (checkpoint layers prefetched ahead in backward)]
          [--seed N] [--lr X] [--threads N]
          [--momentum X (in [0, 1))] [--weight-decay X (in [0, 1])]
          [--lr-schedule constant|step:EVERY:GAMMA|cosine:T_MAX] [--warmup N]
          [--init-from FILE (resume from a checkpoint: weights, iteration, seed, solver,
           learning-rate schedule and warm-up)]
          [--save FILE (a checkpoint after the last iteration; one --policy)]
          [--cost-model auto|titan_xp|k40|h100_pcie5 (the device the schedule's model stands
           for; auto: a GPU's own figures on cuda, titan_xp on host and null)]
          [--json PATH] [--csv PATH] [--svg PATH]
          [--trace-timeline PATH (the last iteration's compute and copy streams as a
           Chrome/Perfetto trace: which copies hid under compute)]
          [--export-onnx PATH (with --net PATH.onnx: a copy of the model with the trained
           weights)]
          [--tile (SFT: the layers over --budget run tile by tile in fused segments; the
           batch then stays in host memory and each tile is fetched; a policy that does
           not fit so is tiled for the largest smaller target it fits)]
          [--split (TSPLIT: the steps over --budget run in micro-batches; under utp and
           all only the running micro-batch's slices are on the device: below max(l_i))]
  eval    the evaluation pass (forward only, BN running statistics, no dropout): loss,
          accuracy and memory per policy
          --net NAME|PATH.onnx [--init-from FILE] [--batches N (10)] [--first-batch N (0)]
          [--data ...] [--device auto|host|cuda|null] and train's network and memory options
          [--json PATH (each policy's loss at full precision, accuracy and memory)]
          [--split (TSPLIT: the forward steps over --budget run in micro-batches; under utp
           and all only the running micro-batch's slices are on the device)]
  plan    the same runtime on the null device (no memory touched): per-step memory,
          peak, max(l_i), and whether each policy fits --budget (same options, no --data);
          --max-batch: the largest batch that fits --budget, per policy;
          --max-depth: the deepest ResNet (n3 growing) that fits --budget at --batch;
          --max-image-side: the largest --image-side (a multiple of 32) that fits --budget
          at --batch, per policy (its plan in --json/--csv/--svg);
          --min-budget: the smallest budget each policy trains --batch in (with --split or
          --tile, their plans for each budget), to one heap block: it runs, a block less not;
          --ranks N [--net-gbps X]: data parallelism on N devices (--batch global, --budget
          per device), the ring allreduce over an X Gb/s network (MEMWEAVE_NET_GBPS, 100)
  (train under `mpirun -np N` trains data-parallel: --batch global, --budget per rank)
          --split: TSPLIT's split plan (micro-batches per step, the floor as the
          largest micro-step), then the policies run with it; with --max-batch, the
          largest batch `all` trains with it
  replay  drive the device heap with an allocation trace
          --trace PATH | --synthetic-layers N [--batch N] [--trace PATH]
          [--pool SIZE] [--fit best,first]
  config  list the MEMWEAVE_* variables with their values (--markdown: README table)

exit codes: 0 ran and fits, 1 does not fit, 2 bad input, 3 internal error,
            130/143 stopped by SIGINT/SIGTERM (what finished is printed and written)

networks: alexnet vgg16 resnet50 resnet101 resnet152 resnet:<n1>,<n2>,<n3>,<n4>
          inception_v4 densenet121, or an ONNX model file PATH.onnx (its weights are the
          initial ones; --image-side, --width, --classes do not apply)
)";

}  // namespace

int main(int argc, char** argv) {
  // Offloaded tensors live in the pinned host pool, whose jemalloc needs static TLS that
  // glibc only grants at start-up: re-execute once with it (see static_tls.hpp).
  memweave::reexec_with_static_tls(argv);
  // A closed standard output (`memweave train ... | head -1`) must not kill the run before
  // its files (--save, --json, ...) are written: the write fails instead, reported below.
  std::signal(SIGPIPE, SIG_IGN);
  // A file size limit (`ulimit -f`) likewise: a write past it fails with EFBIG, which costs
  // only that output, where SIGXFSZ killed the run before its reports were written (a heap
  // trace past the limit; session 45's hostile run).
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h")) {
    std::cout << k_usage;
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  // `memweave plan --help` (anywhere after the command): the usage, whatever else is given.
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::cout << k_usage;
      return 0;
    }
  }
  // Standard output that could not be written costs only itself, as any output (README):
  // the files were written; exit 2 where the run had succeeded.
  const auto written = [](int code) {
    std::cout.flush();
    if (std::cout) return code;
    std::cerr << "memweave: error: standard output could not be written (a closed pipe?); "
                 "any files asked for were written\n";
    return code == 0 ? 2 : code;
  };
  try {
    memweave::override_variables_given(argc, argv, 2);
    // config lists every variable, a refused one with why, before it fails.
    if (command != "config") memweave::validate_environment();
    if (command == "train") return written(memweave::train_command(argc, argv, std::cout));
    if (command == "eval") return written(memweave::eval_command(argc, argv, std::cout));
    if (command == "plan") return written(memweave::plan_command(argc, argv, std::cout));
    if (command == "replay") return written(memweave::replay_command(argc, argv, std::cout));
    if (command == "config") return written(memweave::config_command(argc, argv, std::cout));
    std::cerr << "memweave: unknown command '" << command << "'\n" << k_usage;
    return 2;
  } catch (const memweave::stopped_by_signal& e) {
    // What finished was printed and written; the exit status a shell gives a process that
    // the signal ended.
    std::cout.flush();
    std::cerr << "memweave: " << e.what() << "\n";
    return 128 + e.signal();
  } catch (const memweave::device_error& e) {
    std::cerr << "memweave: device error: " << e.what() << "\n";
    return 3;
  } catch (const memweave::error& e) {
    std::cerr << "memweave: error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    // Host memory ran out: some size on the command line is more than this machine holds.
    std::string args;
    for (int i = 1; i < argc; ++i) args += std::string(i > 1 ? " " : "") + argv[i];
    std::cerr << "memweave: error: out of host memory (std::bad_alloc) running `memweave " << args
              << "`: a size or count given (--batch, --image-side, --width, --classes, "
                 "the blocks of --net resnet:N1,N2,N3,N4, --host-pool, --synthetic-layers) "
                 "needs more memory than this machine has; lower it\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "memweave: internal error: " << e.what() << "\n";
    return 3;
  }
}
