// What the shared-memory tests share: a fixture (ShmTest) that checks nothing is left behind
// (descriptors, files and used bytes of the shm folder), producers in forked children, a
// counter shared with them, and a producer that speaks raw frames for fault injection.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "io/transport/shm_arena.h"
#include "io/transport/shm_channel.h"
#include "io/transport/shm_frames.h"
#include "process_util.h"
#include "test_items.h"

namespace shardyard::io::testing {

// Exit codes of a producer child.
inline constexpr int kProduced = 0, kPushFailed = 2, kPushCancelled = 3, kNoConnect = 4;

// A counter in memory shared with forked children.
class SharedCounter {
 public:
  SharedCounter();
  ~SharedCounter();
  std::atomic<uint64_t>& operator*() const { return *value_; }
  uint64_t get() const { return value_->load(); }

 private:
  std::atomic<uint64_t>* value_;
};

// Waits at most timeout_ms for done() (polling); true when it held.
bool eventually(const std::function<bool()>& done, int timeout_ms = 20000);

// A socket pair: `loader` for the test's process, `worker` for the child.
struct Ends {
  UnixSocket loader, worker;
};
Ends make_ends();

// Forks a child that connects a producer on `ends.worker` and exits with what `body`
// returns (kNoConnect when it cannot connect). Both processes drop the end that is not
// theirs.
Child fork_with_producer(Ends& ends, const std::function<int(ShmProducer&)>& body,
                         int wait_timeout_ms = 20000);
// Forks a producer on `ends.worker` that pushes `packets` packets of `spec` (0: until a push
// fails), counting each in `pushed`, then finish(OK). Both processes drop the end that is
// not theirs.
Child fork_producer(Ends& ends, const StreamSpec& spec, uint64_t packets,
                    SharedCounter* pushed = nullptr, int wait_timeout_ms = 20000);

// Forks a child that answers the hello like a producer, then calls `act` with its socket
// and the attached arena (a test's own frames), then waits for the socket to close (at
// most 20 s).
using RawAct = std::function<void(UnixSocket&, ShmArena&)>;
Child fork_raw_producer(Ends& ends, const RawAct& act);
// In a raw producer: places `items` in one run and sends its frame (kLastRun if `last`).
void send_raw_run(UnixSocket& socket, ShmArena& arena, ArenaRing& ring,
                  const std::vector<Item>& items, bool last);

ShmChannelOptions channel_options(uint64_t arena_bytes, uint32_t in_flight = 4);
// The loader's channel over `ends.loader`, its one producer named "worker 0"; null (and a
// test failure) when it cannot open.
std::shared_ptr<ShmConsumer> open_consumer(Ends& ends, const ShmChannelOptions& options);

// Pops until the end or an error; checks every packet against `spec` in order. Returns the
// pop's last status (OK at the end) and counts packets in *popped.
Status drain_and_check(Channel& ch, const StreamSpec& spec, uint64_t* popped);
// The same when packet `first` is the next to come.
Status drain_and_check_from(Channel& ch, const StreamSpec& spec, uint64_t first, uint64_t* popped);

class ShmTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  std::string dir_;
  std::vector<std::string> names_;
  uint64_t used_ = 0;
  int fds_ = 0;
};

}  // namespace shardyard::io::testing
