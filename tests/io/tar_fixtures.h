// Test helpers for tests/io: temporary directories, the tar fixtures written by real tar
// writers (tests/io/make_fixtures.py), and hand-made tar bytes for damaged archives.
//
// Fixtures are generated lazily, once per test process, into a fresh mkdtemp directory
// that is removed at exit. Not thread-safe: call from the test's main thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardyard::io::test {

// A fresh directory under $TMPDIR (mkdtemp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The payload make_fixtures.py writes for a member: byte i is (h + 131 i) % 251 where h is
// the sum of the path's bytes mod 251.
std::string payload(const std::string& path, uint64_t size);

// One line of a NAME.members listing (see make_fixtures.py).
struct Member {
  char type = 'f';  // f regular, d directory, o other
  uint64_t size = 0;
  uint64_t offset = 0;       // first header block, extension headers included
  uint64_t offset_data = 0;  // first payload byte
  std::string key, field, path;
  uint64_t end() const { return offset_data + (size + 511) / 512 * 512; }
};

// A sample as the listing says it should be scanned: consecutive regular members that
// share a key (members WebDataset skips lie between them without ending the sample).
struct ExpectedSample {
  std::string key;
  uint64_t begin = 0, end = 0, payload_bytes = 0;
  std::vector<Member> members;
};

std::vector<Member> read_members(const std::string& listing_path);
std::vector<ExpectedSample> group_samples(const std::vector<Member>& members);

// The archives written by make_fixtures.py, generated on first use.
class Fixtures {
 public:
  static const Fixtures& get();
  std::string path(const std::string& name) const { return dir_.file(name); }
  std::vector<Member> members(const std::string& name) const;
  std::vector<ExpectedSample> samples(const std::string& name) const;
  // Well-formed archives of every format, each holding the full set of samples (or the
  // ustar-safe subset), and two small ones with names WebDataset's rule treats specially.
  static const std::vector<std::string>& good_archives();

 private:
  Fixtures();
  TempDir dir_;
};

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);
// Runs a shell command; returns its exit status.
int run_command(const std::string& command);

// Hand-made ustar pieces for damaged archives.
std::string tar_header(const std::string& name, uint64_t size, char type = '0');
std::string tar_member(const std::string& name, const std::string& data);
std::string tar_end();  // two zero blocks
// Rewrites the checksum of the header block at `offset` after an edit.
void fix_checksum(std::string& archive, uint64_t offset);

}  // namespace shardyard::io::test
