// Tests of runtime/inline_vector.h: inline up to N, on the heap past it, moves and copies
// either way, insert and erase in the middle, and every element destroyed exactly once.
#include "runtime/inline_vector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardyard {
namespace {

// Counts the live instances, so a leak or a double destruction shows.
struct Counted {
  static inline int live = 0;
  std::string value;
  Counted() { ++live; }
  explicit Counted(std::string v) : value(std::move(v)) { ++live; }
  Counted(const Counted& o) : value(o.value) { ++live; }
  Counted(Counted&& o) noexcept : value(std::move(o.value)) { ++live; }
  Counted& operator=(const Counted&) = default;
  Counted& operator=(Counted&&) noexcept = default;
  ~Counted() { --live; }
  bool operator==(const Counted& o) const { return value == o.value; }
};

using Vec = InlineVector<Counted, 3>;

std::vector<std::string> values(const Vec& v) {
  std::vector<std::string> out;
  for (const auto& c : v) out.push_back(c.value);
  return out;
}

// A long string, so that a moved-from one is visibly empty (no short-string copy).
std::string big(int i) { return std::string(40, static_cast<char>('a' + i)); }

class InlineVectorTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_EQ(Counted::live, 0) << "elements leaked or destroyed twice"; }
};

TEST_F(InlineVectorTest, GrowsPastItsInlineRoomKeepingTheElements) {
  Vec v;
  EXPECT_TRUE(v.empty());
  EXPECT_EQ(v.capacity(), 3u);
  for (int i = 0; i < 3; ++i) v.emplace_back(big(i));
  EXPECT_EQ(v.capacity(), 3u) << "three fit inline";
  const Counted* inline_at = v.data();
  v.push_back(Counted(big(3)));
  EXPECT_NE(v.data(), inline_at) << "the fourth moved them to the heap";
  EXPECT_GE(v.capacity(), 4u);
  for (int i = 4; i < 20; ++i) v.emplace_back(big(i));
  ASSERT_EQ(v.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(v[i].value, big(i)) << i;
  EXPECT_EQ(v.front().value, big(0));
  EXPECT_EQ(v.back().value, big(19));
  EXPECT_EQ(v.at(19).value, big(19));
  EXPECT_THROW(v.at(20), std::out_of_range);
  v.pop_back();
  EXPECT_EQ(v.size(), 19u);
  v.clear();
  EXPECT_TRUE(v.empty());
  EXPECT_EQ(Counted::live, 0);
}

TEST_F(InlineVectorTest, AnElementOfItsOwnCanBeAppendedWhileItGrows) {
  Vec v;
  for (int i = 0; i < 3; ++i) v.emplace_back(big(i));
  v.push_back(v[0]);  // the argument lives in the room that grow() gives up
  v.emplace_back(v[1]);
  EXPECT_EQ(values(v), (std::vector<std::string>{big(0), big(1), big(2), big(0), big(1)}));
}

TEST_F(InlineVectorTest, MovesAndCopiesInlineAndOnTheHeap) {
  for (int n : {0, 2, 3, 4, 9}) {
    SCOPED_TRACE(n);
    Vec a;
    for (int i = 0; i < n; ++i) a.emplace_back(big(i));
    const std::vector<std::string> want = values(a);
    Vec copy(a);
    EXPECT_EQ(values(copy), want);
    EXPECT_EQ(values(a), want) << "a copy leaves the source as it was";
    Vec moved(std::move(a));
    EXPECT_EQ(values(moved), want);
    EXPECT_TRUE(a.empty()) << "a moved-from vector is empty";  // NOLINT(bugprone-use-after-move)
    a.emplace_back(big(7));                                    // and usable
    EXPECT_EQ(a.size(), 1u);
    Vec assigned;
    assigned.emplace_back(big(8));
    for (int i = 0; i < 5; ++i) assigned.emplace_back(big(9));  // on the heap before
    assigned = std::move(moved);
    EXPECT_EQ(values(assigned), want);
    Vec copied{Counted(big(1))};
    copied = assigned;
    EXPECT_EQ(values(copied), want);
    EXPECT_TRUE(copied == assigned);
    const Vec& same = copied;
    copied = same;  // assignment to itself keeps the elements
    EXPECT_EQ(values(copied), want);
  }
}

TEST_F(InlineVectorTest, InsertsAndErasesInTheMiddle) {
  Vec v{Counted(big(0)), Counted(big(2))};
  auto at = v.insert(v.begin() + 1, Counted(big(1)));
  EXPECT_EQ(at->value, big(1));
  v.insert(v.end(), Counted(big(3)));  // past the inline room
  v.insert(v.begin(), Counted(big(9)));
  EXPECT_EQ(values(v), (std::vector<std::string>{big(9), big(0), big(1), big(2), big(3)}));
  auto next = v.erase(v.begin());
  EXPECT_EQ(next->value, big(0));
  v.erase(std::remove_if(v.begin(), v.end(), [](const Counted& c) { return c.value == big(1); }),
          v.end());
  EXPECT_EQ(values(v), (std::vector<std::string>{big(0), big(2), big(3)}));
  auto it = std::lower_bound(v.begin(), v.end(), big(2),
                             [](const Counted& c, const std::string& s) { return c.value < s; });
  EXPECT_EQ(it - v.begin(), 1);
  v.resize(1);
  EXPECT_EQ(values(v), (std::vector<std::string>{big(0)}));
  v.resize(4);
  EXPECT_EQ(v.size(), 4u);
  EXPECT_TRUE(v[3].value.empty());
}

TEST_F(InlineVectorTest, ReserveMovesToTheHeapOnlyPastTheInlineRoom) {
  Vec v;
  v.reserve(2);
  EXPECT_EQ(v.capacity(), 3u);
  v.emplace_back(big(0));
  v.reserve(10);
  EXPECT_EQ(v.capacity(), 10u);
  EXPECT_EQ(v[0].value, big(0));
  const Counted* at = v.data();
  for (int i = 1; i < 10; ++i) v.emplace_back(big(i));
  EXPECT_EQ(v.data(), at) << "no growth within the reserved room";
}

}  // namespace
}  // namespace shardyard
