#include "actors/state/placement.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace shardyard::actors {

namespace {

Result<uint32_t> number(const EnvLookup& env, const std::string& name, uint32_t fallback) {
  auto v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v->c_str(), &end, 10);
  if (*end != '\0' || !std::isdigit(static_cast<unsigned char>((*v)[0])) || errno != 0 ||
      x > UINT32_MAX)
    return invalid_argument(name + "='" + *v + "' is not a number from 0 to " +
                            std::to_string(UINT32_MAX));
  return static_cast<uint32_t>(x);
}

// The variable names of one launcher's convention.
struct Convention {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  const char* node_rank;  // may be null
};

const Convention kConventions[] = {
    {"SHARDYARD_*", "SHARDYARD_RANK", "SHARDYARD_WORLD_SIZE", "SHARDYARD_LOCAL_RANK",
     "SHARDYARD_LOCAL_WORLD_SIZE", "SHARDYARD_NODE_RANK"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK"},
    {"MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", nullptr},
    {"SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE",
     "SLURM_NODEID"},
};

// The job's identity as each launcher names it: every rank of one job sees the same.
std::string job_id_of(const EnvLookup& env, const std::string& launcher) {
  auto first = [&](std::initializer_list<const char*> names) -> std::string {
    for (const char* n : names)
      if (auto v = env(n)) return std::string(n) + "=" + *v;
    return {};
  };
  if (launcher == "SHARDYARD_*") return first({"SHARDYARD_JOB_ID", "TORCHELASTIC_RUN_ID"});
  if (launcher == "torchrun") return first({"TORCHELASTIC_RUN_ID"});
  if (launcher == "Open MPI")
    return first({"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid"});
  if (launcher == "MPICH") return first({"PMI_KVS", "PMI_ID"});
  if (launcher == "SLURM") {
    auto job = env("SLURM_JOB_ID");
    if (!job) return {};
    return "SLURM_JOB_ID=" + *job + "." + env("SLURM_STEP_ID").value_or("0");
  }
  return {};
}

// A file name from a job id: letters, digits, '-', '_' and '.' kept, the rest '_'.
std::string file_safe(const std::string& s) {
  std::string out;
  for (char c : s)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  return out;
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
}

std::string HostPort::to_string() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<HostPort> parse_host_port(const std::string& text, bool allow_any_port) {
  HostPort hp;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return invalid_argument("'" + text + "' is not HOST:PORT ([v6 address]:PORT for IPv6)");
    hp.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon)
      return invalid_argument("'" + text + "' is not HOST:PORT");
    hp.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (hp.host.empty()) return invalid_argument("'" + text + "' has no host (HOST:PORT)");
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return invalid_argument("'" + text + "' has no port number (HOST:PORT)");
  unsigned long p = std::strtoul(port.c_str(), nullptr, 10);
  if (p > 65535 || (p == 0 && !allow_any_port))
    return invalid_argument("'" + text + "': the port must be 1..65535");
  hp.port = static_cast<uint16_t>(p);
  return hp;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "ip6-localhost") return true;
  return host.rfind("127.", 0) == 0 && host.find_first_not_of("0123456789.") == std::string::npos;
}

std::string default_rendezvous_dir(const EnvLookup& env) {
  if (auto xdg = env("XDG_RUNTIME_DIR")) return *xdg + "/shardyard";
  return "/tmp/shardyard-" + std::to_string(static_cast<unsigned long>(getuid()));
}

