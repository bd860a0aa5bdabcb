// Tests of actors/state/placement.h: every launcher's variables, the coordinator's address
// rule, rendezvous files, tokens, and the errors that name what is wrong.
#include "actors/state/placement.h"

#include <gtest/gtest.h>

#include <map>

namespace shardyard::actors {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

Result<JobPlacement> resolve(std::map<std::string, std::string> vars) {
  return resolve_placement(env_of(std::move(vars)), "/run/sy");
}

TEST(PlacementTest, NoLauncherIsAWorldOfOne) {
  auto p = resolve({});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->rank, 0u);
  EXPECT_EQ(p->world_size, 1u);
  EXPECT_EQ(p->launcher, "");
  EXPECT_FALSE(p->host_coordinator);
}

TEST(PlacementTest, TorchrunOnOneNodeFindsTheCoordinatorNextToMasterPort) {
  auto p = resolve({{"RANK", "2"},
                    {"WORLD_SIZE", "4"},
                    {"LOCAL_RANK", "2"},
                    {"LOCAL_WORLD_SIZE", "4"},
                    {"GROUP_RANK", "0"},
                    {"MASTER_ADDR", "localhost"},
                    {"MASTER_PORT", "29500"},
                    {"TORCHELASTIC_RUN_ID", "abc"},
                    {"TORCHELASTIC_RESTART_COUNT", "1"}});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->launcher, "torchrun");
  EXPECT_EQ(p->rank, 2u);
  EXPECT_EQ(p->world_size, 4u);
  EXPECT_EQ(p->local_world_size, 4u);
  EXPECT_EQ(p->coordinator.host, "localhost");
  EXPECT_EQ(p->coordinator.port, 29501);  // MASTER_PORT stays torch.distributed's
  EXPECT_FALSE(p->host_coordinator);      // rank 0 hosts it
  EXPECT_EQ(p->restart_count, 1u);
  EXPECT_EQ(p->job_id, "TORCHELASTIC_RUN_ID=abc");
  EXPECT_EQ(p->derived_token, "TORCHELASTIC_RUN_ID=abc");
}

TEST(PlacementTest, RankZeroHostsUnlessALauncherRunsTheCoordinator) {
  std::map<std::string, std::string> vars{
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.5"}, {"MASTER_PORT", "29500"}};
  auto p = resolve(vars);
  ASSERT_TRUE(p.is_ok());
  EXPECT_TRUE(p->host_coordinator);
  EXPECT_EQ(p->derived_token, "");  // not on loopback, and no job id
  vars["SHARDYARD_COORDINATOR_EXTERNAL"] = "1";
  vars["SHARDYARD_COORDINATOR"] = "10.0.0.5:7000";
  p = resolve(vars);
  ASSERT_TRUE(p.is_ok());
  EXPECT_FALSE(p->host_coordinator);
  EXPECT_EQ(p->coordinator.to_string(), "10.0.0.5:7000");
  EXPECT_EQ(p->coordinator_source, "SHARDYARD_COORDINATOR");
}

TEST(PlacementTest, ShardyardVariablesWinOverTorchrunAndCoordinatorPortOverridesTheRule) {
  auto p = resolve({{"SHARDYARD_RANK", "1"},
                    {"SHARDYARD_WORLD_SIZE", "3"},
                    {"RANK", "7"},
                    {"WORLD_SIZE", "8"},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", "29500"},
                    {"SHARDYARD_COORDINATOR_PORT", "4000"}});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->launcher, "SHARDYARD_*");
  EXPECT_EQ(p->rank, 1u);
  EXPECT_EQ(p->world_size, 3u);
  EXPECT_EQ(p->coordinator.port, 4000);
}

TEST(PlacementTest, OpenMpiOnOneNodeMeetsThroughARendezvousFile) {
  auto p = resolve({{"OMPI_COMM_WORLD_RANK", "1"},
                    {"OMPI_COMM_WORLD_SIZE", "3"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                    {"OMPI_MCA_ess_base_jobid", "3212967937"}});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->launcher, "Open MPI");
  EXPECT_EQ(p->rendezvous_file, "/run/sy/OMPI_MCA_ess_base_jobid_3212967937.coordinator");
  EXPECT_EQ(p->coordinator.host, "127.0.0.1");
  EXPECT_EQ(p->coordinator.port, 0);
  EXPECT_EQ(p->derived_token, "OMPI_MCA_ess_base_jobid=3212967937");
}

