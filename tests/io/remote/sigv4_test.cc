// Tests of io/remote/sigv4.h against AWS's published Signature Version 4 examples, and of where
// S3 credentials come from.
#include "io/remote/sigv4.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>

#include "tar_fixtures.h"

namespace shardyard::io {
namespace {

// The "get-vanilla" case of the AWS SigV4 test suite.
TEST(SigV4, MatchesTheTestSuiteGetVanillaExample) {
  SigningRequest req;
  req.host = "example.amazonaws.com";
  req.encoded_path = "/";
  AwsCredentials creds{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
  auto s = sign_request(req, creds, "us-east-1", "service", "20150830T123600Z");
  EXPECT_EQ(s.canonical_request,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
            "host;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
            "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  EXPECT_EQ(s.signature, "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
  EXPECT_EQ(s.headers.back(),
            "Authorization: AWS4-HMAC-SHA256 "
            "Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date, "
            "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

// A request of the S3 examples: examplebucket, the example keys, 2013-05-24.
SignedHeaders sign_s3_example(SigningRequest req) {
  req.host = "examplebucket.s3.amazonaws.com";
  req.payload_sha256 = kEmptyPayloadSha256;
  AwsCredentials creds{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
  return sign_request(req, creds, "us-east-1", "s3", "20130524T000000Z");
}

// The GET Object example of the S3 documentation ("Signature Calculations for the
// Authorization Header"): a ranged GET with x-amz-content-sha256.
TEST(SigV4, MatchesTheS3GetObjectExample) {
  SigningRequest req;
  req.encoded_path = "/test.txt";
  req.headers = {{"Range", "bytes=0-9"}};
  auto s = sign_s3_example(req);
  EXPECT_EQ(
      s.canonical_request,
      "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
      "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
      "x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n"
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_NE(std::find(s.headers.begin(), s.headers.end(),
                      "x-amz-content-sha256: " + std::string(kEmptyPayloadSha256)),
            s.headers.end());
}

// The GET Bucket (List Objects) example of the same page: the query is sorted.
TEST(SigV4, MatchesTheS3ListObjectsExampleWithASortedQuery) {
  SigningRequest req;
  req.encoded_path = "/";
  req.query = "prefix=J&max-keys=2";
  auto s = sign_s3_example(req);
  EXPECT_NE(s.canonical_request.find("\n/\nmax-keys=2&prefix=J\n"), std::string::npos);
  EXPECT_EQ(s.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4, SessionTokenIsSignedAndSent) {
  SigningRequest req;
  req.host = "h";
  req.encoded_path = "/k";
  req.payload_sha256 = kUnsignedPayload;
  AwsCredentials creds{"AK", "SECRET", "TOKEN"};
  auto s = sign_request(req, creds, "eu-west-1", "s3", "20240101T000000Z");
  EXPECT_NE(s.canonical_request.find("x-amz-security-token:TOKEN\n"), std::string::npos);
  EXPECT_NE(s.canonical_request.find(";x-amz-security-token\n"), std::string::npos);
  bool sent = false;
  for (const auto& h : s.headers) {
    sent = sent || h == "x-amz-security-token: TOKEN";
    EXPECT_EQ(h.find("SECRET"), std::string::npos) << "the secret key leaked into " << h;
  }
  EXPECT_TRUE(sent);
  EXPECT_NE(s.canonical_request.find("\nUNSIGNED-PAYLOAD"), std::string::npos);
}

TEST(Credentials, ReadsTheNamedProfileOfASharedCredentialsFile) {
  const std::string text =
      "# comment\n[default]\naws_access_key_id = AK1\naws_secret_access_key=S1\n\n"
      "[profile ci]\n aws_access_key_id=AK2 \naws_secret_access_key = S2\n"
      "aws_session_token = T2\n";
  auto d = parse_credentials_file(text, "default");
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->access_key_id, "AK1");
  EXPECT_EQ(d->secret_access_key, "S1");
  auto ci = parse_credentials_file(text, "ci");
  ASSERT_TRUE(ci.is_ok());
  EXPECT_EQ(ci->access_key_id, "AK2");
  EXPECT_EQ(ci->session_token, "T2");
  EXPECT_EQ(parse_credentials_file(text, "other").status().code(), StatusCode::kNotFound);
}

using Vars = std::vector<std::pair<std::string, std::string>>;

class EnvGuard {
 public:
  explicit EnvGuard(const Vars& vars) {
    for (const char* name : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                             "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
                             "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(name);
    }
    for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~EnvGuard() {
    for (const auto& [k, v] : saved_) {
      if (v) {
        ::setenv(k.c_str(), v->c_str(), 1);
      } else {
        ::unsetenv(k.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST(S3ConfigFromEnv, EnvironmentKeysWinAndTheEndpointLosesItsTrailingSlash) {
  EnvGuard env(Vars{{"AWS_ACCESS_KEY_ID", "AK"},
                    {"AWS_SECRET_ACCESS_KEY", "SK"},
                    {"AWS_SESSION_TOKEN", "TOK"},
                    {"AWS_REGION", "eu-central-1"},
                    {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"}});
  auto c = S3Config::from_env();
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->credentials.access_key_id, "AK");
  EXPECT_EQ(c->credentials.session_token, "TOK");
  EXPECT_EQ(c->region, "eu-central-1");
  EXPECT_EQ(c->endpoint_url, "http://127.0.0.1:9000");
}

TEST(S3ConfigFromEnv, ProfileComesFromTheSharedCredentialsFile) {
  test::TempDir dir;
  const std::string path = dir.path() + "/credentials";
  std::ofstream(path) << "[default]\naws_access_key_id=D\naws_secret_access_key=DS\n"
                         "[ci]\naws_access_key_id=C\naws_secret_access_key=CS\n";
  {
    EnvGuard env(Vars{{"AWS_SHARED_CREDENTIALS_FILE", path}});
    auto c = S3Config::from_env();
    ASSERT_TRUE(c.is_ok());
    EXPECT_EQ(c->credentials.access_key_id, "D");
    EXPECT_EQ(c->region, "us-east-1");
    EXPECT_TRUE(c->endpoint_url.empty());
  }
  {
    EnvGuard env(Vars{{"AWS_SHARED_CREDENTIALS_FILE", path}, {"AWS_PROFILE", "ci"}});
    auto c = S3Config::from_env();
    ASSERT_TRUE(c.is_ok());
    EXPECT_EQ(c->credentials.access_key_id, "C");
  }
  {
    EnvGuard env(Vars{{"AWS_SHARED_CREDENTIALS_FILE", path}, {"AWS_PROFILE", "nope"}});
    auto c = S3Config::from_env();
    ASSERT_FALSE(c.is_ok());
    EXPECT_NE(c.status().message().find("nope"), std::string::npos);
  }
  {
    EnvGuard env(Vars{{"AWS_SHARED_CREDENTIALS_FILE", dir.path() + "/none"}});
    auto c = S3Config::from_env();
    ASSERT_TRUE(c.is_ok());
    EXPECT_TRUE(c->credentials.empty());  // anonymous
  }
}

TEST(S3ConfigFromEnv, HalfAKeyPairIsAnErrorThatShowsNoSecret) {
  EnvGuard env(Vars{{"AWS_SECRET_ACCESS_KEY", "TOPSECRET"}});
  auto c = S3Config::from_env();
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().message().find("TOPSECRET"), std::string::npos);
}

}  // namespace
}  // namespace shardyard::io
