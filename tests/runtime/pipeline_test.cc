// Tests of runtime/pipeline.h and the per-item randomness of runtime/hash.h: built-in and
// user stages, the registry, worker identity, counter-based random streams.
#include "runtime/pipeline.h"

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/hash.h"

namespace shardyard {
namespace {

Item sample_item() {
  Item it;
  it.id = 5;
  it.key = "k";
  it.set_field("cls", "3");
  it.set_field("jpg", "JPEG");
  it.set_field("json", "{}");
  it.set_field("txt", "hello");
  return it;
}

std::vector<std::string> names_of(const Item& it) {
  std::vector<std::string> out;
  for (const auto& f : it.fields) out.push_back(f.name);
  return out;
}

Status run(const Spec& spec, Item& item) {
  SY_ASSIGN_OR_RETURN(auto stages, build_pipeline(spec));
  WorkerInfo worker;
  for (auto& s : stages) {
    SY_RETURN_IF_ERROR(s->open(worker));
    StageContext ctx{worker, ItemRng(hash_combine(0, 0, item.id))};
    SY_RETURN_IF_ERROR(s->process(item, ctx));
  }
  return Status::ok();
}

TEST(BuiltInStages, SelectFieldsKeepsOnlyTheListedFields) {
  Item it = sample_item();
  ASSERT_TRUE(run(Spec().map("select_fields", {{"fields", "txt,cls,absent"}}), it).is_ok());
  EXPECT_EQ(names_of(it), (std::vector<std::string>{"cls", "txt"}));
  EXPECT_EQ(it.field("txt")->view(), "hello");
}

TEST(BuiltInStages, DropFieldsRemovesTheListedFields) {
  Item it = sample_item();
  ASSERT_TRUE(run(Spec().map("drop_fields", {{"fields", "jpg,json,absent"}}), it).is_ok());
  EXPECT_EQ(names_of(it), (std::vector<std::string>{"cls", "txt"}));
}

TEST(BuiltInStages, RenameFieldKeepsBytesAndSortedOrder) {
  Item it = sample_item();
  const uint8_t* jpg = it.field("jpg")->data;
  ASSERT_TRUE(run(Spec().map("rename_field", {{"from", "jpg"}, {"to", "aaa"}}), it).is_ok());
  EXPECT_EQ(names_of(it), (std::vector<std::string>{"aaa", "cls", "json", "txt"}));
  EXPECT_EQ(it.field("aaa")->view(), "JPEG");
  EXPECT_EQ(it.field("aaa")->data, jpg) << "renaming copies no payload";
  // Renaming an absent field changes nothing.
  ASSERT_TRUE(run(Spec().map("rename_field", {{"from", "png"}, {"to", "x"}}), it).is_ok());
  EXPECT_EQ(names_of(it), (std::vector<std::string>{"aaa", "cls", "json", "txt"}));
}

TEST(BuiltInStages, RenameFieldKeepsAnUnreadFieldUnread) {
  Item it = sample_item();
  it.put_field(Field{"bin", nullptr, 300000, 8192});
  ASSERT_TRUE(run(Spec().map("rename_field", {{"from", "bin"}, {"to", "zzz"}}), it).is_ok());
  const Field* moved = it.field("zzz");
  ASSERT_NE(moved, nullptr);
  EXPECT_TRUE(moved->unread());
  EXPECT_EQ(moved->size, 300000u);
  EXPECT_EQ(moved->file_offset, 8192u);
  EXPECT_EQ(it.field("bin"), nullptr);
}

// Whether a job may leave large members unread: only when no stage of its spec reads bytes.
TEST(StageRegistry, SaysWhichStagesReadFieldBytes) {
  for (const char* blind : {"select_fields", "drop_fields", "rename_field", "count", "sleep"})
    EXPECT_FALSE(StageRegistry::global().reads_bytes(blind)) << blind;
  EXPECT_TRUE(StageRegistry::global().reads_bytes("not_registered"));
  auto noop = [](Item&, StageContext&) { return Status::ok(); };
  ASSERT_TRUE(StageRegistry::global().add("test_decoder", map_stage(noop)).is_ok());
  ASSERT_TRUE(StageRegistry::global().add("test_key_only", map_stage(noop), false).is_ok());
  EXPECT_TRUE(StageRegistry::global().reads_bytes("test_decoder"));
  EXPECT_FALSE(StageRegistry::global().reads_bytes("test_key_only"));
  EXPECT_FALSE(spec_reads_bytes(Spec()));
  EXPECT_FALSE(spec_reads_bytes(Spec().map("count").merge().once("test_key_only")));
  EXPECT_TRUE(spec_reads_bytes(Spec().map("count").merge().once("test_decoder")));
  // Registered again as reading bytes, it does.
  ASSERT_TRUE(StageRegistry::global().add("test_key_only", map_stage(noop)).is_ok());
  EXPECT_TRUE(StageRegistry::global().reads_bytes("test_key_only"));
}

TEST(BuiltInStages, StagesRunInSpecOrder) {
  Item it = sample_item();
  Spec spec;
  spec.map("rename_field", {{"from", "txt"}, {"to", "caption"}})
      .map("select_fields", {{"fields", "caption,jpg"}});
  ASSERT_TRUE(run(spec, it).is_ok());
  EXPECT_EQ(names_of(it), (std::vector<std::string>{"caption", "jpg"}));
  EXPECT_EQ(spec.stages().size(), 2u);
  EXPECT_EQ(spec.stages()[0].type, "rename_field");
}

TEST(BuiltInStages, MissingParametersAreInvalidArguments) {
  for (const auto& spec :
       {StageSpec{"select_fields", {}}, StageSpec{"drop_fields", {{"fields", ""}}},
        StageSpec{"rename_field", {{"from", "a"}}}, StageSpec{"rename_field", {{"to", "b"}}}}) {
    auto stage = StageRegistry::global().make(spec);
    ASSERT_FALSE(stage.is_ok()) << spec.type;
    EXPECT_EQ(stage.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(stage.status().message().find("'" + spec.type + "'"), std::string::npos)
        << stage.status().message();
    EXPECT_NE(stage.status().message().find("parameter"), std::string::npos);
  }
}

TEST(BuiltInStages, SleepChangesNothingAndRefusesABadDuration) {
  Item it = sample_item();
  ASSERT_TRUE(run(Spec().map("sleep", {{"us", "10"}}), it).is_ok());
  EXPECT_EQ(names_of(it), names_of(sample_item()));
  for (const char* bad : {"", "x", "-1", "5ms", "60000001"}) {
    auto stage = StageRegistry::global().make({"sleep", {{"us", bad}}});
    ASSERT_FALSE(stage.is_ok()) << bad;
    EXPECT_NE(stage.status().message().find("'sleep'"), std::string::npos);
  }
}

TEST(StageRegistry, UnknownStageTypeIsAnErrorNamingIt) {
  auto stage = StageRegistry::global().make({"decode_webp_v9", {}});
  ASSERT_FALSE(stage.is_ok());
  EXPECT_EQ(stage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(stage.status().message().find("'decode_webp_v9'"), std::string::npos);
  auto pipeline = build_pipeline(Spec().map("select_fields", {{"fields", "a"}}).map("nope"));
  ASSERT_FALSE(pipeline.is_ok());
  EXPECT_NE(pipeline.status().message().find("'nope'"), std::string::npos);
  EXPECT_FALSE(StageRegistry::global().contains("nope"));
  EXPECT_TRUE(StageRegistry::global().contains("select_fields"));
  EXPECT_TRUE(StageRegistry::global().contains("drop_fields"));
  EXPECT_TRUE(StageRegistry::global().contains("rename_field"));
}

TEST(StageRegistry, RunsAUserRegisteredMapStage) {
  ASSERT_TRUE(StageRegistry::global()
                  .add("test_upper_key", map_stage([](Item& item, StageContext& ctx) {
                         for (auto& c : item.key) c = static_cast<char>(std::toupper(c));
                         item.set_field("draw", std::to_string(ctx.rng.uniform(1000)));
                         return Status::ok();
                       }))
                  .is_ok());
  EXPECT_TRUE(StageRegistry::global().contains("test_upper_key"));
  Item it = sample_item();
  it.key = "abc";
  ASSERT_TRUE(run(Spec().map("test_upper_key"), it).is_ok());
  EXPECT_EQ(it.key, "ABC");
  ASSERT_NE(it.field("draw"), nullptr);

  ASSERT_TRUE(StageRegistry::global()
                  .add("test_fail", map_stage([](Item& item, StageContext&) {
                         return invalid_argument("cannot decode item " + item.key);
                       }))
                  .is_ok());
  Status st = run(Spec().map("test_fail"), it);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ABC"), std::string::npos);

  EXPECT_EQ(StageRegistry::global().add("", map_stage(nullptr)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(StageRegistry::global().add("test_null", StageFactory()).code(),
            StatusCode::kInvalidArgument);
}

TEST(ItemRng, SameKeyGivesTheSameStreamWhateverTheWorker) {
  const uint64_t key = hash_combine(17, 3, 123456);
  ItemRng a(key), b(key);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  EXPECT_EQ(hash_combine(17, 3, 123456), key) << "hash_combine is a pure function";
  ItemRng other(hash_combine(17, 3, 123457)), again(key);
  int same = 0;
  for (int i = 0; i < 100; ++i) same += other.next_u64() == again.next_u64();
  EXPECT_EQ(same, 0);
  // Draws on another thread (another worker) give the same numbers.
  std::vector<uint64_t> here, there;
  ItemRng h(key);
  for (int i = 0; i < 10; ++i) here.push_back(h.uniform(1000));
  std::thread([&] {
    ItemRng t(key);
    for (int i = 0; i < 10; ++i) there.push_back(t.uniform(1000));
  }).join();
  EXPECT_EQ(here, there);
}

TEST(ItemRng, UniformStaysInRangeAndCoversIt) {
  ItemRng rng(99);
  std::set<uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    uint64_t v = rng.uniform(10);
    ASSERT_LT(v, 10u);
    seen.insert(v);
    double d = rng.uniform01();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(ItemRng(1).uniform(1), 0u);
}

TEST(Hasher, LengthPrefixedStringsDoNotCollideAcrossBoundaries) {
  Hasher a, b;
  a.add_string("ab");
  a.add_string("c");
  b.add_string("a");
  b.add_string("bc");
  EXPECT_NE(a.digest(), b.digest());
  Hasher c, d;
  c.add("abc");
  d.add("ab");
  d.add("c");
  EXPECT_EQ(c.digest(), d.digest()) << "add() is a plain byte stream";
}

TEST(WorkerInfo, CurrentWorkerIsNullOutsideAWorker) {
  EXPECT_EQ(current_worker(), nullptr);
  std::thread([] { EXPECT_EQ(current_worker(), nullptr); }).join();
}

TEST(WorkerInfo, ScopedWorkerInfoSetsAndRestoresPerThread) {
  WorkerInfo outer{1, 4, 2, 3, 5, 7, 42};
  WorkerInfo inner{1, 4, 0, 3, 3, 7, 42};
  {
    ScopedWorkerInfo scope(&outer);
    ASSERT_EQ(current_worker(), &outer);
    EXPECT_EQ(current_worker()->global_worker, 5u);
    {
      ScopedWorkerInfo nested(&inner);
      EXPECT_EQ(current_worker(), &inner);
    }
    EXPECT_EQ(current_worker(), &outer);
    // Thread-local: another thread sees its own identity, not this one.
    std::thread([&] {
      EXPECT_EQ(current_worker(), nullptr);
      ScopedWorkerInfo theirs(&inner);
      EXPECT_EQ(current_worker(), &inner);
    }).join();
    EXPECT_EQ(current_worker(), &outer);
  }
  EXPECT_EQ(current_worker(), nullptr);
}

TEST(SpecText, RoundTripsEveryKindOfStageAndTheMergePoint) {
  Spec spec;
  spec.once("dedupe").map("crop", {{"size", "224"}, {"mode", "a b;c=d%e/f"}}).merge().once("stats");
  const std::string text = spec_to_string(spec);
  EXPECT_EQ(text, "once/dedupe map/crop:mode=a%20b%3Bc%3Dd%25e%2Ff;size=224 merge once/stats");
  auto back = spec_from_string(text);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(spec_to_string(*back), text);
  ASSERT_EQ(back->stages().size(), 3u);
  EXPECT_FALSE(back->stages()[0].replicable);
  EXPECT_EQ(back->stages()[1].params.at("mode"), "a b;c=d%e/f");
  EXPECT_EQ(back->merge_at(), 2u);
  EXPECT_TRUE(back->has_merge());
}

TEST(SpecText, EmptySpecAndLeadingMerge) {
  EXPECT_EQ(spec_to_string(Spec()), "");
  EXPECT_TRUE(spec_from_string("").is_ok());
  Spec post;
  post.merge().map("count");
  EXPECT_EQ(spec_to_string(post), "merge map/count");
  auto back = spec_from_string("merge map/count");
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->merge_at(), 0u);
}

TEST(SpecText, RefusesWhatItCannotRead) {
  for (const char* bad : {"crop", "map/", "map/a:b", "map/a:=%G1", "map/a b", "merge merge",
                          "map/a  map/b", "map/a%2"}) {
    auto r = spec_from_string(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
  }
  EXPECT_NE(spec_from_string("decode").status().message().find("'decode'"), std::string::npos);
}

}  // namespace
}  // namespace shardyard
