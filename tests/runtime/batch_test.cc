// Tests of runtime/batch.h and runtime/item.h: the column layout of a batch and the
// sorted fields of an item.
#include "runtime/batch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/item.h"

namespace shardyard {
namespace {

Item make_item(uint64_t id, std::string key,
               const std::vector<std::pair<std::string, std::string>>& fields) {
  Item it;
  it.id = id;
  it.key = std::move(key);
  for (const auto& [name, bytes] : fields) it.set_field(name, bytes);
  return it;
}

std::vector<std::string> names_of(const Item& it) {
  std::vector<std::string> out;
  for (const auto& f : it.fields) out.push_back(f.name);
  return out;
}

TEST(Item, SetFieldKeepsFieldsSortedAndReplacesByName) {
  Item it;
  it.set_field("jpg", "JPEG");
  it.set_field("cls", "7");
  it.set_field("input.seq.bin", "abc");
  it.set_field("a", "");
  EXPECT_EQ(names_of(it), (std::vector<std::string>{"a", "cls", "input.seq.bin", "jpg"}));
  it.set_field("cls", "12");
  EXPECT_EQ(names_of(it), (std::vector<std::string>{"a", "cls", "input.seq.bin", "jpg"}));
  ASSERT_NE(it.field("cls"), nullptr);
  EXPECT_EQ(it.field("cls")->view(), "12");
  EXPECT_EQ(it.field("jpg")->view(), "JPEG");
  EXPECT_EQ(it.field("a")->size, 0u);
  EXPECT_EQ(it.field("png"), nullptr);
  EXPECT_EQ(it.payload_bytes(), 2u + 3 + 4);
}

TEST(Item, SetFieldViewAndRemoveField) {
  static const uint8_t bytes[] = {1, 2, 3, 4, 5};
  Item it;
  it.set_field_view("z", bytes, 5);
  it.set_field_view("b", bytes + 1, 2);
  EXPECT_EQ(names_of(it), (std::vector<std::string>{"b", "z"}));
  EXPECT_EQ(it.field("b")->data, bytes + 1);
  it.set_field_view("z", bytes, 1);
  EXPECT_EQ(it.field("z")->size, 1u);
  it.remove_field("b");
  it.remove_field("not-there");
  EXPECT_EQ(names_of(it), (std::vector<std::string>{"z"}));
}

TEST(Item, OwnedFieldBytesSurviveMovingTheItem) {
  Item it;
  it.set_field("txt", std::string(1000, 'q'));
  Item moved = std::move(it);
  std::vector<Item> many;
  many.push_back(std::move(moved));
  for (int i = 0; i < 50; ++i) many.push_back(make_item(i, "k", {{"x", "y"}}));
  EXPECT_EQ(many[0].field("txt")->view(), std::string(1000, 'q'));
}

TEST(BuildBatch, LaysOutEachFieldAsContiguousBytesWithOffsets) {
  auto pool = BufferPool::create();
  std::vector<Item> items = {make_item(10, "k0", {{"cls", "1"}, {"jpg", "aaaa"}}),
                             make_item(11, "k1", {{"cls", "2"}, {"jpg", ""}}),
                             make_item(12, "k2", {{"cls", "3"}, {"jpg", "bbbbbbbbb"}})};
  Batch b = build_batch(items, 4, 17, 2, *pool).value();
  EXPECT_EQ(b.epoch(), 4u);
  EXPECT_EQ(b.step(), 17u);
  EXPECT_EQ(b.rank(), 2u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b.keys(), (std::vector<std::string>{"k0", "k1", "k2"}));
  EXPECT_EQ(b.item_ids(), (std::vector<uint64_t>{10, 11, 12}));
  ASSERT_EQ(b.columns().size(), 2u);
  EXPECT_EQ(b.columns()[0].name, "cls");
  EXPECT_EQ(b.columns()[1].name, "jpg");

  const Column* cls = b.field("cls");
  ASSERT_NE(cls, nullptr);
  EXPECT_EQ(cls->offsets, (std::vector<uint64_t>{0, 1, 2, 3}));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(cls->data()), cls->bytes()), "123");
  EXPECT_EQ(cls->fixed_size(), 1) << "a [3, 1] tensor without a copy";
  EXPECT_EQ(cls->present, (std::vector<bool>{true, true, true}));

