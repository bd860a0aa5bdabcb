#include "io/remote/remote_file_system.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "io/remote/s3_listing.h"

namespace shardyard::io {

namespace {

// "s3://bucket/key" -> {bucket, key}.
Status split_s3_uri(const std::string& uri, std::string* bucket, std::string* key) {
  if (uri.compare(0, 5, "s3://") != 0 && uri.compare(0, 5, "S3://") != 0)
    return invalid_argument(uri + ": not an s3:// uri");
  std::string rest = uri.substr(5);
  auto slash = rest.find('/');
  *bucket = rest.substr(0, slash);
  *key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (bucket->empty()) return invalid_argument(uri + ": names no bucket (s3://BUCKET/KEY)");
  return Status::ok();
}

std::string bucket_base(const S3Config& c, const std::string& bucket) {
  if (!c.endpoint_url.empty()) return c.endpoint_url + "/" + uri_encode(bucket, false);
  return "https://" + bucket + ".s3." + c.region + ".amazonaws.com";
}

class S3Signer : public RequestSigner {
 public:
  explicit S3Signer(S3Config c) : c_(std::move(c)) {}
  std::vector<std::string> headers(const std::string& method, const Url& url,
                                   const std::string& range) const override {
    if (c_.credentials.empty()) return {};
    SigningRequest req;
    req.method = method;
    req.host = url.host;
    const bool default_port = url.port == 0 || (url.scheme == "http" && url.port == 80) ||
                              (url.scheme == "https" && url.port == 443);
    if (!default_port) req.host += ":" + std::to_string(url.port);
    req.encoded_path = url.path;
    req.query = url.query;
    if (!range.empty()) req.headers.emplace_back("range", range);
    req.payload_sha256 = kEmptyPayloadSha256;
    return sign_request(req, c_.credentials, c_.region, "s3", amz_date_now()).headers;
  }

