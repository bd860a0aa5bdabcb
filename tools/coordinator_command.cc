// `shardyard coordinator`: a job's coordinator in a process of its own, for ranks in other
// processes and on other nodes (docs/multi-process.md). tools/shardyard-launch starts it on
// node 0. It ends when every rank joined and left (exit 0) or when the job stops (exit 1,
// with the reason); SIGINT and SIGTERM stop it (130, 143), and the ranks then lose it.
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "actors/coordinator_service.h"
#include "actors/loader.h"
#include "commands.h"
#include "run_stop.h"

namespace shardyard::tools {

namespace {

struct CoordinatorArgs {
  CoordinatorServiceOptions options;
  std::string port_file;
  double join_timeout_s = 300;
  bool metrics_address_given = false;
};

// The bound address, written whole or not at all (a launcher polls for the file).
Status write_port_file(const std::string& path, uint16_t port) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) return io_error("cannot write the port file " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return io_error("cannot write the port file " + path);
  return Status::ok();
}

int run_coordinator(CoordinatorArgs& args) {
  StopSignals signals([](int sig) {
    std::fprintf(stderr, "shardyard coordinator: stopped by signal %d while starting\n", sig);
  });
  args.options.join_timeout_ms = static_cast<uint32_t>(args.join_timeout_s * 1000);
  // The ranks' variable (LoaderOptions::topology_from_env) applies here too, so that one
  // setting in a launcher's environment covers both sides of every connection.
  // SHARDYARD_METRICS_PORT / _ADDRESS as the ranks read them, unless the flags say.
  if (args.options.metrics_port < 0) {
    LoaderOptions from_env;
    if (Status st = from_env.monitor_from_env(); !st.is_ok()) {
      print_error(st.to_string());
      return 2;
    }
    args.options.metrics_port = from_env.metrics_port;
    if (!args.metrics_address_given) args.options.metrics_address = from_env.metrics_address;
  }
  const char* tls = std::getenv("SHARDYARD_TLS");
  if (tls != nullptr && *tls != '\0' && std::string(tls) != "0") args.options.force_tls = true;
  auto service = CoordinatorService::start(args.options);
  if (!service.is_ok()) {
    print_error(service.status().to_string());
    return 1;
  }
  signals.on_signal([&](int) { (*service)->stop(); });
  std::fprintf(stderr, "shardyard coordinator: listening on port %u for %u ranks\n",
               static_cast<unsigned>((*service)->port()), args.options.world_size);
  if ((*service)->metrics_port() != 0)
    std::fprintf(
        stderr,
        "shardyard coordinator: the whole job's /metrics and /status on %s:%u "
        "(shardyard monitor %s:%u)\n",
        args.options.metrics_address.c_str(), static_cast<unsigned>((*service)->metrics_port()),
        args.options.metrics_address.c_str(), static_cast<unsigned>((*service)->metrics_port()));
  if (!args.port_file.empty()) {
    Status st = write_port_file(args.port_file, (*service)->port());
    if (!st.is_ok()) {
      print_error(st.to_string());
      return 1;
    }
  }
  Status outcome = (*service)->wait();
  signals.on_signal([](int) {});  // the service goes away: a late signal changes nothing
  if (signals.received() != 0) {
    std::fprintf(stderr, "shardyard coordinator: stopped by %s\n",
                 signals.received() == SIGINT ? "SIGINT" : "SIGTERM");
    return 128 + signals.received();
  }
  if (!outcome.is_ok()) {
    print_error("the job stopped: " + outcome.message());
    return 1;
  }
  std::fprintf(stderr, "shardyard coordinator: every rank finished\n");
  return 0;
}

}  // namespace

Command add_coordinator_command(CLI::App& app, Env* env) {
  auto args = std::make_shared<CoordinatorArgs>();
  args->options.env = env;
  auto* cmd = app.add_subcommand(
      "coordinator", "run a job's coordinator for rank processes (docs/multi-process.md)");
  cmd->add_option("--listen", args->options.listen,
                  "HOST:PORT to listen on (default 127.0.0.1:0, a free port)");
  cmd->add_option("--world-size", args->options.world_size, "ranks of the job")
      ->required()
      ->check(CLI::Range(1u, 65536u));
  cmd->add_option("--token-file", args->options.token_file,
                  "file holding the job's secret token (required off loopback)");
  cmd->add_option("--port-file", args->port_file, "write the bound port into this file");
  cmd->add_option("--restart-count", args->options.restart_count,
                  "the launcher's restart this coordinator serves (ranks of others are refused)");
  cmd->add_option("--join-timeout", args->join_timeout_s,
                  "seconds the other ranks may take after the first joined (default 300)")
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_option("--metrics-port", args->options.metrics_port,
                  "serve the whole job's /metrics and /status on this port (0: a free one; "
                  "default SHARDYARD_METRICS_PORT, else off)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-address", args->options.metrics_address,
                  "the address to serve them on (default 127.0.0.1: anyone who can reach it "
                  "can read the job's state)")
      ->each([args](const std::string&) { args->metrics_address_given = true; });
  cmd->add_flag("--tls", args->options.force_tls,
                "TLS also on loopback, as SHARDYARD_TLS=1 does (always off it)");
  return [args] { return run_coordinator(*args); };
}

}  // namespace shardyard::tools