  const Column* jpg = b.field("jpg");
  ASSERT_NE(jpg, nullptr);
  EXPECT_EQ(jpg->offsets, (std::vector<uint64_t>{0, 4, 4, 13}));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(jpg->data()), jpg->bytes()), "aaaabbbbbbbbb");
  EXPECT_EQ(jpg->value(1), "");
  EXPECT_EQ(jpg->value(2), "bbbbbbbbb");
  EXPECT_EQ(jpg->fixed_size(), -1);
  EXPECT_EQ(jpg->present, (std::vector<bool>{true, true, true})) << "empty is not missing";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(jpg->data()) % 4096, 0u);
  EXPECT_EQ(b.payload_bytes(), 16u);
  EXPECT_EQ(b.field("png"), nullptr);
}

TEST(BuildBatch, MissingFieldsAreEmptyEntriesThatAreNotPresent) {
  auto pool = BufferPool::create();
  std::vector<Item> items = {make_item(0, "a", {{"cls", "1"}, {"jpg", "xx"}}),
                             make_item(1, "b", {{"cls", "2"}}),
                             make_item(2, "c", {{"json", "{}"}, {"jpg", "yy"}})};
  Batch b = build_batch(items, 0, 0, 0, *pool).value();
  ASSERT_EQ(b.columns().size(), 3u);
  EXPECT_EQ(b.columns()[0].name, "cls");
  EXPECT_EQ(b.columns()[1].name, "jpg");
  EXPECT_EQ(b.columns()[2].name, "json");

  const Column* jpg = b.field("jpg");
  EXPECT_EQ(jpg->present, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(jpg->offsets, (std::vector<uint64_t>{0, 2, 2, 4}));
  EXPECT_EQ(jpg->value(0), "xx");
  EXPECT_EQ(jpg->value(2), "yy");
  EXPECT_EQ(jpg->fixed_size(), -1) << "sizes agree but an item lacks the field";

  const Column* cls = b.field("cls");
  EXPECT_EQ(cls->present, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(cls->offsets, (std::vector<uint64_t>{0, 1, 2, 2}));
  const Column* json = b.field("json");
  EXPECT_EQ(json->present, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(json->value(2), "{}");
}

TEST(BuildBatch, SameFieldNamesInADifferentSetStillLineUp) {
  // Same number of fields but different names: the uniform fast path must not apply.
  auto pool = BufferPool::create();
  std::vector<Item> items = {make_item(0, "a", {{"cls", "1"}, {"jpg", "AA"}}),
                             make_item(1, "b", {{"cls", "2"}, {"png", "BBB"}})};
  Batch b = build_batch(items, 0, 0, 0, *pool).value();
  ASSERT_EQ(b.columns().size(), 3u);
  EXPECT_EQ(b.field("jpg")->present, (std::vector<bool>{true, false}));
  EXPECT_EQ(b.field("png")->present, (std::vector<bool>{false, true}));
  EXPECT_EQ(b.field("png")->value(1), "BBB");
  EXPECT_EQ(b.field("cls")->fixed_size(), 1);
}

TEST(BuildBatch, EmptyItemListGivesAnEmptyBatch) {
  auto pool = BufferPool::create();
  std::vector<Item> items;
  Batch b = build_batch(items, 1, 2, 3, *pool).value();
  EXPECT_EQ(b.size(), 0u);
  EXPECT_TRUE(b.columns().empty());
  EXPECT_EQ(b.payload_bytes(), 0u);
}

TEST(BuildBatch, ColumnBuffersGoBackToThePool) {
  auto pool = BufferPool::create();
  {
    std::vector<Item> items = {make_item(0, "a", {{"bin", std::string(10000, 'x')}})};
    Batch b = build_batch(items, 0, 0, 0, *pool).value();
    EXPECT_EQ(b.field("bin")->fixed_size(), 10000);
    EXPECT_EQ(pool->cached_bytes(), 0u);
  }
  EXPECT_GE(pool->cached_bytes(), 10000u);
}

TEST(BuildBatch, CopiesOfABatchShareItsDeviceAttachmentUntilTheLastIsGone) {
  struct Attachment : BatchAttachment {
    explicit Attachment(int* alive) : alive(alive) { ++*alive; }
    ~Attachment() override { --*alive; }
    int* alive;
  };
  auto pool = BufferPool::create();
  std::vector<Item> items;
  items.push_back(make_item(1, "k", {{"x", "abc"}}));
  Batch b = build_batch(items, 0, 0, 0, *pool).value();
  EXPECT_EQ(b.device(), nullptr);
  int alive = 0;
  b.set_device(std::make_shared<Attachment>(&alive));
  {
    Batch copy = b;
    EXPECT_EQ(copy.device(), b.device());
    b = Batch();
    EXPECT_EQ(alive, 1);
  }
  EXPECT_EQ(alive, 0);
}

// A "file" in memory, read through the FileReader interface; counts the reads.
class StringReader : public FileReader {
 public:
  explicit StringReader(std::string bytes) : bytes_(std::move(bytes)) {}
  Status read(uint64_t offset, uint8_t* dst, size_t n) const override {
    ++reads;
    if (offset > bytes_.size() || n > bytes_.size() - offset)
      return corrupt("test file: cut short at byte " + std::to_string(bytes_.size()));
    std::memcpy(dst, bytes_.data() + offset, n);
    return Status::ok();
  }
  mutable int reads = 0;

 private:
  std::string bytes_;
};

// An item whose field "bin" is unread: bytes [offset, offset + size) of `reader`'s file,
// and whose field "cls" is in memory.
Item unread_item(uint64_t id, std::string key, std::shared_ptr<const FileReader> reader,
                 uint64_t offset, size_t size) {
  Item it = make_item(id, std::move(key), {{"cls", std::to_string(id)}});
  FileBytes file;
  file.reader = std::move(reader);
  file.source = 3;
  it.owner = file_bytes_owner(std::move(file));
  it.fields.insert(it.fields.begin(), Field{"bin", nullptr, size, offset});
  return it;
}

TEST(BuildBatch, ReadsUnreadFieldsFromTheirFileIntoTheColumn) {
  std::string file;
  for (int i = 0; i < 5000; ++i) file += static_cast<char>('a' + i % 26);
  auto reader = std::make_shared<StringReader>(file);
  auto pool = BufferPool::create();
  std::vector<Item> items;
  items.push_back(unread_item(0, "k0", reader, 100, 1000));
  items.push_back(unread_item(1, "k1", reader, 3000, 2000));
  ASSERT_TRUE(items[0].fields[0].unread());
  EXPECT_EQ(unread_reader(items[0]), reader.get());
  EXPECT_EQ(items[0].payload_bytes(), 1001u);
  Batch b = build_batch(items, 0, 0, 0, *pool).value();
  ASSERT_NE(b.field("bin"), nullptr);
  EXPECT_EQ(b.field("bin")->value(0), file.substr(100, 1000));
  EXPECT_EQ(b.field("bin")->value(1), file.substr(3000, 2000));
  EXPECT_EQ(b.field("cls")->value(1), "1");
  EXPECT_EQ(reader->reads, 2);
}

TEST(BuildBatch, AnUnreadFieldThatCannotBeReadFailsTheBatchNamingTheItem) {
  auto reader = std::make_shared<StringReader>(std::string(100, 'x'));
  auto pool = BufferPool::create();
  std::vector<Item> items;
  items.push_back(unread_item(0, "good", reader, 0, 50));
  items.push_back(unread_item(1, "cut", reader, 80, 50));
  auto b = build_batch(items, 0, 0, 0, *pool);
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(b.status().message().find("item 'cut', field 'bin'"), std::string::npos)
      << b.status().message();
  EXPECT_NE(b.status().message().find("cut short"), std::string::npos);

  // An item whose owner has no reader cannot have unread fields.
  std::vector<Item> orphan;
  orphan.push_back(make_item(2, "orphan", {}));
  orphan[0].fields.push_back(Field{"bin", nullptr, 10, 0});
  auto c = build_batch(orphan, 0, 0, 0, *pool);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("'orphan'"), std::string::npos) << c.status().message();
}

// StringReader for several threads at once.
class SharedStringReader : public FileReader {
 public:
  explicit SharedStringReader(std::string bytes) : bytes_(std::move(bytes)) {}
  Status read(uint64_t offset, uint8_t* dst, size_t n) const override {
    reads.fetch_add(1);
    if (offset > bytes_.size() || n > bytes_.size() - offset)
      return corrupt("test file: cut short at byte " + std::to_string(bytes_.size()));
    std::memcpy(dst, bytes_.data() + offset, n);
    return Status::ok();
  }
  mutable std::atomic<int> reads{0};

 private:
  std::string bytes_;
};

void expect_same_batch(const Batch& got, const Batch& want) {
  EXPECT_EQ(got.epoch(), want.epoch());
  EXPECT_EQ(got.step(), want.step());
  EXPECT_EQ(got.rank(), want.rank());
  EXPECT_EQ(got.keys(), want.keys());
  EXPECT_EQ(got.item_ids(), want.item_ids());
  ASSERT_EQ(got.columns().size(), want.columns().size());
  for (size_t k = 0; k < want.columns().size(); ++k) {
    const Column& g = got.columns()[k];
    const Column& w = want.columns()[k];
    EXPECT_EQ(g.name, w.name);
    EXPECT_EQ(g.offsets, w.offsets);
    EXPECT_EQ(g.present, w.present);
    EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(g.data()), g.bytes()),
              std::string_view(reinterpret_cast<const char*>(w.data()), w.bytes()))
        << g.name;
  }
}

