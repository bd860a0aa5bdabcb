// Writes net_fuzz's seed corpus: one file per message the coordinator's gate takes from the
// network, each a valid CAF message as the middleman would decode it.
//   net_corpus_writer DIR
#include <caf/all.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "actors/protocol.h"

using namespace shardyard::actors;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: net_corpus_writer DIR\n");
    return 2;
  }
  caf::actor_system_config cfg;
  register_protocol(cfg);
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  int n = 0;
  auto put = [&](const std::string& name, caf::message msg) {
    std::vector<char> buf;
    caf::binary_serializer sink(sys, buf);
    if (sink(msg)) return;
    std::ofstream(std::string(argv[1]) + "/" + name, std::ios::binary)
        .write(buf.data(), static_cast<std::streamsize>(buf.size()));
    ++n;
  };
  JobInfo job;
  job.distributed_strategy = "strided";
  job.worker_strategy = "contiguous";
  job.pipeline = "map/decode";
  job.world_size = 4;
  put("hello", caf::make_message(Hello{3, 1, std::string(32, 'n')}));
  put("proof", caf::make_message(Proof{1, std::string(32, 'p')}));
  put("join", caf::make_message(JoinRequest{1, 2, 0xabcdef, job, 0, 3}));
  put("epoch_key", caf::make_message(EpochKeyRequest{2}));
  put("rank_epoch_done", caf::make_message(RankEpochDone{1, 2, 40, 160}));
  CheckpointBegin begin;
  begin.rank = 1;
  begin.dir = "/ckpt";
  put("checkpoint_begin", caf::make_message(begin));
  RankSaved saved;
  saved.rank = 1;
  saved.dir = "/ckpt";
  saved.file = "rank-00001.g000001.ckpt";
  saved.bytes = std::string(64, 'b');
  put("rank_saved", caf::make_message(saved));
  ResumeOffer offer;
  offer.rank = 1;
  offer.dir = "/ckpt";
  offer.manifest = "SYCKMNFT";
  offer.rank_files = {"a", "b"};
  put("resume_offer", caf::make_message(offer));
  put("rank_leave", caf::make_message(RankLeave{1, false, "stopped"}));
  RankSaveFailed failed;
  failed.rank = 1;
  failed.error = "disk full";
  put("rank_save_failed", caf::make_message(failed));
  put("snapshot", caf::make_message(SnapshotRequest{}));
  std::printf("net_corpus_writer: %d seeds in %s\n", n, argv[1]);
  return n > 0 ? 0 : 1;
}
