#include "actors/net/job_secret.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <memory>

namespace shardyard::actors::net {

namespace {

std::string hmac_sha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

struct FileCloser {
  void operator()(FILE* f) const {
    if (f) std::fclose(f);
  }
};

}  // namespace

Result<std::string> read_token_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return not_found("cannot read the token file " + path + ": it does not exist");
  if (!S_ISREG(st.st_mode)) return invalid_argument("the token file " + path + " is no file");
  if ((st.st_mode & 077) != 0)
    return invalid_argument("the token file " + path +
                            " can be read by other users: chmod 600 it (a token is a secret)");
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return io_error("cannot read the token file " + path);
  const auto first = line.find_first_not_of(" \t\r\n");
  const auto last = line.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) return invalid_argument("the token file " + path + " is empty");
  return line.substr(first, last - first + 1);
}

std::string random_bytes(size_t n) {
  std::string s(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(s.data()), static_cast<int>(n)) != 1)
    std::abort();  // no randomness: no secure way on
  return s;
}

std::string auth_proof(std::string_view token, std::string_view role, std::string_view server_nonce,
                       std::string_view client_nonce, std::string_view node, uint32_t rank) {
  std::string transcript = "shardyard-auth-v1|";
  transcript.append(role).append("|");
  transcript.append(server_nonce).append("|").append(client_nonce).append("|");
  transcript.append(node).append("|").append(std::to_string(rank));
  return hmac_sha256(token, transcript);
}

bool same_proof(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Status write_tls_identity(std::string_view token, const std::string& dir) {
  const std::string seed = hmac_sha256(token, "shardyard-tls-ed25519-v1");
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr,
                                   reinterpret_cast<const unsigned char*>(seed.data()), 32),
      EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  if (!key || !cert) return internal_error("cannot make the job's TLS key (OpenSSL)");
  X509* x = cert.get();
  bool ok = X509_set_version(x, 2) == 1 && ASN1_INTEGER_set(X509_get_serialNumber(x), 1) == 1 &&
            ASN1_TIME_set_string(X509_getm_notBefore(x), "20200101000000Z") == 1 &&
            ASN1_TIME_set_string(X509_getm_notAfter(x), "21000101000000Z") == 1;
  X509_NAME* name = X509_get_subject_name(x);
  ok = ok && X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                        reinterpret_cast<const unsigned char*>("shardyard-job"), -1,
                                        -1, 0) == 1;
  ok = ok && X509_set_issuer_name(x, name) == 1 && X509_set_pubkey(x, key.get()) == 1;
  if (ok) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
    X509_EXTENSION* ext =
        X509V3_EXT_conf_nid(nullptr, &ctx, NID_basic_constraints, "critical,CA:TRUE");
    ok = ext != nullptr && X509_add_ext(x, ext, -1) == 1;
    X509_EXTENSION_free(ext);
  }
  ok = ok && X509_sign(x, key.get(), nullptr) > 0;  // Ed25519 signs without a digest
  if (!ok) return internal_error("cannot make the job's TLS certificate (OpenSSL)");
  const mode_t old = ::umask(077);
  std::unique_ptr<FILE, FileCloser> c(std::fopen((dir + "/job.pem").c_str(), "w"));
  std::unique_ptr<FILE, FileCloser> k(std::fopen((dir + "/job.key").c_str(), "w"));
  ::umask(old);
  if (!c || !k) return io_error("cannot write the job's TLS identity into " + dir);
  if (PEM_write_X509(c.get(), x) != 1 ||
      PEM_write_PrivateKey(k.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return io_error("cannot write the job's TLS identity into " + dir);
  return Status::ok();
}

}  // namespace shardyard::actors::net
