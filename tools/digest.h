// SHA-256 helpers for --dump-keys (OpenSSL's libcrypto, kept out of every other header).
#pragma once

#include <string>
#include <string_view>

namespace shardyard::tools {

// Incremental SHA-256; hex16() gives the first 16 hex digits of the digest.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void add(std::string_view bytes);
  std::string hex16();
  void reset();

 private:
  void* ctx_;
};

}  // namespace shardyard::tools