 private:
  S3Config c_;
};

// Where uris go: the URL of an object, the signer of its requests, and listings.
class Endpoint {
 public:
  virtual ~Endpoint() = default;
  virtual Result<std::string> object_url(const std::string& uri) const = 0;
  virtual const RequestSigner* signer() const { return nullptr; }
  virtual Result<std::vector<std::string>> list(const HttpClient& client,
                                                const std::string& dir_uri) const {
    (void)client;
    return invalid_argument(redact_url(dir_uri) +
                            ": cannot list an HTTP folder; name the shards with a brace "
                            "pattern such as shard-{000000..000127}.tar");
  }
};

class HttpEndpoint : public Endpoint {
 public:
  Result<std::string> object_url(const std::string& uri) const override {
    if (!parse_url(uri)) return invalid_argument(redact_url(uri) + ": not a valid URL");
    return uri;
  }
};

class S3Endpoint : public Endpoint {
 public:
  explicit S3Endpoint(S3Config c) : c_(c), signer_(std::move(c)) {}
  Result<std::string> object_url(const std::string& uri) const override {
    return s3_object_url(c_, uri);
  }
  const RequestSigner* signer() const override { return &signer_; }
  Result<std::vector<std::string>> list(const HttpClient& client,
                                        const std::string& dir_uri) const override {
    std::string bucket, prefix;
    SY_RETURN_IF_ERROR(split_s3_uri(dir_uri, &bucket, &prefix));
    if (!prefix.empty() && prefix.back() != '/') prefix += '/';
    std::vector<std::string> out;
    std::string token;
    for (int page = 0;; ++page) {
      SY_ASSIGN_OR_RETURN(auto url, s3_list_url(c_, bucket, prefix, token));
      SY_ASSIGN_OR_RETURN(auto body, client.get_body(url, &signer_));
      auto listing = parse_list_objects_v2(body);
      if (!listing.is_ok())
        return Status(listing.status().code(), "listing " + dir_uri + " (page " +
                                                   std::to_string(page + 1) +
                                                   "): " + listing.status().message());
      for (const auto& o : listing->objects)
        if (o.key.size() > prefix.size() && o.key.compare(0, prefix.size(), prefix) == 0 &&
            o.key.back() != '/')
          out.push_back(o.key.substr(prefix.size()));
      if (!listing->truncated) break;
      token = listing->next_token;
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  S3Config c_;
  S3Signer signer_;
};

std::string server_of(const std::string& url) {
  auto u = parse_url(url);
  if (!u) return url;
  return u->scheme + "://" + u->host + ":" + std::to_string(u->port);
}

// A remote object of a known size and version: its HEAD's at open, or a manifest's
// (open_known: `confirmed` false). Every read asks for that size, and every answer's ETag
// and Last-Modified must name that version. Reads are ranged GETs until the server ignores
// Range; from then on they come from the object's spool, which a HEAD vouches for first
// where no answer has.
class RemoteFile : public RandomAccessFile {
 public:
  RemoteFile(std::shared_ptr<const HttpClient> client, std::shared_ptr<const Endpoint> endpoint,
             std::shared_ptr<SpoolCache> spools, std::string uri, std::string url, uint64_t size,
             int64_t version, bool confirmed)
      : client_(std::move(client)),
        endpoint_(std::move(endpoint)),
        spools_(std::move(spools)),
        uri_(redact_url(uri)),  // for messages only: reads use url_
        url_(std::move(url)),
        server_(server_of(url_)),
        size_(size),
        version_(version),
        confirmed_(confirmed) {}
  Result<size_t> read_at(uint64_t offset, void* dst, size_t n) override {
    std::shared_ptr<ObjectSpool> spool;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!gave_up_.is_ok()) return gave_up_;
      spool = spool_;
    }
    if (spool) return spool->read_at(offset, dst, n);
    if (spools_->server_ignores_range(server_) || spools_->find(spool_key())) {
      SY_RETURN_IF_ERROR(settle(false));
      SY_ASSIGN_OR_RETURN(spool, spool_of_object());
      return spool->read_at(offset, dst, n);
    }
    bool range_ignored = false;
    int64_t answered = 0;
    auto r = client_->get_range(url_, endpoint_->signer(), offset, dst, n,
                                static_cast<int64_t>(size_), &range_ignored, &answered);
    if (r.is_ok()) {
      Status same = check_answer(answered);
      if (same.is_ok() && range_ignored) same = settle(false);
      if (!same.is_ok()) r = same;
    }
    if (!r.is_ok()) {
      // Retries and the deadline are spent: the next read of this object would only spend
      // them again (a scan that probes a file and then reads it would wait twice).
      if (r.status().code() == StatusCode::kUnavailable) {
        std::lock_guard<std::mutex> lock(mu_);
        gave_up_ = r.status();
      }
      return r.status();
    }
    const size_t got = *r;
    if (!range_ignored) return got;
    spools_->mark_server(server_);
    SY_ASSIGN_OR_RETURN(spool, spool_of_object());
    SY_ASSIGN_OR_RETURN(size_t rest,
                        spool->read_at(offset + got, static_cast<char*>(dst) + got, n - got));
    return got + rest;
  }
  uint64_t size() const override { return size_; }
  const std::string& uri() const override { return uri_; }
  int64_t version() const override { return version_; }

 private:
  // The version an answer's ETag and Last-Modified name (0: it sent neither) against this
  // file's. Another one (or none, where this file has one) means the object changed, or
  // that this server's GETs carry other validators than its HEADs (a proxy or a CDN may):
  // a HEAD settles which.
  Status check_answer(int64_t answered) {
    if (version_ == 0) return Status::ok();  // nothing to compare: sizes only
    if (answered == version_) {
      confirmed_.store(true, std::memory_order_relaxed);
      return Status::ok();
    }
    if (!compare_answers_.load(std::memory_order_relaxed)) return Status::ok();
    return settle(true);
  }

  // A HEAD: when it names another size or version than this file's, the object changed
  // (kCorrupt). When it names this file's, the file is confirmed, and after an answer that
  // named another version (`answers_differ`) this server's GETs are not compared again for
  // this file (the size each answer gives still is).
  Status settle(bool answers_differ) {
    auto settled = [&] {
      return answers_differ ? !compare_answers_.load(std::memory_order_relaxed)
                            : confirmed_.load(std::memory_order_relaxed);
    };
    if (settled()) return Status::ok();
    std::lock_guard<std::mutex> lock(check_mu_);
    if (settled()) return Status::ok();
    SY_ASSIGN_OR_RETURN(auto now, client_->head(url_, endpoint_->signer()));
    const int64_t stamp = remote_version_stamp(now.last_modified_ns, now.etag);
    if (now.size != size_ || (version_ != 0 && stamp != version_))
      return corrupt(uri_ + ": the object changed (" +
                     (now.size != size_ ? "it is now " + std::to_string(now.size) + " bytes, was " +
                                              std::to_string(size_)
                                        : std::string("its ETag or Last-Modified differs")) +
                     "); rebuild the manifest");
    confirmed_.store(true, std::memory_order_relaxed);
    if (answers_differ) compare_answers_.store(false, std::memory_order_relaxed);
    return Status::ok();
  }

