// What `train` and `plan` share: reading the network options, building the network from
// the zoo, and running one policy through the executor on a device into a policy_report.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cli_args.hpp"
#include "memweave/device/device.hpp"
#include "memweave/engine/executor.hpp"
#include "memweave/engine/network.hpp"
#include "memweave/engine/run_report.hpp"
#include "memweave/engine/zoo.hpp"

namespace memweave {

/// The options common to train and plan.
struct network_run_options {
  std::string net;
  zoo_options zoo;
  std::vector<std::string> policies;
  std::size_t budget_bytes = 0;  ///< 0 = no budget
  executor_options executor;     ///< policy and budget are filled per run
  std::string json, csv, svg;    ///< output paths ("" = none)
};

/// Reads --net, --batch, --image-side, --width, --classes, --policy, --budget, --fit,
/// --conv-algo, --seed, --lr, --threads, --json, --csv, --svg.
network_run_options read_network_run_options(cli_args& args);

/// Runs `iterations` iterations of policy `policy` on a fresh device made from
/// `device_opts` (null: plan). Allocation failure becomes fits = false with the message.
/// `progress` (may be null) gets one line per iteration.
policy_report run_policy(const network& net, const network_run_options& o,
                         const std::string& policy, const device_options& device_opts,
                         int iterations, const std::string& data_spec, std::ostream* progress,
                         std::string* device_name);

/// Writes the --json/--csv/--svg files asked for.
void write_outputs(const network_run_options& o, const run_report& report, std::ostream& out);

}  // namespace memweave
