// Tests of the header decoder (io/format/tar.h) on headers that real writers produce and Python's
// tarfile reads: numeric fields with leading NULs or spaces and other terminators, Solaris
// 'X' extended headers, GNU sparse files (refused with their name, other samples kept).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "io/format/manifest_scan.h"
#include "io/format/tar.h"
#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

using test::TempDir;

struct Seen {
  std::string path;
  uint64_t size;
};

// Every entry scan_tar hands out, or the error.
Result<std::vector<Seen>> entries(const std::string& bytes) {
  std::vector<Seen> out;
  auto stream = memory_stream(bytes);
  Status st = scan_tar(*stream, "x.tar", [&](const TarEntry& e) {
    out.push_back({e.path, e.size});
    return Status::ok();
  });
  if (!st.is_ok()) return st;
  return out;
}

// An archive whose first member's size field (12 bytes) is `field`, checksum fixed.
std::string with_size_field(const std::string& field, const std::string& payload) {
  std::string first = test::tar_member("s0.txt", payload);
  first.replace(124, 12, field);
  test::fix_checksum(first, 0);
  return first + test::tar_member("s1.cls", "1") + test::tar_end();
}

TEST(TarNumbers, FieldsAreReadAsPythonsTarfileReadsThem) {
  const std::string five("hello");
  for (const std::string& field : {
           std::string("00000000005") + '\0',  // what every writer writes
           std::string("000000000005"),        // digits to the field's end, no terminator
           std::string("     0000005"),        // leading spaces, no terminator
           std::string("00000000005 "),        // a space for the NUL
           std::string(" 5          "),        // spaces around
           std::string("\t5\n") + std::string(9, '\0'),
           std::string("0000005") + '\0' + "junk",  // after the NUL nothing counts
       }) {
    SCOPED_TRACE(field);
    auto got = entries(with_size_field(field, five));
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), 2u);
    EXPECT_EQ((*got)[0].size, 5u);
    EXPECT_EQ((*got)[1].path, "s1.cls");
  }
}

// Every count of digits (1 to 12) in the size field, ended by a NUL, by the field's end or
// by a space, zero-padded or not: the decoder reads eight bytes of a field at a time, and
// each of these takes another way through it. The value is the payload's length.
TEST(TarNumbers, EveryDigitCountAndEndReadsTheSameSize) {
  for (uint64_t size : {0, 1, 5, 7, 8, 63, 64, 511, 4095, 32768, 262143}) {
    char octal[24];
    std::snprintf(octal, sizeof octal, "%llo", static_cast<unsigned long long>(size));
    const std::string digits(octal);
    const std::string payload(size, 'x');
    for (size_t width = digits.size(); width <= 12; ++width) {
      const std::string padded = std::string(width - digits.size(), '0') + digits;
      std::vector<std::string> fields;
      if (width < 12) fields.push_back(padded + std::string(12 - width, '\0'));
      if (width < 12) fields.push_back(padded + '\0' + std::string(11 - width, '7'));
      if (width < 12) fields.push_back(padded + std::string(12 - width, ' '));
      if (width == 12) fields.push_back(padded);
      for (const std::string& field : fields) {
        SCOPED_TRACE(::testing::PrintToString(field));
        ASSERT_EQ(field.size(), 12u);
        auto got = entries(with_size_field(field, payload));
        ASSERT_TRUE(got.is_ok()) << got.status().to_string();
        ASSERT_EQ(got->size(), 2u);
        EXPECT_EQ((*got)[0].size, size);
        EXPECT_EQ((*got)[1].path, "s1.cls");
      }
    }
  }
  // A non-octal digit after each count of digits is damage, also in the field's last bytes.
  for (size_t at = 1; at < 12; ++at) {
    std::string field = std::string(11, '0') + '\0';
    field[at] = '8';
    SCOPED_TRACE(::testing::PrintToString(field));
    EXPECT_FALSE(entries(with_size_field(field, "")).is_ok());
  }
}

// libarchive's test_read_format_tar_timestamp_overflow.tar has a size field of seven NULs,
// "0016" and a NUL: the field ends at its first NUL, so the size is 0 for Python's tarfile,
// GNU tar and libarchive alike.
TEST(TarNumbers, FieldLedByANulIsZero) {
  std::string header = test::tar_header("tmp/f.txt", 0);
  header.replace(124, 12, std::string(7, '\0') + "0016" + '\0');
  test::fix_checksum(header, 0);
  auto got = entries(header + std::string(512, '\0') + test::tar_end());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].path, "tmp/f.txt");
  EXPECT_EQ((*got)[0].size, 0u);
}