Result<JobPlacement> resolve_placement(const EnvLookup& env, const std::string& runtime_dir) {
  JobPlacement p;
  const Convention* conv = nullptr;
  for (const auto& c : kConventions)
    if (env(c.rank) || env(c.size)) {
      conv = &c;
      break;
    }
  if (conv != nullptr) {
    if (!env(conv->rank) || !env(conv->size))
      return invalid_argument(std::string(conv->launcher) + " variables are incomplete: " +
                              conv->rank + " and " + conv->size + " must both be set");
    p.launcher = conv->launcher;
    SY_ASSIGN_OR_RETURN(p.rank, number(env, conv->rank, 0));
    SY_ASSIGN_OR_RETURN(p.world_size, number(env, conv->size, 1));
    if (p.world_size == 0) return invalid_argument(std::string(conv->size) + "=0: no ranks");
    if (p.rank >= p.world_size)
      return invalid_argument(std::string(conv->rank) + "=" + std::to_string(p.rank) +
                              " is outside " + conv->size + "=" + std::to_string(p.world_size));
    SY_ASSIGN_OR_RETURN(p.local_rank, number(env, conv->local_rank, p.rank));
    // A local world size nobody gave is unknown: 0 until the rule below decides.
    SY_ASSIGN_OR_RETURN(p.local_world_size, number(env, conv->local_size, 0));
    if (conv->node_rank) {
      SY_ASSIGN_OR_RETURN(p.node_rank, number(env, conv->node_rank, 0));
    }
    p.job_id = job_id_of(env, p.launcher);
    if (p.launcher == "Open MPI")
      p.job_secret = env("OMPI_MCA_orte_precondition_transports").value_or("");
    SY_ASSIGN_OR_RETURN(p.restart_count, number(env, "TORCHELASTIC_RESTART_COUNT", 0));
  }
  // One node: the launcher says every rank is local (SLURM by its node count).
  bool one_node = p.local_world_size == p.world_size;
  if (p.launcher == "SLURM") {
    SY_ASSIGN_OR_RETURN(uint32_t nodes, number(env, "SLURM_NNODES", 0));
    one_node = nodes == 1;
    if (one_node) p.local_world_size = p.world_size;
  }
  if (p.local_world_size == 0) p.local_world_size = 1;

  if (auto f = env("SHARDYARD_TOKEN_FILE")) p.token_file = *f;
  if (auto t = env("SHARDYARD_TOKEN")) p.token = *t;
  if (p.world_size == 1) return p;

  const bool external = env("SHARDYARD_COORDINATOR_EXTERNAL").value_or("0") != "0";
  p.host_coordinator = !external && p.rank == 0;
  if (auto c = env("SHARDYARD_COORDINATOR")) {
    auto hp = parse_host_port(*c);
    if (!hp.is_ok()) return invalid_argument("SHARDYARD_COORDINATOR: " + hp.status().message());
    p.coordinator = *hp;
    p.coordinator_source = "SHARDYARD_COORDINATOR";
  } else if (auto addr = env("MASTER_ADDR")) {
    auto port = env("MASTER_PORT");
    auto own = env("SHARDYARD_COORDINATOR_PORT");
    if (!port && !own)
      return invalid_argument(
          "MASTER_ADDR is set but neither MASTER_PORT nor "
          "SHARDYARD_COORDINATOR_PORT: the coordinator needs a port");
    uint32_t n = 0;
    if (own) {
      SY_ASSIGN_OR_RETURN(n, number(env, "SHARDYARD_COORDINATOR_PORT", 0));
    } else {
      SY_ASSIGN_OR_RETURN(n, number(env, "MASTER_PORT", 0));
      ++n;  // MASTER_PORT itself belongs to torch.distributed's store
    }
    if (n == 0 || n > 65535)
      return invalid_argument("the coordinator's port " + std::to_string(n) + " (from " +
                              (own ? "SHARDYARD_COORDINATOR_PORT" : "MASTER_PORT + 1") +
                              ") is not 1..65535");
    p.coordinator = HostPort{*addr, static_cast<uint16_t>(n)};
    p.coordinator_source =
        own ? "MASTER_ADDR and SHARDYARD_COORDINATOR_PORT" : "MASTER_ADDR and MASTER_PORT + 1";
  } else if (one_node && !p.job_id.empty() && !external) {
    // Open MPI gives every job a session folder of its own, which mpirun removes at the end.
    auto session = p.launcher == "Open MPI" ? env("OMPI_MCA_orte_jobfam_session_dir")
                                            : std::optional<std::string>();
    p.rendezvous_file = session ? *session + "/shardyard-coordinator"
                                : runtime_dir + "/" + file_safe(p.job_id) + ".coordinator";
    p.coordinator = HostPort{"127.0.0.1", 0};
    p.coordinator_source = "the rendezvous file " + p.rendezvous_file;
  } else {
    // No address: open() says what to set (a job of several processes needs one).
    p.coordinator_source.clear();
  }
  if (p.token.empty() && p.token_file.empty() && !external &&
      (p.coordinator.host.empty() || is_loopback_host(p.coordinator.host)))
    p.derived_token = !p.job_secret.empty() ? p.job_secret : p.job_id;
  return p;
}

}  // namespace shardyard::actors
