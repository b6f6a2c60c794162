// Data parallelism needs every rank to run the same thing: the same network, batch,
// iterations and policies (or the ranks' collectives stop matching, and they hang or MPI
// ends the job with a message of its own), and the same seed and solver (or they train apart
// without a word: each rank applies its own update). mpirun normally starts every rank with
// one command line, but a wrapper script, a per-rank environment or a typo in a hostfile can
// give them different ones; this compares them before the first collective.
#pragma once

#include <map>
#include <string>

namespace memweave {

class communicator;

/// What must agree across the ranks: `options` (the command line's --name -> value, of which
/// the output paths are left out: rank 0 alone writes them) and the MEMWEAVE_* variables of
/// this process but those that name this rank's own device, log level or files, and the
/// checksum of the files --net (a model) and --init-from name (each rank reads its own), one
/// "name=value" line each, in name order.
std::string agreement_text(const std::map<std::string, std::string>& options);

/// On a rank but 0: one warning per output option given (--json, --save, ...), which rank 0
/// alone writes (they were dropped without a word).
void warn_outputs_of_other_ranks(const communicator& comm,
                                 const std::map<std::string, std::string>& options);

/// Compares `text` (agreement_text) across the ranks of `comm`: returns when every rank's is
/// rank 0's, else throws invalid_argument on every rank (so each fails, none waits for the
/// others): a rank that differs names the first option or variable that differs, with its
/// value here and on rank 0; the others name the ranks that differ. Collective: every rank
/// calls it once, before any other collective.
void check_ranks_agree(communicator& comm, const std::string& text);

}  // namespace memweave
