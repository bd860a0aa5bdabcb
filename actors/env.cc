#include "actors/env.h"

#include "actors/protocol.h"
#include "actors/system_config.h"
#include "io/remote/remote_file_system.h"
#include "io/transport/data_plane.h"

namespace shardyard {

namespace actors {

SystemConfig::SystemConfig() {
  register_protocol(*this);
  set("scheduler.max-threads", 2);
  set("scheduler.policy", caf::atom("sharing"));
  set("logger.verbosity", caf::atom("quiet"));
}

}  // namespace actors

namespace {

class DefaultEnv : public Env {
 public:
  FileSystem* file_system() override { return &io::default_file_system(); }
  Clock* clock() override { return &real_clock(); }
  std::shared_ptr<DataPlane> new_data_plane() override { return io::inproc_data_plane(); }
  std::unique_ptr<caf::actor_system_config> new_actor_system_config() override {
    return std::make_unique<actors::SystemConfig>();
  }
};

}  // namespace

Env* Env::Default() {
  static DefaultEnv env;  // stateless: what it hands out are singletons or new objects
  return &env;
}

std::unique_ptr<caf::actor_system_config> EnvWrapper::new_actor_system_config() {
  return target_->new_actor_system_config();
}

}  // namespace shardyard
