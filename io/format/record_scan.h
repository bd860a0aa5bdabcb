// Building the manifest of a windows dataset: raw record files cut into windows.
//
// Each source is a file of fixed-size records (WindowSpec::record_bytes each). The manifest
// lists the sources in the order given (patterns expanded in place, a directory or an
// "s3://bucket/prefix/" listed in sorted order) with their record and window counts; the
// windows themselves are implicit (runtime/window.h). Only stat calls are made (a HEAD per
// remote object, in parallel), nothing is read, and the result is never cached: it costs
// less than reading a cache would.
//
// Errors name the file: a size that is not a multiple of record_bytes (size and
// remainder), an empty file, a source shorter than a window's span without stitch, a source
// that yields no window, a bad WindowSpec (length, stride or record_bytes 0).
//
// Thread-safe: a function; it uses its own threads and joins them.
#pragma once

#include <string>
#include <vector>

#include "io/fs/file_system.h"
#include "runtime/manifest.h"
#include "runtime/window.h"

namespace shardyard::io {

// `threads`: stat calls in parallel (remote sources get at least 32).
Result<Manifest> build_record_manifest(FileSystem& fs, const std::vector<std::string>& sources,
                                       const WindowSpec& spec, unsigned threads = 2);

// The record files that `patterns` name, in order: braces expanded, directories listed.
Result<std::vector<std::string>> resolve_record_sources(FileSystem& fs,
                                                        const std::vector<std::string>& patterns);

}  // namespace shardyard::io
