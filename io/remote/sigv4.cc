#include "io/remote/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

namespace shardyard::io {

const char* const kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
const char* const kUnsignedPayload = "UNSIGNED-PAYLOAD";

namespace {

std::string hex(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  return out;
}

std::string hmac(const std::string& key, const std::string& data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Trims and collapses inner runs of spaces, as canonical header values require.
std::string canonical_value(const std::string& v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

// Query parameters sorted by name, then value (each already encoded).
std::string canonical_query(const std::string& query) {
  std::vector<std::pair<std::string, std::string>> params;
  size_t pos = 0;
  while (pos < query.size()) {
    auto amp = query.find('&', pos);
    std::string kv = query.substr(pos, amp - pos);
    if (!kv.empty()) {
      auto eq = kv.find('=');
      params.emplace_back(kv.substr(0, eq), eq == std::string::npos ? "" : kv.substr(eq + 1));
    }
    if (amp == std::string::npos) break;
    pos = amp + 1;
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [k, v] : params) {
    if (!out.empty()) out += '&';
    out += k + "=" + v;
  }
  return out;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

std::string sha256_hex(const std::string& bytes) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), d);
  return hex(d, sizeof d);
}

std::string amz_date_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[17];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

SignedHeaders sign_request(const SigningRequest& req, const AwsCredentials& creds,
                           const std::string& region, const std::string& service,
                           const std::string& amz_date) {
  std::map<std::string, std::string> headers;  // sorted by lower-case name
  for (const auto& [k, v] : req.headers) headers[lower(k)] = canonical_value(v);
  headers["host"] = req.host;
  headers["x-amz-date"] = amz_date;
  if (!req.payload_sha256.empty()) headers["x-amz-content-sha256"] = req.payload_sha256;
  if (!creds.session_token.empty()) headers["x-amz-security-token"] = creds.session_token;

  std::string canonical_headers, signed_names;
  for (const auto& [k, v] : headers) {
    canonical_headers += k + ":" + v + "\n";
    if (!signed_names.empty()) signed_names += ';';
    signed_names += k;
  }
  SignedHeaders out;
  out.canonical_request = req.method + "\n" + (req.encoded_path.empty() ? "/" : req.encoded_path) +
                          "\n" + canonical_query(req.query) + "\n" + canonical_headers + "\n" +
                          signed_names + "\n" +
                          (req.payload_sha256.empty() ? kEmptyPayloadSha256 : req.payload_sha256);
  const std::string day = amz_date.substr(0, 8);
  const std::string scope = day + "/" + region + "/" + service + "/aws4_request";
  out.string_to_sign =
      "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + sha256_hex(out.canonical_request);
  std::string key = hmac("AWS4" + creds.secret_access_key, day);
  key = hmac(key, region);
  key = hmac(key, service);
  key = hmac(key, "aws4_request");
  std::string sig = hmac(key, out.string_to_sign);
  out.signature = hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());

  out.headers.push_back("x-amz-date: " + amz_date);
  if (!req.payload_sha256.empty())
    out.headers.push_back("x-amz-content-sha256: " + req.payload_sha256);
  if (!creds.session_token.empty())
    out.headers.push_back("x-amz-security-token: " + creds.session_token);
  out.headers.push_back("Authorization: AWS4-HMAC-SHA256 Credential=" + creds.access_key_id + "/" +
                        scope + ", SignedHeaders=" + signed_names + ", Signature=" + out.signature);
  return out;
}

Result<AwsCredentials> parse_credentials_file(const std::string& text, const std::string& profile) {
  std::istringstream in(text);
  std::string line, section;
  bool found = false;
  AwsCredentials c;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      if (section.rfind("profile ", 0) == 0) section = trim(section.substr(8));
      found = found || section == profile;
      continue;
    }
    if (section != profile) continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = lower(trim(line.substr(0, eq))), v = trim(line.substr(eq + 1));
    if (k == "aws_access_key_id") c.access_key_id = v;
    if (k == "aws_secret_access_key") c.secret_access_key = v;
    if (k == "aws_session_token") c.session_token = v;
  }
  if (!found) return not_found("profile '" + profile + "' is not in the credentials file");
  return c;
}

Result<S3Config> S3Config::from_env() {
  S3Config cfg;
  if (auto r = env("AWS_REGION"); !r.empty()) {
    cfg.region = r;
  } else if (auto d = env("AWS_DEFAULT_REGION"); !d.empty()) {
    cfg.region = d;
  }
  cfg.endpoint_url = env("AWS_ENDPOINT_URL_S3");
  if (cfg.endpoint_url.empty()) cfg.endpoint_url = env("AWS_ENDPOINT_URL");
  while (!cfg.endpoint_url.empty() && cfg.endpoint_url.back() == '/') cfg.endpoint_url.pop_back();

  cfg.credentials.access_key_id = env("AWS_ACCESS_KEY_ID");
  cfg.credentials.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
  cfg.credentials.session_token = env("AWS_SESSION_TOKEN");
  if (cfg.credentials.access_key_id.empty() != cfg.credentials.secret_access_key.empty())
    return invalid_argument(
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together (one is empty)");
  if (!cfg.credentials.empty()) return cfg;

  const std::string profile = env("AWS_PROFILE").empty() ? "default" : env("AWS_PROFILE");
  std::string path = env("AWS_SHARED_CREDENTIALS_FILE");
  if (path.empty() && !env("HOME").empty()) path = env("HOME") + "/.aws/credentials";
  std::ifstream f(path);
  if (!f) {
    if (!env("AWS_PROFILE").empty())
      return invalid_argument("AWS_PROFILE=" + profile + " but the credentials file " + path +
                              " cannot be read");
    return cfg;  // anonymous
  }
  std::stringstream text;
  text << f.rdbuf();
  auto creds = parse_credentials_file(text.str(), profile);
  if (!creds.is_ok()) {
    if (!env("AWS_PROFILE").empty())
      return invalid_argument(path + ": " + creds.status().message());
    return cfg;
  }
  if (creds->access_key_id.empty() || creds->secret_access_key.empty())
    return invalid_argument(path + ": profile '" + profile +
                            "' needs both aws_access_key_id and aws_secret_access_key");
  cfg.credentials = std::move(creds).value();
  return cfg;
}

}  // namespace shardyard::io
