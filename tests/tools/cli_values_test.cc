// Tests of tools/cli_values.h: numbers and byte counts are parsed strictly.
#include "cli_values.h"

#include <gtest/gtest.h>

namespace shardyard::tools {
namespace {

TEST(ParseU64, TakesEveryValueFromZeroToTheLargest) {
  EXPECT_EQ(*parse_u64("--seed", "0"), 0u);
  EXPECT_EQ(*parse_u64("--seed", "17"), 17u);
  EXPECT_EQ(*parse_u64("--seed", "18446744073709551615"), UINT64_MAX);
}

TEST(ParseU64, RefusesSignsOverflowAndOtherText) {
  for (const char* bad : {"-1", "+1", "18446744073709551616", "99999999999999999999", "", " 1",
                          "1 ", "1e3", "0x10", "12abc"}) {
    auto r = parse_u64("--seed", bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--seed '" + std::string(bad) + "'"), std::string::npos);
    EXPECT_NE(r.status().message().find("18446744073709551615"), std::string::npos);
  }
}

TEST(ParseByteSize, TakesBinaryUnits) {
  EXPECT_EQ(*parse_byte_size("--max", "1"), 1u);
  EXPECT_EQ(*parse_byte_size("--max", "4096"), 4096u);
  EXPECT_EQ(*parse_byte_size("--max", "1K"), 1024u);
  EXPECT_EQ(*parse_byte_size("--max", "256m"), 256u << 20);
  EXPECT_EQ(*parse_byte_size("--max", "2GiB"), uint64_t{2} << 30);
  EXPECT_EQ(*parse_byte_size("--max", "3gb"), uint64_t{3} << 30);
  EXPECT_EQ(*parse_byte_size("--max", "1T"), uint64_t{1} << 40);
}

TEST(ParseByteSize, RefusesZeroUnknownUnitsAndOverflow) {
  for (const char* bad :
       {"0", "0K", "-1", "K", "", "12Q", "1KK", "1 K", "16777216T", "18446744073709551616"}) {
    auto r = parse_byte_size("--max-sample-bytes", bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("--max-sample-bytes"), std::string::npos);
  }
}

TEST(ParseStage, ReadsTypeAndParameters) {
  auto s = parse_stage("rename_field:from=a;to=b");
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->type, "rename_field");
  EXPECT_EQ(s->params.at("from"), "a");
  EXPECT_EQ(s->params.at("to"), "b");
  EXPECT_FALSE(parse_stage(":x=1").is_ok());
  EXPECT_FALSE(parse_stage("count:nokey").is_ok());
}

}  // namespace
}  // namespace shardyard::tools
