// actors/net without a network: the token file's rules, the challenge-response proof, the TLS
// identity derived from the token, and the guard of OpenSSL's error queue that keeps one
// closed TLS connection from failing the others. The job over real sockets and processes is
// tests/e2e/run_multiprocess_e2e.py.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "actors/net/job_secret.h"
#include "actors/net/network.h"
#include "actors/net/tls_error_queue.h"

namespace shardyard::actors::net {
namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/shardyard-net-test-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  EXPECT_NE(dir, nullptr);
  return dir;
}

std::string write_file(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  EXPECT_EQ(chmod(path.c_str(), mode), 0);
  return path;
}

TEST(TokenFile, FirstLineWithoutWhitespaceOfAPrivateFile) {
  const std::string dir = temp_dir();
  auto token = read_token_file(write_file(dir + "/t", "  s3cret \nignored\n", 0600));
  ASSERT_TRUE(token.is_ok()) << token.status().to_string();
  EXPECT_EQ(*token, "s3cret");
  std::remove((dir + "/t").c_str());
  rmdir(dir.c_str());
}

TEST(TokenFile, RefusedWhenOthersCanReadItOrItIsEmptyOrMissing) {
  const std::string dir = temp_dir();
  auto open = read_token_file(write_file(dir + "/open", "s3cret\n", 0644));
  ASSERT_FALSE(open.is_ok());
  EXPECT_NE(open.status().message().find(dir + "/open"), std::string::npos)
      << open.status().to_string();
  EXPECT_FALSE(read_token_file(write_file(dir + "/empty", "\n", 0600)).is_ok());
  auto missing = read_token_file(dir + "/missing");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("missing"), std::string::npos);
  for (const char* f : {"/open", "/empty"}) std::remove((dir + f).c_str());
  rmdir(dir.c_str());
}

