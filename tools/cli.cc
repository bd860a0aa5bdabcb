// The shardyard command line: run, manifest build/show, checkpoint inspect, coordinator,
// monitor.
#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"

namespace shardyard::tools {

void print_error(const std::string& what) {
  std::fprintf(stderr, "shardyard: error: %s\n", what.c_str());
}
void print_warning(const std::string& what) {
  std::fprintf(stderr, "shardyard: warning: %s\n", what.c_str());
}

int run_cli(int argc, char** argv, Env* env) {
  CLI::App app{"shardyard: feed distributed training with WebDataset shards"};
  app.require_subcommand(1);
  auto run = add_run_command(app, env);
  auto manifest = add_manifest_commands(app);
  auto checkpoint = add_checkpoint_commands(app);
  auto coordinator = add_coordinator_command(app, env);
  auto monitor = add_monitor_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  // Errors are values below this point; an exception that still gets here (a library's,
  // such as std::bad_alloc) ends the command with a message, never with abort().
  try {
    if (app.got_subcommand("run")) return run();
    if (app.got_subcommand("checkpoint")) return checkpoint();
    if (app.got_subcommand("coordinator")) return coordinator();
    if (app.got_subcommand("monitor")) return monitor();
    return manifest();
  } catch (const std::exception& e) {
    print_error(std::string("unexpected failure: ") + e.what());
  } catch (...) {
    print_error("unexpected failure (an unknown exception)");
  }
  return 1;
}

}  // namespace shardyard::tools
