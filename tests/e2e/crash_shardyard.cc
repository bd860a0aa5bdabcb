// crash_shardyard: the shardyard command line with a stage of its own that crashes,
// registered before worker_main() as a trainer with stages of its own does, so that the
// stage exists in the worker processes too (docs/worker-processes.md).
//
//   --map crash:key=K[;signal=SEGV|ABRT|KILL][;once=PATH]
// kills the process running the stage when it meets the item whose key is K; with once, only
// while PATH does not exist (it is created first, so the next process gets past the item).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "actors/loader.h"
#include "commands.h"

using namespace shardyard;

namespace {

class CrashStage : public Stage {
 public:
  CrashStage(std::string key, int sig, std::string once)
      : key_(std::move(key)), sig_(sig), once_(std::move(once)) {}
  Status process(Item& item, StageContext&) override {
    if (item.key != key_) return Status::ok();
    if (!once_.empty()) {
      const int fd = ::open(once_.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
      if (fd < 0) return Status::ok();  // crashed once already
      ::close(fd);
    }
    std::fprintf(stderr, "crash stage: pid %d raises signal %d on item '%s'\n",
                 static_cast<int>(::getpid()), sig_, item.key.c_str());
    ::raise(sig_);
    return internal_error("the crash stage survived its signal");
  }

 private:
  std::string key_;
  int sig_;
  std::string once_;
};

Result<std::unique_ptr<Stage>> make_crash(const StageParams& params) {
  auto key = params.find("key");
  if (key == params.end()) return invalid_argument("crash needs key=K");
  int sig = SIGSEGV;
  if (auto s = params.find("signal"); s != params.end()) {
    if (s->second == "ABRT")
      sig = SIGABRT;
    else if (s->second == "KILL")
      sig = SIGKILL;
    else if (s->second != "SEGV")
      return invalid_argument("crash: signal is SEGV, ABRT or KILL");
  }
  auto once = params.find("once");
  return std::unique_ptr<Stage>(
      new CrashStage(key->second, sig, once == params.end() ? std::string() : once->second));
}

}  // namespace

int main(int argc, char** argv) {
  if (!StageRegistry::global().add("crash", make_crash).is_ok()) return 2;
  if (auto code = worker_main()) return *code;
  return tools::run_cli(argc, argv, nullptr);
}