  // The server ignores Range: the whole object, once, for every file open on it.
  std::string spool_key() const {
    return url_ + "\n" + std::to_string(size_) + "\n" + std::to_string(version_);
  }

  Result<std::shared_ptr<ObjectSpool>> spool_of_object() {
    const std::string key = spool_key();
    auto client = client_;
    auto endpoint = endpoint_;
    const std::string url = url_;
    const uint64_t size = size_;
    const std::string uri = uri_;
    SY_ASSIGN_OR_RETURN(auto spool, spools_->get(key, [&](const std::string& dir) {
      auto download = [client, endpoint, url, size](const std::atomic<bool>& stop,
                                                    const BodySink& sink) {
        return client->get_stream(url, endpoint->signer(), 0, size, static_cast<int64_t>(size),
                                  stop, sink);
      };
      return ObjectSpool::start(uri, size, download, client->options(), dir);
    }));
    std::lock_guard<std::mutex> lock(mu_);
    spool_ = spool;
    return spool;
  }

  std::shared_ptr<const HttpClient> client_;
  std::shared_ptr<const Endpoint> endpoint_;
  std::shared_ptr<SpoolCache> spools_;
  std::string uri_, url_;
  std::string server_;  // scheme://host:port of url_
  const uint64_t size_;
  const int64_t version_;        // remote_version_stamp; 0: unknown, answers are not compared
  std::atomic<bool> confirmed_;  // a HEAD or an answer named size_ and version_
  std::atomic<bool> compare_answers_{true};  // cleared once a HEAD vouched for other validators
  std::mutex check_mu_;                      // one HEAD at a time settles
  std::mutex mu_;
  std::shared_ptr<ObjectSpool> spool_;  // guarded by mu_: set once Range is found ignored
  Status gave_up_;                      // guarded by mu_: a read that ran out of time or tries
};

class RemoteFileSystem : public FileSystem {
 public:
  RemoteFileSystem(std::shared_ptr<const Endpoint> endpoint, const RemoteOptions& o)
      : client_(std::make_shared<HttpClient>(o.http)),
        endpoint_(std::move(endpoint)),
        spools_(std::make_shared<SpoolCache>(o.spool)),
        read_ahead_(o.read_ahead) {}

  Result<FileInfo> stat(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto url, endpoint_->object_url(uri));
    SY_ASSIGN_OR_RETURN(auto info, client_->head(url, endpoint_->signer()));
    FileInfo f;
    f.uri = uri;
    f.size = info.size;
    f.mtime_ns = remote_version_stamp(info.last_modified_ns, info.etag);
    return f;
  }

  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto url, endpoint_->object_url(uri));
    SY_ASSIGN_OR_RETURN(auto info, client_->head(url, endpoint_->signer()));
    auto raw =
        std::make_shared<RemoteFile>(client_, endpoint_, spools_, uri, url, info.size,
                                     remote_version_stamp(info.last_modified_ns, info.etag), true);
    return read_ahead_file(std::move(raw), read_ahead_);
  }

  // No HEAD: the size and version are the caller's, and the GETs' answers are checked
  // against them (RemoteFile::check_answer).
  Result<std::unique_ptr<RandomAccessFile>> open_known(const FileInfo& known) override {
    SY_ASSIGN_OR_RETURN(auto url, endpoint_->object_url(known.uri));
    auto raw = std::make_shared<RemoteFile>(client_, endpoint_, spools_, known.uri, url, known.size,
                                            known.mtime_ns, false);
    return read_ahead_file(std::move(raw), read_ahead_);
  }

  Result<std::vector<std::string>> list(const std::string& dir_uri) override {
    return endpoint_->list(*client_, dir_uri);
  }

 private:
  std::shared_ptr<const HttpClient> client_;
  std::shared_ptr<const Endpoint> endpoint_;
  std::shared_ptr<SpoolCache> spools_;
  ReadAheadOptions read_ahead_;
};

