#include "digest.h"

#include <openssl/evp.h>

namespace shardyard::tools {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) { reset(); }
Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }
void Sha256::reset() { EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr); }
void Sha256::add(std::string_view b) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), b.data(), b.size());
}
std::string Sha256::hex16() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &n);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    out.push_back(hex[md[i] >> 4]);
    out.push_back(hex[md[i] & 15]);
  }
  reset();
  return out;
}

}  // namespace shardyard::tools
