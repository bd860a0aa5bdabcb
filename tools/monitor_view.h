// What `shardyard monitor` shows: a table of the job's actors, a coverage bar per rank and
// the likely bottleneck, from one status (GET /status) or from two a few seconds apart.
//
// With two statuses, items/s and the share of time blocked are over the interval between
// them (what is happening now); with one, since each actor started. The bottleneck rule is
// documented in docs/monitor.md and in find_bottleneck() below.
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "actors/state/job_status.h"

namespace shardyard::tools {

// One actor's share of time blocked on input and on output (0..1) and its item rate, over
// the interval from `before` (null: since it started).
struct ActorLoad {
  double input = 0;
  double output = 0;
  double items_per_s = 0;
};
ActorLoad actor_load(const actors::ActorSnapshot& now, const actors::ActorSnapshot* before);

struct Bottleneck {
  std::string stage;   // "trainer", "loader", "workers", "input", "dispatcher", or "none"
  std::string reason;  // one sentence with the numbers it is based on
};
// The rule, in order (shares averaged over the actors of a role):
//  1. no rank has an open epoch: none;
//  2. loaders wait for data less than 10% of the time: the trainer (loading keeps up);
//  3. workers are blocked on output at least half the time: the loader (merge and
//     collation cannot empty their queues while the trainer waits);
//  4. in a dispatch mode, workers wait for input at least half the time: the dispatcher,
//     reading (itself blocked on input) or running its non-replicable stages;
//  5. workers wait for input (reads) at least half the time: input (storage);
//  6. otherwise the workers are busy in their stages: workers (CPU).
Bottleneck find_bottleneck(const actors::JobStatus& now, const actors::JobStatus* before);

struct ViewOptions {
  int width = 100;     // columns to fill; longer lines are cut
  int height = 0;      // rows available (0: no limit); actor rows beyond it are summarised
  std::string source;  // HOST:PORT, for the title
};
// The whole view, one line per element, without escape sequences.
std::vector<std::string> render_view(const actors::JobStatus& now, const actors::JobStatus* before,
                                     const ViewOptions& options);

}  // namespace shardyard::tools
