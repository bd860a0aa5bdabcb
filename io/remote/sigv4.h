// AWS Signature Version 4 and where S3 credentials come from.
//
// sign_request() adds the headers of a signed request (x-amz-date, x-amz-content-sha256,
// x-amz-security-token when there is a session token, Authorization) to a request made of
// a method, a canonical URI path, a query and the headers to sign. It follows the AWS
// documentation and is checked against AWS's published examples (tests/io/remote/sigv4_test.cc).
// libcurl's CURLOPT_AWS_SIGV4 is not used: curl 7.88 does not send x-amz-content-sha256.
//
// S3Config gathers the settings of an S3 client from the standard environment variables
// and the shared credentials file. Secrets never appear in any message this file makes.
//
// Thread-safe (pure functions; from_env reads the environment and one file).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/status.h"

namespace shardyard::io {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty unless temporary credentials
  bool empty() const { return access_key_id.empty(); }
};

struct SigningRequest {
  std::string method = "GET";
  std::string host;          // the Host header, with ":port" when not the default
  std::string encoded_path;  // already URI-encoded, as sent ("/bucket/key")
  std::string query;         // already encoded "k=v&k2=v2", any order; empty for none
  // Extra headers to sign (e.g. range); names in any case.
  std::vector<std::pair<std::string, std::string>> headers;
  // "UNSIGNED-PAYLOAD" or the hex SHA-256 of the body (kEmptyPayloadSha256 for none).
  std::string payload_sha256;
};

extern const char* const kEmptyPayloadSha256;
extern const char* const kUnsignedPayload;

struct SignedHeaders {
  std::string canonical_request;  // kept for tests and debugging, never logged
  std::string string_to_sign;
  std::string signature;  // hex
  // Headers to add to the request (Authorization, x-amz-date, x-amz-content-sha256 and,
  // with a session token, x-amz-security-token), as "Name: value".
  std::vector<std::string> headers;
};

// amz_date is "YYYYMMDDTHHMMSSZ"; region like "us-east-1"; service "s3".
SignedHeaders sign_request(const SigningRequest& req, const AwsCredentials& creds,
                           const std::string& region, const std::string& service,
                           const std::string& amz_date);

// The current UTC time as "YYYYMMDDTHHMMSSZ".
std::string amz_date_now();

// Lower-case hex SHA-256 of bytes.
std::string sha256_hex(const std::string& bytes);

struct S3Config {
  AwsCredentials credentials;  // empty: anonymous (unsigned) requests
  std::string region = "us-east-1";
  // Empty: AWS (virtual-hosted https://BUCKET.s3.REGION.amazonaws.com/KEY). Otherwise
  // the endpoint's base URL, addressed path-style (ENDPOINT/BUCKET/KEY).
  std::string endpoint_url;

  // AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; else the profile
  // AWS_PROFILE (default "default") of AWS_SHARED_CREDENTIALS_FILE (default
  // ~/.aws/credentials). AWS_REGION (or AWS_DEFAULT_REGION), AWS_ENDPOINT_URL (or
  // AWS_ENDPOINT_URL_S3). Fails on a half-set key pair or an unreadable named profile.
  static Result<S3Config> from_env();
};

// Reads one profile of a shared credentials file's text (INI: [profile], key = value).
// kNotFound when the profile is absent.
Result<AwsCredentials> parse_credentials_file(const std::string& text, const std::string& profile);

}  // namespace shardyard::io