TEST(PlacementTest, OpenMpiSessionFolderAndRandomValueWhenItGivesThem) {
  auto p = resolve({{"OMPI_COMM_WORLD_RANK", "0"},
                    {"OMPI_COMM_WORLD_SIZE", "2"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                    {"OMPI_MCA_ess_base_jobid", "7"},
                    {"OMPI_MCA_orte_jobfam_session_dir", "/tmp/ompi.vm.0/pid.42"},
                    {"OMPI_MCA_orte_precondition_transports", "adb6dff1-881d4c4f"}});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_TRUE(p->host_coordinator);
  EXPECT_EQ(p->rendezvous_file, "/tmp/ompi.vm.0/pid.42/shardyard-coordinator");
  EXPECT_EQ(p->derived_token, "adb6dff1-881d4c4f");
}

TEST(PlacementTest, SeveralNodesWithoutAnAddressLeaveTheCoordinatorUnknown) {
  auto p = resolve({{"OMPI_COMM_WORLD_RANK", "1"},
                    {"OMPI_COMM_WORLD_SIZE", "4"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                    {"OMPI_MCA_ess_base_jobid", "1"}});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->rank, 1u);
  EXPECT_EQ(p->world_size, 4u);
  EXPECT_TRUE(p->coordinator.host.empty());
  EXPECT_TRUE(p->rendezvous_file.empty());
}

TEST(PlacementTest, SlurmOnOneNodeUsesTheJobAndStep) {
  auto p = resolve({{"SLURM_PROCID", "0"},
                    {"SLURM_NTASKS", "2"},
                    {"SLURM_LOCALID", "0"},
                    {"SLURM_NODEID", "0"},
                    {"SLURM_NNODES", "1"},
                    {"SLURM_JOB_ID", "77"},
                    {"SLURM_STEP_ID", "3"}});
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->launcher, "SLURM");
  EXPECT_TRUE(p->host_coordinator);
  EXPECT_EQ(p->local_world_size, 2u);
  EXPECT_EQ(p->rendezvous_file, "/run/sy/SLURM_JOB_ID_77.3.coordinator");
}

TEST(PlacementTest, BadValuesNameTheVariable) {
  auto p = resolve({{"RANK", "x"}, {"WORLD_SIZE", "2"}});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("RANK='x'"), std::string::npos);
  p = resolve({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("outside"), std::string::npos);
  p = resolve({{"RANK", "0"}});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("WORLD_SIZE"), std::string::npos);
  p = resolve({{"RANK", "-1"}, {"WORLD_SIZE", "2"}});
  EXPECT_FALSE(p.is_ok());
  p = resolve({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SHARDYARD_COORDINATOR", "nohost"}});
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("SHARDYARD_COORDINATOR"), std::string::npos);
  p = resolve({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "65535"}});
  EXPECT_FALSE(p.is_ok());  // 65536 is no port
}

TEST(PlacementTest, HostPortParsing) {
  EXPECT_EQ(parse_host_port("a.b:1")->to_string(), "a.b:1");
  EXPECT_EQ(parse_host_port("[::1]:80")->host, "::1");
  EXPECT_EQ(parse_host_port("[::1]:80")->to_string(), "[::1]:80");
  EXPECT_FALSE(parse_host_port("::1:80").is_ok());
  EXPECT_FALSE(parse_host_port("h:0").is_ok());
  EXPECT_TRUE(parse_host_port("h:0", true).is_ok());
  EXPECT_FALSE(parse_host_port(":80").is_ok());
  EXPECT_FALSE(parse_host_port("h:99999").is_ok());
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("127.1.2.3"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_FALSE(is_loopback_host("127.example.org"));
  EXPECT_FALSE(is_loopback_host("10.0.0.1"));
}

}  // namespace
}  // namespace shardyard::actors
