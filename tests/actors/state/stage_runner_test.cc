// StageRunner (actors/state/worker_core.h): a range of a pipeline's stages built for one
// thread, run in order on items, their state encoded after each item and restored on resume.
#include <gtest/gtest.h>

#include "actors/state/worker_core.h"
#include "runtime/checkpoint.h"
#include "state_fixture.h"

namespace shardyard::actors {
namespace {

using testing::JobSpec;
using testing::make_test_job;

// Appends its "tag" parameter to field "trail", so the order of the stages shows.
class Tag : public Stage {
 public:
  explicit Tag(std::string tag) : tag_(std::move(tag)) {}
  Status process(Item& item, StageContext&) override {
    const Field* f = item.field("trail");
    item.set_field("trail", std::string(f ? f->view() : "") + tag_);
    if (tag_ == "!") return invalid_argument("refused");
    return Status::ok();
  }

 private:
  std::string tag_;
};

// Counts items; its state is the count (a rescale sums the saved counts).
class Counter : public Stage {
 public:
  Status process(Item&, StageContext&) override {
    ++n_;
    return Status::ok();
  }
  bool has_state() const override { return true; }
  std::string save_state() const override { return std::to_string(n_); }
  Status restore_state(const std::vector<std::string>& saved, bool) override {
    n_ = 0;
    for (const auto& s : saved) n_ += std::stoull(s);
    return Status::ok();
  }

 private:
  uint64_t n_ = 0;
};

class StageRunnerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto& reg = StageRegistry::global();
    (void)reg.add("test_tag", [](const StageParams& p) -> Result<std::unique_ptr<Stage>> {
      return std::unique_ptr<Stage>(new Tag(p.at("tag")));
    });
    (void)reg.add("test_counter", [](const StageParams&) -> Result<std::unique_ptr<Stage>> {
      return std::unique_ptr<Stage>(new Counter());
    });
  }
  std::shared_ptr<const JobData> job(const Spec& pipeline) {
    JobSpec spec;
    spec.shards = 1;
    spec.samples = 4;
    spec.pipeline = pipeline;
    return make_test_job(tmp_.path() + "/" + std::to_string(++n_), spec);
  }
  static Item item(uint64_t id) {
    Item it;
    it.id = id;
    it.key = "k" + std::to_string(id);
    return it;
  }
  testing::TempDir tmp_;
  int n_ = 0;
  WorkerInfo me_;
};

TEST_F(StageRunnerTest, RunsItsRangeOfStagesInOrder) {
  auto j = job(Spec()
                   .map("test_tag", {{"tag", "a"}})
                   .map("test_tag", {{"tag", "b"}})
                   .map("test_tag", {{"tag", "c"}}));
  ASSERT_NE(j, nullptr);
  auto all = StageRunner::open(*j, 0, 3, me_, {}, false);
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  Item it = item(1);
  ASSERT_TRUE(all->process(it, me_, 7).is_ok());
  EXPECT_EQ(it.field("trail")->view(), "abc");
  auto tail = StageRunner::open(*j, 1, 3, me_, {}, false);
  ASSERT_TRUE(tail.is_ok());
  Item other = item(2);
  ASSERT_TRUE(tail->process(other, me_, 7).is_ok());
  EXPECT_EQ(other.field("trail")->view(), "bc");
  EXPECT_FALSE(tail->stateful());
  auto none = StageRunner::open(*j, 3, 3, me_, {}, false);
  ASSERT_TRUE(none.is_ok());
  EXPECT_TRUE(none->empty());
}

TEST_F(StageRunnerTest, AFailingStageNamesTheItem) {
  auto j = job(Spec().map("test_tag", {{"tag", "!"}}));
  ASSERT_NE(j, nullptr);
  auto r = StageRunner::open(*j, 0, 1, me_, {}, false);
  ASSERT_TRUE(r.is_ok());
  Item it = item(42);
  const Status st = r->process(it, me_, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("item 'k42' (item 42)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("refused"), std::string::npos) << st.message();
}

TEST_F(StageRunnerTest, StateAfterEachItemRestoresAndMergesOnRescale) {
  auto j = job(Spec().map("test_tag", {{"tag", "x"}}).map("test_counter"));
  ASSERT_NE(j, nullptr);
  auto r = StageRunner::open(*j, 0, 2, me_, {}, false);
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->stateful());
  for (uint64_t i = 0; i < 3; ++i) {
    Item it = item(i);
    ASSERT_TRUE(r->process(it, me_, 1).is_ok());
  }
  const auto saved = r->state();
  EXPECT_EQ(decode_stage_states(*saved).value(), std::vector<std::string>{"3"});
  // Same topology: one saved state, restored as it was.
  auto again = StageRunner::open(*j, 0, 2, me_, {*saved}, false);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again->state(), *saved);
  // Rescaled: every saved state goes to the stage, which merges them.
  auto merged = StageRunner::open(*j, 0, 2, me_, {*saved, *saved, ""}, true);
  ASSERT_TRUE(merged.is_ok());
  EXPECT_EQ(decode_stage_states(*merged->state()).value(), std::vector<std::string>{"6"});
  // A state of another pipeline (two stateful stages) is refused with the counts.
  const std::string two = encode_stage_states({"1", "2"});
  auto wrong = StageRunner::open(*j, 0, 2, me_, {two}, false);
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("2 stateful stages; this pipeline has 1"),
            std::string::npos)
      << wrong.status().message();
}

}  // namespace
}  // namespace shardyard::actors
