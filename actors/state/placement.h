// Where a rank process sits in its job, and where it finds the job's coordinator, from the
// environment that launchers set (docs/multi-process.md).
//
// One rule for every launcher, first found wins: SHARDYARD_* variables (SHARDYARD_RANK,
// SHARDYARD_WORLD_SIZE, ...), then torchrun's (RANK, WORLD_SIZE, LOCAL_RANK, ...; also what
// tools/shardyard-launch sets), then Open MPI's (OMPI_COMM_WORLD_*), MPICH's (PMI_RANK,
// PMI_SIZE), then SLURM's (SLURM_PROCID, ...). Explicit options and flags win over all of
// them; the caller applies them after this resolution.
//
// The coordinator is found, in this order: SHARDYARD_COORDINATOR=HOST:PORT; else
// MASTER_ADDR at port MASTER_PORT + 1 (SHARDYARD_COORDINATOR_PORT overrides the port), so
// the trainer's own MASTER_PORT stays free for torch.distributed; else, when every rank
// runs on this node, a rendezvous file named after the job id in which rank 0 writes the
// port it bound. Rank 0 hosts the coordinator unless a launcher runs it
// (SHARDYARD_COORDINATOR_EXTERNAL=1, which tools/shardyard-launch sets).
//
// Pure: the environment comes in as a lookup function, so every rule is unit-tested.
// Thread-safe (no state).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "runtime/status.h"

namespace shardyard::actors {

// Looks up one environment variable; nullopt when unset or empty.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
// The process environment (getenv).
EnvLookup process_env();

struct HostPort {
  std::string host;
  uint16_t port = 0;  // 0: any free port (a host binds one and tells the others)
  std::string to_string() const;
};
// "HOST:PORT", "[v6]:PORT"; the port 1..65535 (0 only with allow_any_port).
Result<HostPort> parse_host_port(const std::string& text, bool allow_any_port = false);
// localhost, 127.0.0.0/8, ::1.
bool is_loopback_host(const std::string& host);

struct JobPlacement {
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t local_rank = 0;
  uint32_t local_world_size = 1;
  uint32_t node_rank = 0;
  // Who said so: "SHARDYARD_*", "torchrun", "Open MPI", "MPICH", "SLURM", or empty when
  // no launcher variable was set (a world of one).
  std::string launcher;
  // The job's identity as the launcher names it (TORCHELASTIC_RUN_ID, the MPI job, the
  // SLURM job and step), empty when unknown; restarts counts torchrun's restarts.
  std::string job_id;
  // A per-job random value the launcher gives every rank (Open MPI's
  // OMPI_MCA_orte_precondition_transports), empty when it has none.
  std::string job_secret;
  uint32_t restart_count = 0;

  // Where the coordinator listens: set when an address was given or derived (host empty
  // when none was: a Loader then says what to set). Port 0 with rendezvous_file set: one
  // node, rank 0 binds a free loopback port and writes it to the file, the others read it.
  HostPort coordinator;
  std::string rendezvous_file;
  bool host_coordinator = false;   // this process publishes the coordinator
  std::string coordinator_source;  // which variable named it, for messages

  // The job's token: a file (SHARDYARD_TOKEN_FILE) or the value itself (SHARDYARD_TOKEN).
  // Without either, on loopback, the launcher's job secret, else its job id, stands in
  // (derived_token): it keeps two jobs of one machine apart, and it is no secret against the
  // machine's other processes of the same user.
  std::string token_file;
  std::string token;
  std::string derived_token;
};

// Resolves the placement. `runtime_dir` is where rendezvous files go (see
// default_rendezvous_dir()). Errors name the variable and the value that is wrong.
Result<JobPlacement> resolve_placement(const EnvLookup& env, const std::string& runtime_dir);

// $XDG_RUNTIME_DIR/shardyard, else /tmp/shardyard-<uid>.
std::string default_rendezvous_dir(const EnvLookup& env);

}  // namespace shardyard::actors
