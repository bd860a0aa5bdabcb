// Subcommands of the shardyard command line; each registers itself on a CLI11 app and
// returns the process exit code when run (0 ok, 1 error, 2 usage). run_cli() is the whole
// command line, for the shardyard binary and for test binaries that run it over another Env.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace shardyard {
class Env;
}  // namespace shardyard

namespace shardyard::tools {

using Command = std::function<int()>;

// Parses argv and runs the subcommand; `env` (null: Env::Default()) is what `run` loads with
// and what `coordinator` commits checkpoints through.
int run_cli(int argc, char** argv, Env* env);

Command add_run_command(CLI::App& app, Env* env);
Command add_manifest_commands(CLI::App& app);
Command add_checkpoint_commands(CLI::App& app);
Command add_coordinator_command(CLI::App& app, Env* env);
Command add_monitor_command(CLI::App& app);

// Prints "shardyard: error: <what>" to stderr.
void print_error(const std::string& what);
void print_warning(const std::string& what);

}  // namespace shardyard::tools
