#include "io/remote/s3_listing.h"

#include <cstdlib>

#include "io/remote/http_util.h"

namespace shardyard::io {

namespace {

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The text of the first <name>...</name> in [from, to) of xml; npos-safe. `at` gets the
// position after the closing tag. False when absent or unclosed.
bool element(const std::string& xml, const std::string& name, size_t from, size_t to,
             std::string* text, size_t* at = nullptr) {
  const std::string open = "<" + name + ">", close = "</" + name + ">";
  auto a = xml.find(open, from);
  if (a == std::string::npos || a >= to) {
    // An empty element <name/> counts as present and empty.
    auto e = xml.find("<" + name + "/>", from);
    if (e == std::string::npos || e >= to) return false;
    text->clear();
    if (at) *at = e + name.size() + 3;
    return true;
  }
  a += open.size();
  auto b = xml.find(close, a);
  if (b == std::string::npos || b + close.size() > to) return false;
  *text = xml.substr(a, b - a);
  if (at) *at = b + close.size();
  return true;
}

}  // namespace

bool xml_unescape(const std::string& in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '&') {
      *out += in[i];
      continue;
    }
    auto semi = in.find(';', i);
    if (semi == std::string::npos || semi - i > 12) return false;
    std::string ent = in.substr(i + 1, semi - i - 1);
    if (ent == "amp")
      *out += '&';
    else if (ent == "lt")
      *out += '<';
    else if (ent == "gt")
      *out += '>';
    else if (ent == "quot")
      *out += '"';
    else if (ent == "apos")
      *out += '\'';
    else if (ent.size() >= 2 && ent[0] == '#') {
      bool hexa = ent[1] == 'x' || ent[1] == 'X';
      std::string digits = ent.substr(hexa ? 2 : 1);
      if (digits.empty() || digits.size() > 8) return false;
      uint32_t cp = 0;
      for (char c : digits) {
        int d;
        if (c >= '0' && c <= '9')
          d = c - '0';
        else if (hexa && c >= 'a' && c <= 'f')
          d = c - 'a' + 10;
        else if (hexa && c >= 'A' && c <= 'F')
          d = c - 'A' + 10;
        else
          return false;
        cp = cp * (hexa ? 16 : 10) + static_cast<uint32_t>(d);
      }
      if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      append_utf8(cp, out);
    } else {
      return false;
    }
    i = semi;
  }
  return true;
}

Result<S3Listing> parse_list_objects_v2(const std::string& xml) {
  if (xml.find("<ListBucketResult") == std::string::npos)
    return corrupt("S3 listing: the response is not a ListBucketResult");
  S3Listing out;
  std::string text;
  // IsTruncated and the token sit outside the <Contents> elements; look for them there.
  size_t pos = 0;
  for (;;) {
    auto open = xml.find("<Contents>", pos);
    if (open == std::string::npos) break;
    auto close = xml.find("</Contents>", open);
    if (close == std::string::npos) return corrupt("S3 listing: unclosed <Contents>");
    S3Object o;
    std::string raw;
    if (!element(xml, "Key", open, close, &raw) || !xml_unescape(raw, &o.key) || o.key.empty())
      return corrupt("S3 listing: an object without a readable <Key>");
    if (!element(xml, "Size", open, close, &raw) || raw.empty() || raw.size() > 19 ||
        raw.find_first_not_of("0123456789") != std::string::npos)
      return corrupt("S3 listing: object '" + o.key + "' has no readable <Size>");
    o.size = std::strtoull(raw.c_str(), nullptr, 10);
    if (element(xml, "LastModified", open, close, &raw)) {
      auto t = parse_http_time(raw);
      if (!t) return corrupt("S3 listing: object '" + o.key + "' has a bad <LastModified>");
      o.last_modified_ns = *t;
    }
    if (element(xml, "ETag", open, close, &raw)) {
      if (!xml_unescape(raw, &o.etag)) return corrupt("S3 listing: bad <ETag>");
      if (o.etag.size() >= 2 && o.etag.front() == '"' && o.etag.back() == '"')
        o.etag = o.etag.substr(1, o.etag.size() - 2);
    }
    out.objects.push_back(std::move(o));
    pos = close + 11;
  }
  // Strip the objects so that a key named like a flag cannot fool the top-level lookups.
  std::string top;
  pos = 0;
  for (;;) {
    auto open = xml.find("<Contents>", pos);
    top.append(xml, pos, open == std::string::npos ? std::string::npos : open - pos);
    if (open == std::string::npos) break;
    pos = xml.find("</Contents>", open) + 11;
  }
  if (element(top, "IsTruncated", 0, top.size(), &text)) out.truncated = text == "true";
  if (out.truncated) {
    std::string raw;
    if (!element(top, "NextContinuationToken", 0, top.size(), &raw) ||
        !xml_unescape(raw, &out.next_token) || out.next_token.empty())
      return corrupt("S3 listing: truncated without a NextContinuationToken");
  }
  return out;
}

std::string s3_error_code(const std::string& body) {
  auto err = body.find("<Error>");
  if (err == std::string::npos) return "";
  std::string code, out;
  if (!element(body, "Code", err, body.size(), &code) || !xml_unescape(code, &out)) return "";
  return out;
}

}  // namespace shardyard::io