TEST(TarNumbers, ChecksumFieldVariantsAreAccepted) {
  for (const char* format : {"%06o%c ", "%07o%c", "  %06o", "%o%c      "}) {
    SCOPED_TRACE(format);
    std::string archive = test::tar_member("s0.cls", "0") + test::tar_end();
    std::memset(&archive[148], ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(archive[i]);
    char text[16];
    std::snprintf(text, sizeof text, format, sum, '\0');
    archive.replace(148, 8, std::string(text, 8));
    auto got = entries(archive);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(got->size(), 1u);
  }
}

// Bytes of 0x80 and more (a UTF-8 name, padding of 0xff) count as unsigned in the usual
// sum and as signed in the sum of old archives; both checksums are accepted.
TEST(TarNumbers, ChecksumsOverHighBytesAreSummedRight) {
  const std::string name = "d\xc3\xa9j\xc3\xa0/s\xc3\xbc.cls";
  for (bool is_signed : {false, true}) {
    SCOPED_TRACE(is_signed ? "signed" : "unsigned");
    std::string archive = test::tar_member(name, "0") + test::tar_end();
    std::memset(&archive[400], 0xff, 100);  // in the prefix field, after its NUL: summed, not read
    std::memset(&archive[148], ' ', 8);
    long usum = 0, ssum = 0;
    for (size_t i = 0; i < 512; ++i) {
      usum += static_cast<unsigned char>(archive[i]);
      ssum += static_cast<signed char>(archive[i]);
    }
    ASSERT_NE(usum, ssum);  // the two sums differ: each is checked on its own
    ASSERT_GT(ssum, 0);
    const long sum = is_signed ? ssum : usum;
    char text[16];
    std::snprintf(text, sizeof text, "%06lo%c ", sum, '\0');
    archive.replace(148, 8, std::string(text, 8));
    auto got = entries(archive);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), 1u);
    EXPECT_EQ((*got)[0].path, name);
    archive[20] ^= 0x40;  // one byte more: neither sum matches
    EXPECT_FALSE(entries(archive).is_ok());
  }
}

// What tarfile or GNU tar refuses, or where they disagree, stays damage.
TEST(TarNumbers, DamagedFieldsAreStillRefused) {
  for (const std::string& field :
       {std::string("000000000x5") + '\0', std::string("+0000000005\0", 12),
        std::string("00000 00005") + '\0', std::string("00000000009") + '\0',
        std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xfb")}) {
    SCOPED_TRACE(field);
    auto got = entries(with_size_field(field, "hello"));
    ASSERT_FALSE(got.is_ok());
    EXPECT_NE(got.status().message().find("bad size field"), std::string::npos)
        << got.status().message();
  }
  std::string bad = test::tar_member("s0.cls", "0") + test::tar_end();
  bad[10] ^= 1;  // a name byte: the checksum no longer matches
  auto got = entries(bad);
  ASSERT_FALSE(got.is_ok());
  EXPECT_NE(got.status().message().find("checksum"), std::string::npos);
}

// Solaris tar writes its extended header as type 'X'; tarfile reads it as PAX 'x'.
TEST(TarFormats, SolarisExtendedHeaderIsReadAsPax) {
  const auto& fx = test::Fixtures::get();
  std::string pax = test::read_file(fx.path("py_pax.tar"));
  const std::string name = std::string(60, 'd') + "/" + std::string(50, 'e') + "/s0004.cls";
  uint64_t header = 0;
  for (const auto& m : fx.members("py_pax.tar"))
    if (m.path == name) header = m.offset;
  ASSERT_EQ(pax[header + 156], 'x');
  pax[header + 156] = 'X';
  test::fix_checksum(pax, header);
  auto got = entries(pax);
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  bool found = false;
  for (const auto& e : *got) found = found || e.path == name;
  EXPECT_TRUE(found) << "the 'X' header's path was not applied";
}

// GNU tar --sparse stores holes out of the payload; WebDataset would fill them in, a
// byte range cannot. Such a member is refused by name, and under kSkip only its sample
// is dropped: the old GNU format's extra map blocks and PAX's GNU.sparse records are
// walked over, so the samples after it are found.
TEST(TarFormats, SparseMembersAreRefusedAndSkippedAlone) {
  TempDir dir;
  const std::string tree = dir.file("tree");
  ASSERT_EQ(::mkdir(tree.c_str(), 0755), 0);
  test::write_file(tree + "/a.cls", "1");
  test::write_file(tree + "/c.cls", "3");
  test::write_file(tree + "/b.cls", "2");
  {
    // Ten data blocks between holes: more than the four a GNU sparse header holds.
    int fd = ::open((tree + "/b.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    for (int i = 0; i < 10; ++i) ASSERT_EQ(::pwrite(fd, "data", 4, static_cast<off_t>(i) << 20), 4);
    ASSERT_EQ(::ftruncate(fd, 11 << 20), 0);
    ::close(fd);
  }
  for (const std::string format : {"gnu", "posix"}) {
    SCOPED_TRACE(format);
    const std::string path = dir.file(format + ".tar");
    ASSERT_EQ(test::run_command("tar --sparse --format=" + format + " -C " + tree + " -cf " + path +
                                " a.cls b.bin b.cls c.cls"),
              0);
    const SourceRef ref{path, SourceKind::kTar};
    auto fail = scan_source(local_file_system(), ref, OnCorrupt::kFail);
    ASSERT_FALSE(fail.is_ok());
    EXPECT_NE(fail.status().message().find("'b.bin' is a GNU sparse file"), std::string::npos)
        << fail.status().message();
    auto skip = scan_source(local_file_system(), ref, OnCorrupt::kSkip);
    ASSERT_TRUE(skip.is_ok()) << skip.status().to_string();
    EXPECT_TRUE(skip->damaged);
    ASSERT_EQ(skip->samples.size(), 2u) << skip->damage;
    EXPECT_EQ(skip->samples[0].key, "a");
    EXPECT_EQ(skip->samples[1].key, "c");
  }
}

}  // namespace
}  // namespace shardyard::io
