#include "tar_fixtures.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#ifndef SY_SOURCE_DIR
#error "SY_SOURCE_DIR must name the repository root"
#endif

namespace shardyard::io::test {

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/shardyard-test-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed for " << pattern << ": " << std::strerror(errno);
    return;
  }
  path_ = buf.data();
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string payload(const std::string& path, uint64_t size) {
  unsigned h = 0;
  for (unsigned char c : path) h += c;
  h %= 251;
  std::string out(size, '\0');
  for (uint64_t i = 0; i < size; ++i) out[i] = static_cast<char>((h + i * 131) % 251);
  return out;
}

std::vector<Member> read_members(const std::string& listing_path) {
  std::ifstream in(listing_path);
  EXPECT_TRUE(in.good()) << "no listing " << listing_path;
  std::vector<Member> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> cols;
    std::stringstream ss(line);
    std::string col;
    while (std::getline(ss, col, '\t')) cols.push_back(col);
    if (cols.size() != 7) {
      ADD_FAILURE() << listing_path << ": bad line " << line;
      continue;
    }
    Member m;
    m.type = cols[0][0];
    m.size = std::stoull(cols[1]);
    m.offset = std::stoull(cols[2]);
    m.offset_data = std::stoull(cols[3]);
    m.key = cols[4];
    m.field = cols[5];
    m.path = cols[6];
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<ExpectedSample> group_samples(const std::vector<Member>& members) {
  std::vector<ExpectedSample> out;
  for (const auto& m : members) {
    if (m.type != 'f' || m.key.empty()) continue;  // skipped: no sample, no break in one
    if (out.empty() || out.back().key != m.key) {
      out.emplace_back();
      out.back().key = m.key;
      out.back().begin = m.offset;
    }
    auto& s = out.back();
    s.end = m.end();
    s.payload_bytes += m.size;
    s.members.push_back(m);
  }
  return out;
}

Fixtures::Fixtures() {
  const std::string cmd = "python3 " SY_SOURCE_DIR "/tests/io/make_fixtures.py " + dir_.path();
  int rc = run_command(cmd);
  if (rc != 0) ADD_FAILURE() << "fixture generation failed (" << rc << "): " << cmd;
}

const Fixtures& Fixtures::get() {
  static const Fixtures fixtures;  // its directory is removed at exit
  return fixtures;
}

std::vector<Member> Fixtures::members(const std::string& name) const {
  return read_members(path(name) + ".members");
}

std::vector<ExpectedSample> Fixtures::samples(const std::string& name) const {
  return group_samples(members(name));
}

const std::vector<std::string>& Fixtures::good_archives() {
  static const std::vector<std::string> names = {
      "py_ustar.tar",   "py_gnu.tar",      "py_pax.tar",    "py_pax_global.tar",
      "py_pax.tar.gz",  "gnu_gnu.tar",     "gnu_posix.tar", "gnu_ustar.tar",
      "gnu_gnu.tar.gz", "py_pax_size.tar", "py_hidden.tar", "py_nodot.tar"};
  return names;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

int run_command(const std::string& command) {
  int rc = std::system(command.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

namespace {
void put_octal(std::string& block, size_t at, size_t width, uint64_t value) {
  // width - 1 octal digits and a NUL.
  std::string digits(width - 1, '0');
  for (size_t i = width - 1; i-- > 0 && value > 0; value >>= 3)
    digits[i] = static_cast<char>('0' + (value & 7));
  block.replace(at, width - 1, digits);
  block[at + width - 1] = '\0';
}
}  // namespace

void fix_checksum(std::string& archive, uint64_t offset) {
  std::memset(&archive[offset + 148], ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(archive[offset + i]);
  char text[8];
  std::snprintf(text, sizeof text, "%06o", sum);
  std::memcpy(&archive[offset + 148], text, 6);
  archive[offset + 154] = '\0';
  archive[offset + 155] = ' ';
}

std::string tar_header(const std::string& name, uint64_t size, char type) {
  std::string block(512, '\0');
  block.replace(0, std::min<size_t>(name.size(), 100), name.substr(0, 100));
  put_octal(block, 100, 8, 0644);
  put_octal(block, 108, 8, 0);
  put_octal(block, 116, 8, 0);
  put_octal(block, 124, 12, size);
  put_octal(block, 136, 12, 1700000000);
  block[156] = type;
  block.replace(257, 6, std::string("ustar\0", 6));
  block.replace(263, 2, "00");
  fix_checksum(block, 0);
  return block;
}

std::string tar_member(const std::string& name, const std::string& data) {
  std::string out = tar_header(name, data.size());
  out += data;
  out.append((512 - data.size() % 512) % 512, '\0');
  return out;
}

std::string tar_end() { return std::string(1024, '\0'); }

}  // namespace shardyard::io::test