// Items [0, n): unread "bin" fields of various sizes, "cls" in memory, and, when `ragged`,
// a "json" field on every third item only.
std::vector<Item> mixed_items(const std::shared_ptr<const FileReader>& reader, size_t n,
                              bool ragged) {
  std::vector<Item> items;
  for (size_t i = 0; i < n; ++i) {
    items.push_back(unread_item(i, "k" + std::to_string(i), reader, 37 * i, 100 + 13 * i));
    if (ragged && i % 3 == 0) items.back().set_field("json", "{" + std::to_string(i) + "}");
  }
  return items;
}

TEST(BatchBuilder, PiecesFilledOnTwoThreadsMakeWhatBuildBatchMakes) {
  std::string file;
  for (int i = 0; i < 20000; ++i) file += static_cast<char>('a' + (i * 7) % 26);
  auto reader = std::make_shared<SharedStringReader>(file);
  auto pool = BufferPool::create();
  for (bool ragged : {false, true}) {
    SCOPED_TRACE(ragged ? "ragged" : "uniform");
    std::vector<Item> once = mixed_items(reader, 41, ragged);
    std::vector<Item> parts = mixed_items(reader, 41, ragged);
    Batch want = build_batch(once, 3, 9, 1, *pool).value();
    BatchBuilder builder(parts, 3, 9, 1, *pool);
    ASSERT_EQ(builder.size(), 41u);
    // Pieces of 3 items, taken in turn by two threads.
    std::atomic<size_t> next{0};
    std::atomic<int> failures{0};
    auto work = [&] {
      for (size_t at; (at = next.fetch_add(3)) < builder.size();)
        if (!builder.fill(at, std::min(builder.size(), at + 3)).is_ok()) failures.fetch_add(1);
    };
    std::thread other(work);
    work();
    other.join();
    EXPECT_EQ(failures.load(), 0);
    expect_same_batch(builder.finish(), want);
    EXPECT_TRUE(parts[5].key.empty()) << "finish() moves the keys out of the items";
  }
}

