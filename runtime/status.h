// Status and Result<T>: errors as values at every boundary of runtime/, io/ and gpu/.
//
// A Status is OK or carries a code and a message that names the thing that failed (file,
// byte offset, shard, actor) and, where it helps, what to do. Result<T> is a T or a non-OK
// Status. Both are cheap to move, thread-compatible (no shared state), and never throw.
// Actors turn a Status into a caf::error and back in one pair of helpers
// (actors/roles.h: to_error, from_error).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace shardyard {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // bad option or spec; fix the call
  kNotFound = 2,         // missing file, shard or checkpoint
  kCorrupt = 3,          // damaged or malformed input (tar, manifest, checkpoint)
  kIoError = 4,          // the operating system or a server refused a read or write
  kCancelled = 5,        // the run was stopped before this finished
  kInternal = 6,         // a broken invariant: a bug in shardyard
  kUnavailable = 7,      // a peer (actor, server) cannot be reached
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: /data/a.tar: bad header checksum at byte 1536".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  // Two overloads rather than one by value: `return local;` into a Result<T> then moves
  // the local (C++17 moves only into a constructor taking T&&; by value it copies).
  Result(const T& value) : value_(value) {}             // NOLINT: implicit by design
  Result(T&& value) : value_(std::move(value)) {}       // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.is_ok() && "Result built from an OK status carries no value");
    if (status_.is_ok()) status_ = internal_error("Result built from an OK status");
  }

  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace shardyard

// Returns early from the enclosing function when `expr` is a non-OK Status.
#define SY_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::shardyard::Status sy_status_ = (expr);    \
    if (!sy_status_.is_ok()) return sy_status_; \
  } while (0)

#define SY_CONCAT_INNER(a, b) a##b
#define SY_CONCAT(a, b) SY_CONCAT_INNER(a, b)
// `SY_ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the Status.
#define SY_ASSIGN_OR_RETURN(lhs, expr)                                                           \
  auto SY_CONCAT(sy_result_, __LINE__) = (expr);                                                 \
  if (!SY_CONCAT(sy_result_, __LINE__).is_ok()) return SY_CONCAT(sy_result_, __LINE__).status(); \
  lhs = std::move(SY_CONCAT(sy_result_, __LINE__)).value()
