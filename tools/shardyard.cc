// shardyard: load a dataset end to end (run), build and show manifests (manifest), inspect
// checkpoints (checkpoint inspect), run a job's coordinator (coordinator), watch a running
// job (monitor).
#include "commands.h"

int main(int argc, char** argv) { return shardyard::tools::run_cli(argc, argv, nullptr); }
