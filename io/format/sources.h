// Turning what a user typed (--source) into a list of sources.
//
// Brace patterns as in WebDataset: "train-{000000..000127}.tar" (a numeric range whose
// width is kept when the start has leading zeros) and "{a,b,c}" lists; several braces
// expand as a product, left to right. A directory expands to the tar shards inside it
// (sorted); a directory without tar shards is one source of sample files. Nothing is
// opened here except to tell files from directories. Remote uris (http://, https://,
// s3://) cost no request: they are taken as named, except a uri ending in '/', which is
// listed (s3://bucket/prefix/) for its tar shards.
//
// Thread-safe (pure functions, plus stat calls on the given FileSystem).
#pragma once

#include <string>
#include <vector>

#include "io/fs/file_system.h"
#include "runtime/manifest.h"

namespace shardyard::io {

Result<std::vector<std::string>> expand_braces(const std::string& pattern);

struct SourceRef {
  std::string uri;
  SourceKind kind = SourceKind::kTar;
};

// Kind from the name: ".tar.gz"/".tgz" compressed, a directory is a directory, else tar.
SourceKind kind_from_name(const std::string& uri);

Result<std::vector<SourceRef>> resolve_sources(FileSystem& fs,
                                               const std::vector<std::string>& patterns);

}  // namespace shardyard::io
