// File systems for objects behind HTTP(S) and S3-compatible servers, on libcurl.
//
// Both implement FileSystem (file_system.h): stat is a HEAD, open is a HEAD that returns a
// RandomAccessFile whose read_at is a ranged GET, wrapped in a ReadAheadFile
// (read_ahead.h) so that a worker's small sequential reads become a few large GETs with
// the next block fetched in the background. Transfers retry and resume, and end within a
// deadline (http_client.h). An object whose server ignores Range (answers a ranged GET with
// the whole object) is noticed at its first read and read once, in order, through a spool
// (object_spool.h) shared by every file open on it.
//
// HTTP(S): a uri is the URL itself (redirects are followed). list() is not supported:
// name the shards with a brace pattern.
// S3: "s3://BUCKET/KEY". Without an endpoint the request goes to AWS
// (https://BUCKET.s3.REGION.amazonaws.com/KEY); with S3Config::endpoint_url to
// ENDPOINT/BUCKET/KEY (path-style, as MinIO, Ceph, s3rver and most other S3-compatible
// servers want). Requests are signed with SigV4 (sigv4.h) when there are credentials, and
// anonymous otherwise. list("s3://BUCKET/PREFIX/") is ListObjectsV2 with pagination.
//
// Thread-safe: the file systems are immutable after construction; each thread's transfers
// use that thread's own curl handle.
#pragma once

#include <memory>
#include <string>

#include "io/fs/file_system.h"
#include "io/remote/http_client.h"
#include "io/remote/object_spool.h"
#include "io/remote/read_ahead.h"
#include "io/remote/sigv4.h"

namespace shardyard::io {

struct RemoteOptions {
  HttpOptions http;
  ReadAheadOptions read_ahead;
  SpoolOptions spool;
  // All from their SHARDYARD_HTTP_* variables (docs/remote-sources.md).
  static Result<RemoteOptions> from_env();
};

std::unique_ptr<FileSystem> http_file_system(const RemoteOptions& options);
// The process's file system for user-given sources (a singleton): "http://", "https://"
// and "s3://" uris go to the remote file systems (configured from the environment on first
// use), everything else to local_file_system().
FileSystem& default_file_system();
std::unique_ptr<FileSystem> s3_file_system(const S3Config& config, const RemoteOptions& options);

// The request URL of "s3://bucket/key" (key URI-encoded, slashes kept), and of a
// ListObjectsV2 page. kInvalidArgument for a uri that names no bucket.
Result<std::string> s3_object_url(const S3Config& config, const std::string& s3_uri);
Result<std::string> s3_list_url(const S3Config& config, const std::string& bucket,
                                const std::string& prefix, const std::string& continuation);

}  // namespace shardyard::io
