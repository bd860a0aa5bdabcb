#include "dump_keys.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace shardyard::tools {

std::string escape_key(std::string_view key) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          out += "\\x";
          out += hex[u >> 4];
          out += hex[u & 15];
        } else {
          out += c;
        }
    }
  }
  return out;
}

Status prepare_dump_dir(const std::string& dir, uint32_t ranks) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create --dump-keys directory " + dir + ": " + ec.message());
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // rank-<digits>.tsv only: other files in the folder are not ours.
    if (name.size() <= 9 || name.rfind("rank-", 0) != 0 ||
        name.compare(name.size() - 4, 4, ".tsv") != 0)
      continue;
    const std::string digits = name.substr(5, name.size() - 9);
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::stoul(digits) < ranks) continue;  // this run truncates it
    std::error_code rm;
    if (!fs::remove(it->path(), rm) && rm)
      return io_error("cannot remove " + it->path().string() +
                      " (of an earlier run with more "
                      "ranks): " +
                      rm.message());
  }
  if (ec) return io_error("cannot list --dump-keys directory " + dir + ": " + ec.message());
  return Status::ok();
}

DumpWriter::~DumpWriter() { (void)close(); }

Status DumpWriter::open(const std::string& dir, uint32_t rank) {
  path_ = dir + "/rank-" + std::to_string(rank) + ".tsv";
  file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr) return io_error("cannot write " + path_ + ": " + std::strerror(errno));
  return Status::ok();
}

Status DumpWriter::add(const Batch& b) {
  if (file_ == nullptr) return Status::ok();
  lines_.clear();
  const std::string prefix = std::to_string(b.epoch()) + '\t' + std::to_string(b.step()) + '\t';
  for (size_t i = 0; i < b.size(); ++i) {
    uint64_t bytes = 0;
    for (const auto& col : b.columns()) {  // columns are sorted by field name
      auto v = col.value(i);
      bytes += v.size();
      sha_.add(v);
    }
    lines_ += prefix;
    lines_ += escape_key(b.keys()[i]);
    lines_ += '\t' + std::to_string(bytes) + '\t' + sha_.hex16() + '\n';
  }
  if (std::fwrite(lines_.data(), 1, lines_.size(), file_) != lines_.size() ||
      std::fflush(file_) != 0)
    return io_error("cannot write " + path_ + ": " + std::strerror(errno));
  return Status::ok();
}

Status DumpWriter::close() {
  if (file_ == nullptr) return Status::ok();
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) return io_error("cannot write " + path_ + ": " + std::strerror(errno));
  return Status::ok();
}

}  // namespace shardyard::tools
