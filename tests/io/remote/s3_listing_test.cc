// Tests of io/remote/s3_listing.h: ListObjectsV2 pages, S3 error bodies, XML entities.
#include "io/remote/s3_listing.h"

#include <gtest/gtest.h>

namespace shardyard::io {
namespace {

const char* kPage =
    R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>
<Prefix>d/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated>
<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
<Contents><Key>d/a&amp;b.tar</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified>
<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag><Size>434234</Size>
<StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>d/&#x4E2D;&#25991;.tar</Key><LastModified>2009-10-12T17:50:31Z</LastModified>
<ETag>"x"</ETag><Size>0</Size></Contents></ListBucketResult>)";

TEST(ListObjectsV2, ReadsObjectsAndTheContinuationToken) {
  auto r = parse_list_objects_v2(kPage);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->objects.size(), 2u);
  EXPECT_EQ(r->objects[0].key, "d/a&b.tar");
  EXPECT_EQ(r->objects[0].size, 434234u);
  EXPECT_EQ(r->objects[0].etag, "fba9dede5f27731c9771645a39863328");
  EXPECT_EQ(r->objects[0].last_modified_ns, int64_t{1255369830} * 1000000000);
  EXPECT_EQ(r->objects[1].key, "d/\xE4\xB8\xAD\xE6\x96\x87.tar");
  EXPECT_EQ(r->objects[1].size, 0u);
  EXPECT_TRUE(r->truncated);
  EXPECT_EQ(r->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST(ListObjectsV2, ALastPageAndAnEmptyListing) {
  auto last = parse_list_objects_v2(
      "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key><Size>1</Size>"
      "</Contents></ListBucketResult>");
  ASSERT_TRUE(last.is_ok());
  EXPECT_FALSE(last->truncated);
  EXPECT_EQ(last->objects.size(), 1u);
  auto empty = parse_list_objects_v2("<ListBucketResult><KeyCount>0</KeyCount></ListBucketResult>");
  ASSERT_TRUE(empty.is_ok());
  EXPECT_TRUE(empty->objects.empty());
}

TEST(ListObjectsV2, AKeyThatLooksLikeAFlagDoesNotFoolThePager) {
  auto r = parse_list_objects_v2(
      "<ListBucketResult><Contents><Key>&lt;IsTruncated&gt;true</Key><Size>1</Size>"
      "<Owner><IsTruncated>true</IsTruncated></Owner></Contents>"
      "<IsTruncated>false</IsTruncated></ListBucketResult>");
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->truncated);
  EXPECT_EQ(r->objects[0].key, "<IsTruncated>true");
}

TEST(ListObjectsV2, RejectsWhatItCannotRead) {
  for (const char* bad :
       {"", "<Error><Code>AccessDenied</Code></Error>",
        "<ListBucketResult><Contents><Key>k</Key><Size>1</Size>",
        "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k&bogus;</Key><Size>1</Size></Contents></"
        "ListBucketResult>",
        "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
        "<ListBucketResult><Contents><Key>k</Key><Size>1</Size><LastModified>x</LastModified>"
        "</Contents></ListBucketResult>"}) {
    auto r = parse_list_objects_v2(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  }
}

TEST(S3ErrorCode, ReadsTheCodeOfAnErrorBody) {
  EXPECT_EQ(s3_error_code("<?xml version=\"1.0\"?><Error><Code>SlowDown</Code>"
                          "<Message>Please reduce your request rate.</Message></Error>"),
            "SlowDown");
  EXPECT_EQ(s3_error_code("<Error><Message>no code</Message></Error>"), "");
  EXPECT_EQ(s3_error_code("not xml"), "");
}

TEST(XmlUnescape, DecodesEntitiesAndRejectsBadReferences) {
  std::string out;
  ASSERT_TRUE(xml_unescape("a&lt;b&gt;&amp;&quot;&apos;&#65;&#x263A;", &out));
  EXPECT_EQ(out, "a<b>&\"'A\xE2\x98\xBA");
  for (const char* bad :
       {"&", "&;", "&#;", "&#x;", "&#0;", "&#xD800;", "&#x110000;", "&nope;", "&#12a;", "&amp"})
    EXPECT_FALSE(xml_unescape(bad, &out)) << bad;
}

}  // namespace
}  // namespace shardyard::io
