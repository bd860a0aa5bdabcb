// fault_shardyard: the shardyard command line (tools/cli.cc) over an Env whose file system
// injects faults from the test side (tests/io/fs/test_file_systems.h), for end-to-end tests
// that need a slow or failing disk under the real binary.
//
//   fault_shardyard [--hold-renames-onto NAME --hold-ms MS] -- <shardyard arguments>
//
// --hold-renames-onto CHECKPOINT --hold-ms 3000 holds every commit of a checkpoint for 3 s
// after every rank's file is durable, so a test can SIGKILL the process inside a save.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "actors/env.h"
#include "commands.h"
#include "io/fs/test_file_systems.h"

using namespace shardyard;

int main(int argc, char** argv) {
  testing::FaultFileSystem fs(Env::Default()->file_system());
  std::string hold_name;
  int hold_ms = 0, i = 1;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) break;
    if (flag == "--hold-renames-onto") {
      hold_name = argv[++i];
    } else if (flag == "--hold-ms") {
      hold_ms = std::stoi(argv[++i]);
    } else {
      std::fprintf(stderr, "fault_shardyard: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (i >= argc) {
    std::fprintf(stderr, "usage: fault_shardyard [flags] -- <shardyard arguments>\n");
    return 2;
  }
  if (!hold_name.empty()) fs.hold_renames_onto(hold_name, hold_ms);
  FileSystemEnv env(&fs);
  std::vector<char*> args{argv[0]};
  for (++i; i < argc; ++i) args.push_back(argv[i]);
  return tools::run_cli(static_cast<int>(args.size()), args.data(), &env);
}