TEST(BatchBuilder, APieceThatCannotBeReadFailsAloneNamingItsItem) {
  auto reader = std::make_shared<SharedStringReader>(std::string(1000, 'x'));
  auto pool = BufferPool::create();
  std::vector<Item> items;
  for (int i = 0; i < 6; ++i)
    items.push_back(unread_item(i, "k" + std::to_string(i), reader, i == 4 ? 990 : 100 * i, 50));
  BatchBuilder builder(items, 0, 0, 0, *pool);
  EXPECT_TRUE(builder.fill(0, 3).is_ok());
  Status bad = builder.fill(3, 6);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("item 'k4', field 'bin'"), std::string::npos) << bad.message();
  // A range past the end fills nothing.
  EXPECT_TRUE(builder.fill(6, 9).is_ok());
}

TEST(Item, ReplacingAnUnreadFieldMakesItRead) {
  static const uint8_t bytes[] = {9, 8, 7};
  Item it;
  it.fields.push_back(Field{"bin", nullptr, 1000, 4096});
  ASSERT_TRUE(it.field("bin")->unread());
  it.set_field_view("bin", bytes, 3);
  EXPECT_FALSE(it.field("bin")->unread());
  EXPECT_EQ(it.field("bin")->file_offset, 0u);
  EXPECT_EQ(unread_reader(it), nullptr);
}

}  // namespace
}  // namespace shardyard