TEST(Proof, BindsTokenRoleNoncesNodeAndRank) {
  const std::string s = random_bytes(16), c = random_bytes(16);
  ASSERT_EQ(s.size(), 16u);
  EXPECT_NE(s, c);
  const std::string p = auth_proof("tok", "rank", s, c, "node-a", 3);
  EXPECT_TRUE(same_proof(p, auth_proof("tok", "rank", s, c, "node-a", 3)));
  EXPECT_FALSE(same_proof(p, auth_proof("tok2", "rank", s, c, "node-a", 3)));
  EXPECT_FALSE(same_proof(p, auth_proof("tok", "coordinator", s, c, "node-a", 3)));
  EXPECT_FALSE(same_proof(p, auth_proof("tok", "rank", c, s, "node-a", 3)));
  EXPECT_FALSE(same_proof(p, auth_proof("tok", "rank", s, c, "node-b", 3)));
  EXPECT_FALSE(same_proof(p, auth_proof("tok", "rank", s, c, "node-a", 4)));
  EXPECT_FALSE(same_proof(p, p.substr(0, p.size() - 1)));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(TlsIdentity, SameTokenSameFilesOtherTokenOtherFiles) {
  const std::string a = temp_dir(), b = temp_dir(), c = temp_dir();
  ASSERT_TRUE(write_tls_identity("tok", a).is_ok());
  ASSERT_TRUE(write_tls_identity("tok", b).is_ok());
  ASSERT_TRUE(write_tls_identity("other", c).is_ok());
  EXPECT_FALSE(slurp(a + "/job.pem").empty());
  EXPECT_EQ(slurp(a + "/job.pem"), slurp(b + "/job.pem"));
  EXPECT_EQ(slurp(a + "/job.key"), slurp(b + "/job.key"));
  EXPECT_NE(slurp(a + "/job.key"), slurp(c + "/job.key"));
  struct stat st {};
  ASSERT_EQ(stat((a + "/job.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u) << "the private key is readable by others";
  for (const auto& d : {a, b, c}) {
    std::remove((d + "/job.pem").c_str());
    std::remove((d + "/job.key").c_str());
    rmdir(d.c_str());
  }
}

// A stale entry on this thread's error queue (what a connection that closed leaves behind)
// must not make the next read on a healthy connection look failed. Two ends of a real TLS
// connection over a socket pair, with the identity the job's token gives.
TEST(TlsErrorQueueGuard, StaleErrorDoesNotFailAHealthyConnection) {
  ASSERT_TRUE(install_tls_error_queue_guard());
  const std::string dir = temp_dir();
  ASSERT_TRUE(write_tls_identity("tok", dir).is_ok());
  SSL_CTX* server_ctx = SSL_CTX_new(TLS_server_method());
  SSL_CTX* client_ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_EQ(SSL_CTX_use_certificate_file(server_ctx, (dir + "/job.pem").c_str(), SSL_FILETYPE_PEM),
            1);
  ASSERT_EQ(SSL_CTX_use_PrivateKey_file(server_ctx, (dir + "/job.key").c_str(), SSL_FILETYPE_PEM),
            1);
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  for (int fd : fds) ASSERT_EQ(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
  SSL* server = SSL_new(server_ctx);
  SSL* client = SSL_new(client_ctx);
  SSL_set_fd(server, fds[0]);
  SSL_set_fd(client, fds[1]);
  SSL_set_accept_state(server);
  SSL_set_connect_state(client);
  bool server_done = false, client_done = false;
  for (int i = 0; i < 100 && !(server_done && client_done); ++i) {
    if (!client_done) client_done = SSL_do_handshake(client) == 1;
    if (!server_done) server_done = SSL_do_handshake(server) == 1;
  }
  ASSERT_TRUE(server_done && client_done) << "the handshake did not finish";
  ASSERT_EQ(SSL_write(client, "ping", 4), 4);
  char buf[16];
  int n = 0;
  for (int i = 0; i < 100 && n <= 0; ++i) n = SSL_read(server, buf, sizeof buf);
  ASSERT_EQ(n, 4);
  // Nothing more to read, and a leftover error as OpenSSL leaves one when another
  // connection of this thread ends badly: "want read", not a failure.
  ERR_raise(ERR_LIB_SSL, SSL_R_UNEXPECTED_EOF_WHILE_READING);
  const int ret = SSL_read(server, buf, sizeof buf);
  EXPECT_EQ(SSL_get_error(server, ret), SSL_ERROR_WANT_READ);
  SSL_free(server);
  SSL_free(client);
  SSL_CTX_free(server_ctx);
  SSL_CTX_free(client_ctx);
  close(fds[0]);
  close(fds[1]);
  std::remove((dir + "/job.pem").c_str());
  std::remove((dir + "/job.key").c_str());
  rmdir(dir.c_str());
}

// A stopped actor counts until nothing refers to it any more (a detached one included, whose
// thread the actor system waits for), and the wait ends with its destruction.
TEST(AwaitActorsGone, EndsWhenTheStoppedActorsAreDestroyedAndCountsOnesStillHeld) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  // (An argument: CAF 0.17 dereferences a null argument tuple for argument-less function actors.)
  auto add = [](caf::event_based_actor*, int n) -> caf::behavior {
    return {[n](int x) { return x + n; }};
  };
  caf::actor detached = sys.spawn<caf::detached>(add, 1);
  caf::actor pooled = sys.spawn(add, 2);
  const caf::actor_addr detached_addr = detached.address(), pooled_addr = pooled.address();
  caf::actor held = pooled;  // another owner of the pooled one
  caf::anon_send_exit(detached, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(pooled, caf::exit_reason::user_shutdown);
  detached = nullptr;
  pooled = nullptr;
  EXPECT_EQ(await_actors_gone({detached_addr}, std::chrono::seconds(30)), 0u);
  EXPECT_EQ(await_actors_gone({detached_addr, pooled_addr}, std::chrono::milliseconds(20)), 1u);
  held = nullptr;
  EXPECT_EQ(await_actors_gone({detached_addr, pooled_addr}, std::chrono::seconds(30)), 0u);
}

}  // namespace
}  // namespace shardyard::actors::net
