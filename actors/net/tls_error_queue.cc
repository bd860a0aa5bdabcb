#include "actors/net/tls_error_queue.h"

#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstdio>
#include <cstdlib>

namespace {

// libssl's own definition of `name` (the next one after ours in the lookup order).
template <class Fn>
Fn real(const char* name) {
  void* sym = dlsym(RTLD_NEXT, name);
  if (sym == nullptr) {
    std::fprintf(stderr, "shardyard: fatal: libssl's %s is not found (%s)\n", name, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(sym);
}

}  // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto next = real<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return next(ssl, buf, num);
}

int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto next = real<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return next(ssl, buf, num);
}

int SSL_connect(SSL* ssl) {
  static const auto next = real<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return next(ssl);
}

int SSL_accept(SSL* ssl) {
  static const auto next = real<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return next(ssl);
}

}  // extern "C"

namespace shardyard::actors::net {

bool install_tls_error_queue_guard() {
  // The address CAF's calls resolve to is ours when the guard is in place.
  return dlsym(RTLD_DEFAULT, "SSL_read") == reinterpret_cast<void*>(&SSL_read);
}

}  // namespace shardyard::actors::net
