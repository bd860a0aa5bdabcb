// Tests of runtime/status.h: Status text, Result and the early-return macros.
#include "runtime/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace shardyard {
namespace {

TEST(Status, OkByDefaultAndTextNamesTheCode) {
  Status ok;
  EXPECT_TRUE(ok.is_ok());
  EXPECT_TRUE(static_cast<bool>(ok));
  EXPECT_EQ(ok.to_string(), "ok");
  Status bad = corrupt("/data/a.tar: bad header checksum at byte 1536");
  EXPECT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.code(), StatusCode::kCorrupt);
  EXPECT_EQ(bad.to_string(), "corrupt: /data/a.tar: bad header checksum at byte 1536");
  EXPECT_EQ(invalid_argument("x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(not_found("x").code(), StatusCode::kNotFound);
  EXPECT_EQ(io_error("x").code(), StatusCode::kIoError);
  EXPECT_EQ(cancelled("x").code(), StatusCode::kCancelled);
  EXPECT_EQ(internal_error("x").code(), StatusCode::kInternal);
  EXPECT_EQ(unavailable("x").code(), StatusCode::kUnavailable);
  EXPECT_STREQ(status_code_name(StatusCode::kNotFound), "not found");
}

TEST(Result, HoldsAValueOrAStatus) {
  Result<std::unique_ptr<int>> r(std::make_unique<int>(7));
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(**r, 7);
  std::unique_ptr<int> moved = std::move(r).value();
  EXPECT_EQ(*moved, 7);
  Result<int> e(not_found("/x: no such file"));
  EXPECT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(e.status().message(), "/x: no such file");
}

Result<int> half(int v) {
  if (v % 2) return invalid_argument(std::to_string(v) + " is odd");
  return v / 2;
}

Result<int> quarter(int v) {
  SY_ASSIGN_OR_RETURN(int h, half(v));
  SY_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status check_even(int v) {
  SY_RETURN_IF_ERROR(half(v).status());
  return Status::ok();
}

TEST(StatusMacros, ReturnTheFirstErrorAndBindValues) {
  EXPECT_EQ(*quarter(12), 3);
  auto r = quarter(6);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "3 is odd");
  EXPECT_TRUE(check_even(4).is_ok());
  EXPECT_EQ(check_even(5).message(), "5 is odd");
}

}  // namespace
}  // namespace shardyard