// Routes by scheme; the remote file systems are made on first use, from the environment.
class RoutingFileSystem : public FileSystem {
 public:
  Result<FileInfo> stat(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto* fs, pick(uri));
    return fs->stat(uri);
  }
  Result<std::unique_ptr<RandomAccessFile>> open(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto* fs, pick(uri));
    return fs->open(uri);
  }
  Result<std::unique_ptr<RandomAccessFile>> open_known(const FileInfo& known) override {
    SY_ASSIGN_OR_RETURN(auto* fs, pick(known.uri));
    return fs->open_known(known);
  }
  Result<std::vector<std::string>> list(const std::string& dir_uri) override {
    SY_ASSIGN_OR_RETURN(auto* fs, pick(dir_uri));
    return fs->list(dir_uri);
  }
  // Writes go where the uri points: local paths write, remote ones refuse (they only read).
  Result<std::unique_ptr<WritableFile>> new_writable_file(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto* fs, pick(uri));
    return fs->new_writable_file(uri);
  }
  Status rename(const std::string& from, const std::string& to) override {
    SY_ASSIGN_OR_RETURN(auto* fs, pick(from));
    return fs->rename(from, to);
  }
  Status remove(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto* fs, pick(uri));
    return fs->remove(uri);
  }
  Status create_dir(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto* fs, pick(uri));
    return fs->create_dir(uri);
  }
  Status sync_dir(const std::string& uri) override {
    SY_ASSIGN_OR_RETURN(auto* fs, pick(uri));
    return fs->sync_dir(uri);
  }

 private:
  struct Lazy {
    std::once_flag once;
    std::unique_ptr<FileSystem> fs;
    Status error;
  };

  Result<FileSystem*> pick(const std::string& uri) {
    if (!is_remote_uri(uri)) return &local_file_system();
    const bool s3 = uri.compare(0, 5, "s3://") == 0 || uri.compare(0, 5, "S3://") == 0;
    Lazy& l = s3 ? s3_ : http_;
    std::call_once(l.once, [&] {
      auto options = RemoteOptions::from_env();
      if (!options.is_ok()) {
        l.error = options.status();
        return;
      }
      if (!s3) {
        l.fs = http_file_system(*options);
        return;
      }
      auto config = S3Config::from_env();
      if (!config.is_ok()) {
        l.error = config.status();
        return;
      }
      l.fs = s3_file_system(*config, *options);
    });
    if (!l.fs) return l.error;
    return l.fs.get();
  }

  Lazy http_, s3_;
};

}  // namespace

Result<RemoteOptions> RemoteOptions::from_env() {
  RemoteOptions o;
  SY_ASSIGN_OR_RETURN(o.http, HttpOptions::from_env());
  SY_ASSIGN_OR_RETURN(o.read_ahead, ReadAheadOptions::from_env());
  SY_ASSIGN_OR_RETURN(o.spool, SpoolOptions::from_env());
  return o;
}

std::unique_ptr<FileSystem> http_file_system(const RemoteOptions& options) {
  return std::make_unique<RemoteFileSystem>(std::make_shared<HttpEndpoint>(), options);
}

std::unique_ptr<FileSystem> s3_file_system(const S3Config& config, const RemoteOptions& options) {
  return std::make_unique<RemoteFileSystem>(std::make_shared<S3Endpoint>(config), options);
}

Result<std::string> s3_object_url(const S3Config& config, const std::string& s3_uri) {
  std::string bucket, key;
  SY_RETURN_IF_ERROR(split_s3_uri(s3_uri, &bucket, &key));
  if (key.empty()) return invalid_argument(s3_uri + ": names a bucket, not an object");
  return bucket_base(config, bucket) + "/" + uri_encode(key, true);
}

Result<std::string> s3_list_url(const S3Config& config, const std::string& bucket,
                                const std::string& prefix, const std::string& continuation) {
  if (bucket.empty()) return invalid_argument("an S3 listing needs a bucket");
  // Path-style lists the bucket's own path; virtual-hosted the root of the bucket's host.
  std::string url =
      bucket_base(config, bucket) + (config.endpoint_url.empty() ? "/" : "") + "?list-type=2";
  if (!continuation.empty()) url += "&continuation-token=" + uri_encode(continuation, false);
  if (!prefix.empty()) url += "&prefix=" + uri_encode(prefix, false);
  return url;
}

FileSystem& default_file_system() {
  static RoutingFileSystem fs;
  return fs;
}

}  // namespace shardyard::io
