// Tests of tools/json_text.h: any bytes become valid UTF-8 for JSON, valid UTF-8 is kept.
#include "json_text.h"

#include <gtest/gtest.h>

#include <string>

namespace shardyard::tools {
namespace {

TEST(JsonText, KeepsValidUtf8) {
  for (const std::string s : {"", "plain/key.jpg", "caf\xc3\xa9", "\xe2\x82\xac 100",
                              "\xf0\x9f\x93\xb7.jpg", "tab\tnewline\n", "back\\slash"})
    EXPECT_EQ(json_text(s), s);
}

// As Python's bytes.decode("utf-8", "backslashreplace") writes them.
TEST(JsonText, EscapesEveryByteThatIsNotUtf8) {
  struct Case {
    std::string in, out;
  };
  for (const auto& c : {
           Case{"caf\xe9.jpg", "caf\\xe9.jpg"},               // Latin-1
           Case{"\xff\xfe", "\\xff\\xfe"},                    // never in UTF-8
           Case{"\xc0\xaf", "\\xc0\\xaf"},                    // overlong '/'
           Case{"\xed\xa0\x80", "\\xed\\xa0\\x80"},           // a surrogate
           Case{"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},  // above U+10FFFF
           Case{"\xe2\x82", "\\xe2\\x82"},                    // cut short
           Case{"a\x80"
                "b",
                "a\\x80b"},  // a lone continuation byte
       }) {
    EXPECT_EQ(json_text(c.in), c.out);
  }
}

TEST(JsonText, EveryOutputDumpsAsJson) {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  nlohmann::json j;
  j["name"] = json_text(all);
  const std::string text = dump_json(j);
  auto back = nlohmann::json::parse(text);
  EXPECT_EQ(back["name"].get<std::string>(), json_text(all));
  // A string that skipped json_text is replaced, not thrown over.
  nlohmann::json raw;
  raw["name"] = std::string("caf\xe9");
  EXPECT_NO_THROW(dump_json(raw, 2));
}

}  // namespace
}  // namespace shardyard::tools
