// Env: everything a job takes from its surroundings, in one object that a test or another
// placement swaps (leveldb's Env and EnvWrapper):
//   - the file system that sources are read from and checkpoints written to;
//   - the clock;
//   - a new data plane for every job (how items move between its roles);
//   - the configuration of the actor system the roles run on.
// LoaderOptions::env names it; null means Env::Default(). To change one part, derive from
// EnvWrapper and override that part (FileSystemEnv swaps the file system); a test wraps the
// file system to inject delays or failures (tests/io/fs/test_file_systems.h), never
// production code.
//
// Installed as <shardyard/env.h>. DataPlane's interface and caf::actor_system_config are
// only declared here: the first is internal to shardyard (io/transport/data_plane.h), the
// second is CAF's (<caf/actor_system_config.hpp>), which an override includes itself.
//
// Thread-safety: implementations are thread-safe. An Env, and what it returns by pointer,
// must outlive every loader and cluster that uses it.
#pragma once

#include <memory>

#include "io/fs/interface.h"
#include "runtime/clock.h"

namespace caf {
class actor_system_config;
}  // namespace caf

namespace shardyard {

class DataPlane;

class Env {
 public:
  virtual ~Env() = default;
  // The process's Env: local paths read and written, http://, https:// and s3:// uris read
  // (configured from the environment), the system's clocks, the in-process data plane, and
  // an actor system of two scheduler threads that block when idle. A process singleton.
  static Env* Default();

  virtual FileSystem* file_system() = 0;
  virtual Clock* clock() = 0;
  // A fresh data plane for one job.
  virtual std::shared_ptr<DataPlane> new_data_plane() = 0;
  // The configuration of a job's actor system. The cluster registers shardyard's messages
  // on it (actors/protocol.h), whatever else it sets.
  virtual std::unique_ptr<caf::actor_system_config> new_actor_system_config() = 0;
};

// Forwards every call to another Env (which must outlive it).
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  FileSystem* file_system() override { return target_->file_system(); }
  Clock* clock() override { return target_->clock(); }
  std::shared_ptr<DataPlane> new_data_plane() override { return target_->new_data_plane(); }
  std::unique_ptr<caf::actor_system_config> new_actor_system_config() override;

 private:
  Env* target_;
};

// Another Env (Env::Default() unless given) with another file system: a user's storage, or
// a test's fault-injecting wrapper. Both must outlive it.
class FileSystemEnv : public EnvWrapper {
 public:
  explicit FileSystemEnv(FileSystem* fs, Env* base = Env::Default()) : EnvWrapper(base), fs_(fs) {}
  FileSystem* file_system() override { return fs_; }

 private:
  FileSystem* fs_;
};

}  // namespace shardyard
