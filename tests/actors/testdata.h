// Test datasets for actor tests: real tar shards written by tests/e2e/make_dataset.py.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace shardyard::testing {

// A fresh temporary folder, removed on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/shardyard-test.XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes `shards` shards of `samples` samples (payload `bytes`) into dir; returns the
// brace pattern that names them.
inline std::string make_dataset(const std::string& dir, int shards, int samples, int bytes,
                                int seed, const std::string& extra = "") {
  std::string cmd = "python3 " SY_SOURCE_DIR "/tests/e2e/make_dataset.py --out " + dir +
                    " --shards " + std::to_string(shards) + " --samples " +
                    std::to_string(samples) + " --bytes " + std::to_string(bytes) + " --seed " +
                    std::to_string(seed) + " " + extra + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) return {};
  char last[16];
  std::snprintf(last, sizeof last, "%06d", shards - 1);
  return dir + "/shard-{000000.." + last + "}.tar";
}

}  // namespace shardyard::testing
