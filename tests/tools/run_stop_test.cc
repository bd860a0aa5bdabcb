// Tests of tools/run_stop.h: a stop is one step for every rank, and SIGTERM reaches the
// handler on the watcher thread (a real signal, in a child process).
#include "run_stop.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

namespace shardyard::tools {
namespace {

TEST(StopPoint, NothingStopsBeforeARequest) {
  StopPoint p(2);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(p.claim(i % 2));
  EXPECT_FALSE(p.requested());
}

TEST(StopPoint, EveryRankStopsAtTheHighestClaim) {
  StopPoint p(3);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(p.claim(0));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.claim(1));
  p.request();
  EXPECT_TRUE(p.requested());
  EXPECT_FALSE(p.claim(0));  // rank 0 stands at 7
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(p.claim(1));
  EXPECT_FALSE(p.claim(1));
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(p.claim(2));
  EXPECT_FALSE(p.claim(2));
  p.request();  // a second request moves nothing
  EXPECT_FALSE(p.claim(0));
}

TEST(StopPoint, AnUnclaimedStepCountsNoMore) {
  // A rank asked for a batch and met the end of its epoch: that step was never taken.
  StopPoint p(2);
  ASSERT_TRUE(p.claim(0));
  ASSERT_TRUE(p.claim(0));
  p.unclaim(0);
  ASSERT_TRUE(p.claim(1));
  p.request();  // the stop is at 1, not 2
  EXPECT_FALSE(p.claim(0));
  EXPECT_FALSE(p.claim(1));
}

TEST(RankBarrier, ReleasesWhenAllArriveOrOnStop) {
  RankBarrier b(2);
  std::atomic<bool> stop{false};
  bool other = false;
  std::thread t([&] { other = b.arrive_and_wait(stop); });
  EXPECT_TRUE(b.arrive_and_wait(stop));
  t.join();
  EXPECT_TRUE(other);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    stop = true;
  });
  EXPECT_FALSE(b.arrive_and_wait(stop));  // the other rank never comes
  late.join();
}

TEST(StopSignalsDeathTest, FirstSignalGoesToTheHandlerSecondEndsTheProcess) {
  EXPECT_EXIT(
      {
        std::atomic<int> got{0};
        StopSignals signals([](int) { std::_Exit(3); });
        signals.on_signal([&](int sig) { got = sig; });
        ::kill(::getpid(), SIGTERM);
        for (int i = 0; i < 1000 && got == 0; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (got != SIGTERM || signals.received() != SIGTERM) std::_Exit(4);
        ::kill(::getpid(), SIGINT);
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::_Exit(5);
      },
      ::testing::ExitedWithCode(128 + SIGINT), "second signal");
}

TEST(StopSignalsDeathTest, SignalBeforeAHandlerEndsTheProcessAtOnce) {
  EXPECT_EXIT(
      {
        StopSignals signals([](int sig) { std::fprintf(stderr, "startup %d\n", sig); });
        ::kill(::getpid(), SIGINT);
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::_Exit(5);
      },
      ::testing::ExitedWithCode(128 + SIGINT), "startup 2");
}

// A write to a pipe whose reader is gone fails with EPIPE instead of killing the process,
// and that stays so after the StopSignals is gone.
TEST(StopSignalsDeathTest, AWriteToAClosedPipeIsAnErrorNotADeath) {
  EXPECT_EXIT(
      {
        {
          StopSignals signals([](int) { std::_Exit(3); });
        }
        int fds[2];
        if (::pipe(fds) != 0) std::_Exit(4);
        ::close(fds[0]);
        const ssize_t n = ::write(fds[1], "x", 1);
        std::fprintf(stderr, "write %zd errno %d\n", n, errno);
        std::_Exit(n < 0 && errno == EPIPE ? 0 : 6);
      },
      ::testing::ExitedWithCode(0), "write -1 errno 32");
}

}  // namespace
}  // namespace shardyard::tools
