#include "io/fs/uri.h"

#include <cctype>

namespace shardyard::io {

std::string ascii_lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool parse_decimal_u64(const std::string& s, size_t pos, size_t end, uint64_t* out) {
  if (pos >= end || end > s.size() || end - pos > 19) return false;
  uint64_t v = 0;
  for (size_t i = pos; i < end; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  *out = v;
  return true;
}

bool is_remote_uri(const std::string& uri) {
  auto colon = uri.find("://");
  if (colon == std::string::npos) return false;
  std::string scheme = ascii_lower(uri.substr(0, colon));
  return scheme == "http" || scheme == "https" || scheme == "s3";
}

std::optional<Url> parse_url(const std::string& text) {
  auto sep = text.find("://");
  if (sep == std::string::npos || sep == 0) return std::nullopt;
  Url u;
  u.scheme = ascii_lower(text.substr(0, sep));
  for (char c : u.scheme)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.')
      return std::nullopt;
  std::string rest = text.substr(sep + 3);
  if (auto hash = rest.find('#'); hash != std::string::npos) rest.resize(hash);
  size_t auth_end = rest.find_first_of("/?");
  std::string authority = rest.substr(0, auth_end);
  rest = auth_end == std::string::npos ? "" : rest.substr(auth_end);
  if (auto at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  if (authority.empty()) return std::nullopt;
  // An IPv6 literal keeps its brackets in the host.
  size_t port_colon = std::string::npos;
  if (authority[0] == '[') {
    auto close = authority.find(']');
    if (close == std::string::npos) return std::nullopt;
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return std::nullopt;
      port_colon = close + 1;
    }
  } else {
    port_colon = authority.find(':');
  }
  u.host = authority.substr(0, port_colon);
  if (u.host.empty()) return std::nullopt;
  if (port_colon != std::string::npos) {
    uint64_t port = 0;
    if (!parse_decimal_u64(authority, port_colon + 1, authority.size(), &port) || port == 0 ||
        port > 65535)
      return std::nullopt;
    u.port = static_cast<int>(port);
  }
  auto q = rest.find('?');
  u.path = rest.substr(0, q);
  if (q != std::string::npos) u.query = rest.substr(q + 1);
  if (u.path.empty()) u.path = "/";
  return u;
}

std::string redact_url(const std::string& uri) {
  std::string out = uri.substr(0, uri.find_first_of("?#"));
  auto sep = out.find("://");
  if (sep != std::string::npos) {
    size_t host = sep + 3;
    size_t end = out.find('/', host);
    auto at = out.rfind('@', end == std::string::npos ? out.size() : end);
    if (at != std::string::npos && at >= host) out.erase(host, at + 1 - host);
  }
  return out;
}

std::string uri_encode(const std::string& text, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size() * 3 / 2);
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace shardyard::io
