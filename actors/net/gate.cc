#include "actors/net/gate.h"

#include <cstdio>
#include <map>
#include <set>

#include "actors/net/job_secret.h"
#include "actors/net/limits.h"

namespace shardyard::actors::net {

namespace {

struct Pending {
  std::string server_nonce, client_nonce;
  uint32_t rank = 0;
};

struct GateState {
  coordinator_actor coordinator;
  GateOptions options;
  std::map<caf::node_id, Pending> challenged;           // by the node that said Hello
  std::map<caf::node_id, std::set<uint32_t>> admitted;  // nodes and the ranks they proved
  AfterTurns after_turns;                               // last: destroyed first
  static inline const char* name = "shardyard.gate";
};

using gate_pointer = gate_actor::stateful_pointer<GateState>;

void log_line(gate_pointer self, const std::string& line) {
  if (self->state.options.log) {
    self->state.options.log(line);
  } else {
    std::fprintf(stderr, "shardyard coordinator: %s\n", line.c_str());
  }
}

std::string peer_name(const caf::strong_actor_ptr& sender) {
  return sender ? "the process at node " + caf::to_string(sender->node())
                : "a peer without a handshake";
}

// Refuses a message: the error goes back to the sender (and is logged); the coordinator
// never sees it.
caf::error refuse(gate_pointer self, const std::string& why) {
  log_line(self, "refused " + peer_name(self->current_sender()) + ": " + why);
  return to_error(invalid_argument("the coordinator refused this message: " + why));
}

// OK when the sender's node was admitted (for `rank`, unless rank is kAnyRank) or is the
// gate's own process.
constexpr uint32_t kAnyRank = UINT32_MAX;
Status admitted(gate_pointer self, uint32_t rank) {
  const auto& sender = self->current_sender();
  if (!sender) return invalid_argument("it came without a sender");
  if (sender->node() == self->node()) return Status::ok();
  auto it = self->state.admitted.find(sender->node());
  if (it == self->state.admitted.end())
    return invalid_argument("its process did not prove the job's token first");
  if (rank != kAnyRank && !it->second.count(rank))
    return invalid_argument("its process proved the token for rank(s) other than rank " +
                            std::to_string(rank));
  return Status::ok();
}

// The common path of every forwarded message: admission, limits, then delegation.
template <class Reply, class Message>
caf::result<Reply> pass(gate_pointer self, const Message& msg, uint32_t rank) {
  if (Status st = admitted(self, rank); !st.is_ok()) return refuse(self, st.message());
  if (Status st = check_limits(msg); !st.is_ok()) return refuse(self, st.message());
  return self->delegate(self->state.coordinator, msg);
}

// Messages only the coordinator's own process may send.
bool local(gate_pointer self) {
  const auto& sender = self->current_sender();
  return sender && sender->node() == self->node();
}

}  // namespace

namespace {

gate_actor::behavior_type gate_fn(gate_pointer self, coordinator_actor coordinator,
                                  GateOptions options) {
  const ActorTurn turn;
  self->state.coordinator = std::move(coordinator);
  self->state.options = std::move(options);
  self->set_default_handler([=](caf::scheduled_actor* s,
                                caf::message_view& x) -> caf::result<caf::message> {
    std::string what = x.content().stringify();
    if (what.size() > 200) what = what.substr(0, 200) + "...";
    log_line(self,
             "dropped an unexpected message from " + peer_name(s->current_sender()) + ": " + what);
    // A request gets an error; a one-way message nothing (an error sent back to a one-way
    // message would make a well-meaning peer's actor quit, CAF's default error handler).
    if (s->current_message_id().is_request()) return caf::sec::unexpected_message;
    return caf::make_message();
  });
  return {
      [=](const Hello& h) -> caf::result<Challenge> {
        const ActorTurn turn(h);
        const auto& sender = self->current_sender();
        if (!sender) return refuse(self, "Hello without a sender");
        if (h.protocol_version != kProtocolVersion)
          return refuse(self, "rank " + std::to_string(h.rank) + " speaks protocol version " +
                                  std::to_string(h.protocol_version) + ", this coordinator " +
                                  std::to_string(kProtocolVersion) +
                                  ": run the same shardyard build everywhere");
        if (Status st = check_limits(h); !st.is_ok()) return refuse(self, st.message());
        Pending p{random_bytes(kNonceBytes), h.client_nonce, h.rank};
        Challenge c{p.server_nonce, caf::to_string(sender->node())};
        self->state.challenged[sender->node()] = std::move(p);
        return c;
      },
      [=](const Proof& proof) -> caf::result<Admitted> {
        const ActorTurn turn(proof);
        const auto& sender = self->current_sender();
        if (!sender) return refuse(self, "Proof without a sender");
        if (Status st = check_limits(proof); !st.is_ok()) return refuse(self, st.message());
        auto it = self->state.challenged.find(sender->node());
        if (it == self->state.challenged.end() || it->second.rank != proof.rank)
          return refuse(self, "a proof for rank " + std::to_string(proof.rank) +
                                  " without a challenge for it");
        const Pending p = it->second;
        self->state.challenged.erase(it);
        const std::string node = caf::to_string(sender->node());
        const std::string& token = self->state.options.token;
        if (!same_proof(proof.proof, auth_proof(token, "rank", p.server_nonce, p.client_nonce, node,
                                                proof.rank)))
          return refuse(self, "a process claiming rank " + std::to_string(proof.rank) +
                                  " cannot prove the job's token (is SHARDYARD_TOKEN_FILE the "
                                  "job's?)");
        self->state.admitted[sender->node()].insert(proof.rank);
        log_line(self, "admitted rank " + std::to_string(proof.rank) + " from node " + node);
        return Admitted{
            auth_proof(token, "coordinator", p.server_nonce, p.client_nonce, node, proof.rank)};
      },
      [=](const JoinRequest& m) -> caf::result<JobInfo> {
        const ActorTurn turn(m);
        return pass<JobInfo>(self, m, m.rank);
      },
      [=](const EpochKeyRequest& m) -> caf::result<EpochKey> {
        const ActorTurn turn(m);
        return pass<EpochKey>(self, m, kAnyRank);
      },
      [=](const RankEpochDone& m) -> caf::result<void> {
        const ActorTurn turn(m);
        return pass<void>(self, m, m.rank);
      },
      [=](const CheckpointBegin& m) -> caf::result<CheckpointGeneration> {
        const ActorTurn turn(m);
        return pass<CheckpointGeneration>(self, m, m.rank);
      },
      [=](const RankSaved& m) -> caf::result<CheckpointCommitted> {
        const ActorTurn turn(m);
        return pass<CheckpointCommitted>(self, m, m.rank);
      },
      [=](const ResumeOffer& m) -> caf::result<ResumeGrant> {
        const ActorTurn turn(m);
        return pass<ResumeGrant>(self, m, m.rank);
      },
      [=](const RankLeave& m) -> caf::result<LeaveAck> {
        const ActorTurn turn(m);
        return pass<LeaveAck>(self, m, m.rank);
      },
      [=](const SnapshotRequest& m) -> caf::result<ActorSnapshot> {
        const ActorTurn turn(m);
        return pass<ActorSnapshot>(self, m, kAnyRank);
      },
      // A monitor in a rank process asks for the whole job (admitted processes only).
      [=](const RankReportRequest& m) -> caf::result<RankReport> {
        const ActorTurn turn(m);
        return pass<RankReport>(self, m, kAnyRank);
      },
      [=](const JobInfoRequest& m) -> caf::result<JobInfo> {
        const ActorTurn turn(m);
        return pass<JobInfo>(self, m, kAnyRank);
      },
      [=](const RankSaveFailed& m) -> caf::result<void> {
        const ActorTurn turn(m);
        return pass<void>(self, m, m.rank);
      },
      [=](join_deadline_atom) -> caf::result<void> {
        const ActorTurn turn;
        return refuse(self, "a coordinator's timer comes only from its own process");
      },
      [=](const CommitOutcome& m) -> caf::result<void> {
        const ActorTurn turn(m);
        return refuse(self, "a commit outcome comes only from the coordinator's own process");
      },
      [=](const AwaitLeaves& m) -> caf::result<LeaveAck> {
        const ActorTurn turn(m);
        if (!local(self))
          return refuse(self, "AwaitLeaves comes only from the coordinator's process");
        return self->delegate(self->state.coordinator, m);
      },
      [=](const ShutdownRequest& m) -> caf::result<ShutdownAck> {
        const ActorTurn turn(m);
        if (!local(self))
          return refuse(self, "a shutdown comes only from the coordinator's process");
        self->state.coordinator = nullptr;
        self->quit();
        return ShutdownAck{"gate", 0, 0};
      },
  };
}

}  // namespace

gate_actor spawn_gate(caf::actor_system& sys, coordinator_actor coordinator, GateOptions options) {
  return sys.spawn(gate_fn, std::move(coordinator), std::move(options));
}

}  // namespace shardyard::actors::net
