// shardyard: load a dataset end to end (run), build and show manifests (manifest), inspect
// checkpoints (checkpoint inspect), run a job's coordinator (coordinator), watch a running
// job (monitor). Started as a worker process (run --placement local), it serves its rank.
#include "actors/loader.h"
#include "commands.h"

int main(int argc, char** argv) {
  if (auto code = shardyard::worker_main()) return *code;
  return shardyard::tools::run_cli(argc, argv, nullptr);
}
