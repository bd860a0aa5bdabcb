#include "io/persist/checkpoint_store.h"

#include <algorithm>
#include <cstdio>

#include "io/fs/file_system.h"

namespace shardyard::io {

namespace {

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

// The generation in a rank file's name ("rank-00003.g000007.ckpt": digits only), or 0.
uint64_t generation_of(const std::string& name) {
  auto digits = [&](size_t from, size_t to) {
    if (from >= to || to - from > 18) return false;
    for (size_t i = from; i < to; ++i)
      if (name[i] < '0' || name[i] > '9') return false;
    return true;
  };
  const std::string ext = ".ckpt";
  if (name.rfind("rank-", 0) != 0 || name.size() <= ext.size() ||
      name.compare(name.size() - ext.size(), ext.size(), ext) != 0)
    return 0;
  const size_t g = name.find(".g", 5), end = name.size() - ext.size();
  if (g == std::string::npos || !digits(5, g) || !digits(g + 2, end)) return 0;
  return std::stoull(name.substr(g + 2, end - g - 2));
}

// Removes rank files of generations below `below` other than `committed`, rank
// temporaries below `below` (the committed generation's too: its files are final), and
// CHECKPOINT's temporaries. A file that cannot be removed now goes later.
void remove_stale(FileSystem& fs, const std::string& dir, uint64_t committed, uint64_t below) {
  auto names = fs.list(dir);
  if (!names.is_ok()) return;  // the garbage goes the next time
  for (const auto& name : *names) {
    const size_t tmp = name.find(".tmp.");
    // A temporary is "<final name>.tmp.<pid>.<n>": judged by its final name.
    const std::string final_name = tmp == std::string::npos ? name : name.substr(0, tmp);
    const uint64_t gen = generation_of(final_name);
    const bool is_tmp = tmp != std::string::npos;
    const bool stale_rank = gen != 0 && gen < below && (is_tmp || gen != committed);
    const bool stale_manifest_tmp = is_tmp && final_name == kCheckpointManifestName;
    if (stale_rank || stale_manifest_tmp) (void)fs.remove(join(dir, name));
  }
}

}  // namespace

Status write_checkpoint_file(FileSystem& fs, const std::string& dir, const std::string& name,
                             std::string_view bytes) {
  SY_RETURN_IF_ERROR(fs.create_dir(dir));
  return write_file_atomic(fs, join(dir, name), bytes, /*sync_dir=*/true);
}

std::string rank_file_name(uint32_t rank, uint64_t generation) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "rank-%05u.g%06llu.ckpt", rank,
                static_cast<unsigned long long>(generation));
  return buf;
}

Result<uint64_t> next_generation(FileSystem& fs, const std::string& dir) {
  auto info = fs.stat(dir);
  if (!info.is_ok() && info.status().code() == StatusCode::kNotFound) return uint64_t{1};
  uint64_t top = 0;
  auto manifest = read_file(fs, join(dir, kCheckpointManifestName));
  if (manifest.is_ok()) {
    auto m = decode_checkpoint_manifest(*manifest, join(dir, kCheckpointManifestName));
    if (m.is_ok()) top = m->generation;
  }
  auto names = fs.list(dir);
  if (!names.is_ok())
    return io_error("cannot list checkpoint directory " + dir + ": " + names.status().message());
  for (const auto& name : *names) top = std::max(top, generation_of(name));
  return top + 1;
}

Status commit_checkpoint(FileSystem& fs, const std::string& dir,
                         const CheckpointManifest& manifest) {
  SY_RETURN_IF_ERROR(write_checkpoint_file(fs, dir, kCheckpointManifestName,
                                           encode_checkpoint_manifest(manifest)));
  // The commit is durable: what other generations and interrupted saves left is garbage.
  remove_stale(fs, dir, manifest.generation, UINT64_MAX);
  return Status::ok();
}

void remove_uncommitted(FileSystem& fs, const std::string& dir, uint64_t below) {
  uint64_t committed = 0;
  auto bytes = read_file(fs, join(dir, kCheckpointManifestName));
  if (bytes.is_ok()) {
    auto m = decode_checkpoint_manifest(*bytes, join(dir, kCheckpointManifestName));
    if (!m.is_ok()) return;  // not ours to judge: it may be of a newer format
    committed = m->generation;
  } else if (bytes.status().code() != StatusCode::kNotFound) {
    return;
  }
  remove_stale(fs, dir, committed, below);
}

Result<CheckpointFiles> read_checkpoint_files(FileSystem& fs, const std::string& dir) {
  auto info = fs.stat(dir);
  if (!info.is_ok() || !info->is_directory)
    return not_found(dir + ": no checkpoint here (not a directory)");
  const std::string manifest_path = join(dir, kCheckpointManifestName);
  CheckpointFiles files;
  auto bytes = read_file(fs, manifest_path);
  if (!bytes.is_ok()) {
    if (bytes.status().code() == StatusCode::kNotFound)
      return not_found(dir + ": no checkpoint here (no " + kCheckpointManifestName + " file)");
    return bytes.status();
  }
  files.manifest = std::move(bytes).value();
  SY_ASSIGN_OR_RETURN(auto manifest, decode_checkpoint_manifest(files.manifest, manifest_path));
  files.rank_files.resize(manifest.ranks.size());
  for (const auto& ref : manifest.ranks) {
    if (ref.rank >= files.rank_files.size())
      return corrupt(manifest_path + " names rank " + std::to_string(ref.rank) + " out of range");
    auto file = read_file(fs, join(dir, ref.name));
    if (!file.is_ok()) {
      if (file.status().code() == StatusCode::kNotFound)
        return not_found("checkpoint in " + dir + " is incomplete: the rank file of rank " +
                         std::to_string(ref.rank) + " (" + ref.name + ") is missing");
      return file.status();
    }
    files.rank_files[ref.rank] = std::move(file).value();
  }
  return files;
}

Result<Checkpoint> load_checkpoint(FileSystem& fs, const std::string& dir) {
  SY_ASSIGN_OR_RETURN(auto files, read_checkpoint_files(fs, dir));
  return decode_checkpoint(files.manifest, files.rank_files, dir);
}

}  // namespace shardyard::io
