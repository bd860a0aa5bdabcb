// Tests of io/fs/mapping_guard.h: a shard cut short under a live memory mapping is an error
// naming it, not a SIGBUS that kills the process; faults outside guarded mappings still end
// the process as they would without the guard. Each case runs in a child process (a death
// test): a recorded fault is process-wide and permanent, and a real SIGBUS must not take
// the test binary down.
#include "io/fs/mapping_guard.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/fs/file_system.h"
#include "io/format/manifest_scan.h"
#include "io/format/sample_reader.h"
#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

using test::TempDir;

// A tar shard of `samples` samples of one `bytes`-byte member each.
std::string write_shard(const TempDir& dir, int samples, size_t bytes) {
  std::string tar;
  for (int i = 0; i < samples; ++i)
    tar += test::tar_member("s" + std::to_string(i) + ".bin", std::string(bytes, char('a' + i)));
  tar += test::tar_end();
  const std::string path = dir.file("shard.tar");
  test::write_file(path, tar);
  return path;
}

TEST(MappingGuardDeathTest, ShardCutShortUnderAMappingIsAnErrorNamingIt) {
  TempDir dir;
  const std::string path = write_shard(dir, 8, 1 << 20);
  auto m = build_manifest(local_file_system(), {path}, ScanOptions{}, nullptr);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  auto manifest = std::make_shared<const Manifest>(std::move(m).value());
  EXPECT_EXIT(
      {
        // Map every sample (threshold 0), then cut the file short under the live mappings
        // and touch every byte, as a batch copy would.
        SampleReader reader(local_file_system(), manifest, BufferPool::create(), {64, 0});
        std::vector<Item> items;
        if (!reader.read(0, 0, 8, 0, &items).is_ok() || items.size() != 8) std::_Exit(2);
        if (!mapping_fault().is_ok()) std::_Exit(3);
        std::filesystem::resize_file(path, 4096);
        uint64_t sum = 0;
        for (const auto& item : items)
          for (const auto& f : item.fields)
            for (size_t i = 0; i < f.size; i += 512) sum += f.data[i];
        Status st = mapping_fault();
        if (st.code() != StatusCode::kCorrupt) std::_Exit(4);
        if (st.message().find(path) == std::string::npos) std::_Exit(5);
        if (st.message().find("changed during the run") == std::string::npos) std::_Exit(6);
        // Bytes read before the cut are the file's own; the rest of a faulted mapping is
        // zeros (and a reader never hands them out: the error above).
        if (items[0].fields[0].data[0] != 'a') std::_Exit(7);
        std::_Exit(sum > 0 ? 0 : 8);
      },
      ::testing::ExitedWithCode(0), "");
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SY_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SY_ASAN 1
#endif

// How the process ends without the guard: killed by SIGBUS, or, under AddressSanitizer
// (which handles SIGBUS itself), by its report (abort, or exit 1).
bool DiedOfTheBusError(int status) {
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) return true;
#if defined(SY_ASAN)
  return (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) ||
         (WIFEXITED(status) && WEXITSTATUS(status) == 1);
#else
  return false;
#endif
}

// A bus error in memory the guard does not know (here: a mapping made behind its back)
// ends the process as it would without the guard.
TEST(MappingGuardDeathTest, FaultsOutsideGuardedMappingsStillKill) {
  TempDir dir;
  const std::string path = write_shard(dir, 2, 1 << 16);
  EXPECT_EXIT(
      {
        auto f = local_file_system().open(path);
        if (!f.is_ok()) std::_Exit(2);
        auto guarded = (*f)->map(0, 1 << 16);  // installs the handler
        if (!guarded.is_ok() || !*guarded) std::_Exit(3);
        int fd = ::open(path.c_str(), O_RDONLY);
        auto* p = static_cast<volatile const char*>(
            ::mmap(nullptr, 1 << 16, PROT_READ, MAP_PRIVATE, fd, 0));
        if (p == MAP_FAILED) std::_Exit(4);
        std::filesystem::resize_file(path, 0);
        char c = p[8192];  // SIGBUS
        std::_Exit(c == 0 ? 5 : 6);
      },
      DiedOfTheBusError, "");
}

}  // namespace
}  // namespace shardyard::io
