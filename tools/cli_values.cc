#include "cli_values.h"

#include <cctype>
#include <limits>

namespace shardyard::tools {

namespace {

// The digits at the start of `text` as a number; `end` is where they stop. False on no
// digits or overflow.
bool leading_u64(const std::string& text, size_t* end, uint64_t* out) {
  uint64_t v = 0;
  size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *end = i;
  *out = v;
  return i > 0;
}

}  // namespace

Result<uint64_t> parse_u64(const std::string& flag, const std::string& text) {
  size_t end = 0;
  uint64_t v = 0;
  if (!leading_u64(text, &end, &v) || end != text.size())
    return invalid_argument(flag + " '" + text +
                            "': must be an integer from 0 to 18446744073709551615");
  return v;
}

Result<uint64_t> parse_byte_size(const std::string& flag, const std::string& text) {
  auto bad = [&] {
    return invalid_argument(flag + " '" + text +
                            "': must be a byte count of at least 1, with an optional unit K, M, "
                            "G or T (powers of 1024), e.g. 256M");
  };
  size_t end = 0;
  uint64_t v = 0;
  if (!leading_u64(text, &end, &v) || v == 0) return bad();
  std::string unit;
  for (size_t i = end; i < text.size(); ++i)
    unit += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
  const std::string units = "KMGT";
  unsigned shift = 0;
  if (!unit.empty()) {
    const size_t k = units.find(unit[0]);
    const std::string rest = unit.substr(1);
    if (k == std::string::npos || !(rest.empty() || rest == "B" || rest == "IB")) return bad();
    shift = static_cast<unsigned>(10 * (k + 1));
  }
  if (shift > 0 && v > (std::numeric_limits<uint64_t>::max() >> shift)) return bad();
  return v << shift;
}

Result<StageSpec> parse_stage(const std::string& text) {
  StageSpec s;
  auto colon = text.find(':');
  s.type = text.substr(0, colon);
  if (s.type.empty()) return invalid_argument("--map '" + text + "': missing stage type");
  if (colon == std::string::npos) return s;
  std::string rest = text.substr(colon + 1);
  size_t pos = 0;
  while (pos <= rest.size()) {
    auto semi = rest.find(';', pos);
    std::string kv = rest.substr(pos, semi - pos);
    if (!kv.empty()) {
      auto eq = kv.find('=');
      if (eq == std::string::npos)
        return invalid_argument("--map '" + text + "': parameter '" + kv + "' needs key=value");
      s.params[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (semi == std::string::npos) break;
    pos = semi + 1;
  }
  return s;
}

}  // namespace shardyard::tools
