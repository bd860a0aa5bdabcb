#include "runtime/pipeline.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

namespace shardyard {

namespace {
thread_local const WorkerInfo* t_worker = nullptr;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ','))
    if (!part.empty()) out.push_back(part);
  return out;
}

Result<std::string> require(const StageParams& p, const std::string& stage, const char* key) {
  auto it = p.find(key);
  if (it == p.end() || it->second.empty())
    return invalid_argument("stage '" + stage + "' needs the parameter '" + key + "'");
  return it->second;
}

class FieldListStage : public Stage {
 public:
  FieldListStage(std::vector<std::string> fields, bool keep)
      : fields_(std::move(fields)), keep_(keep) {}
  Status process(Item& item, StageContext&) override {
    auto listed = [&](const Field& f) {
      return std::find(fields_.begin(), fields_.end(), f.name) != fields_.end();
    };
    item.fields.erase(std::remove_if(item.fields.begin(), item.fields.end(),
                                     [&](const Field& f) { return listed(f) != keep_; }),
                      item.fields.end());
    return Status::ok();
  }

 private:
  std::vector<std::string> fields_;
  bool keep_;
};

class RenameStage : public Stage {
 public:
  RenameStage(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  Status process(Item& item, StageContext&) override {
    const Field* f = item.field(from_);
    if (f == nullptr) return Status::ok();
    Field moved = *f;  // views or names the same bytes (unread ones too) under the new name
    item.remove_field(from_);
    moved.name = to_;
    item.put_field(std::move(moved));
    return Status::ok();
  }

 private:
  std::string from_, to_;
};

// Numbers the items an instance sees: field `field` (default "seq") holds the decimal count
// of items before this one. Its state is the count, so a resumed run continues it; after a
// rescale the instance starts from the sum of the saved counts (the items all instances
// had seen). Run once per rank (Spec::once) it numbers the rank order.
class CountStage : public Stage {
 public:
  explicit CountStage(std::string field) : field_(std::move(field)) {}
  Status process(Item& item, StageContext&) override {
    item.set_field(field_, std::to_string(count_++));
    return Status::ok();
  }
  bool has_state() const override { return true; }
  std::string save_state() const override { return std::to_string(count_); }
  Status restore_state(const std::vector<std::string>& saved, bool) override {
    uint64_t total = 0;
    for (const auto& s : saved) {
      char* end = nullptr;
      unsigned long long v = std::strtoull(s.c_str(), &end, 10);
      if (s.empty() || s[0] < '0' || s[0] > '9' || *end != '\0')
        return corrupt("count stage: saved state '" + s + "'");
      total += v;
    }
    count_ = total;
    return Status::ok();
  }

 private:
  std::string field_;
  uint64_t count_ = 0;
};

// Sleeps `us` microseconds per item and changes nothing: a stand-in for a costly transform
// (decoding, augmentation) in benchmarks, demonstrations of the monitor, and tests that need
// a job that stays alive for a while.
class SleepStage : public Stage {
 public:
  explicit SleepStage(uint64_t us) : us_(us) {}
  Status process(Item&, StageContext&) override {
    std::this_thread::sleep_for(std::chrono::microseconds(us_));
    return Status::ok();
  }

 private:
  uint64_t us_;
};

class FnStage : public Stage {
 public:
  explicit FnStage(MapFn fn) : fn_(std::move(fn)) {}
  Status process(Item& item, StageContext& ctx) override { return fn_(item, ctx); }

 private:
  MapFn fn_;
};
}  // namespace

const WorkerInfo* current_worker() { return t_worker; }

ScopedWorkerInfo::ScopedWorkerInfo(const WorkerInfo* info) : previous_(t_worker) {
  t_worker = info;
}
ScopedWorkerInfo::~ScopedWorkerInfo() { t_worker = previous_; }

Spec& Spec::map(std::string type, StageParams params) {
  stages_.push_back(StageSpec{std::move(type), std::move(params), true});
  return *this;
}

Spec& Spec::once(std::string type, StageParams params) {
  stages_.push_back(StageSpec{std::move(type), std::move(params), false});
  return *this;
}

Spec& Spec::merge() {
  if (merge_at_ == 0) merge_at_ = stages_.size() + 1;
  return *this;
}

StageFactory map_stage(MapFn fn) {
  return [fn = std::move(fn)](const StageParams&) -> Result<std::unique_ptr<Stage>> {
    return std::unique_ptr<Stage>(new FnStage(fn));
  };
}

StageRegistry::StageRegistry() {
  factories_["select_fields"] = [](const StageParams& p) -> Result<std::unique_ptr<Stage>> {
    SY_ASSIGN_OR_RETURN(auto fields, require(p, "select_fields", "fields"));
    return std::unique_ptr<Stage>(new FieldListStage(split_list(fields), true));
  };
  factories_["drop_fields"] = [](const StageParams& p) -> Result<std::unique_ptr<Stage>> {
    SY_ASSIGN_OR_RETURN(auto fields, require(p, "drop_fields", "fields"));
    return std::unique_ptr<Stage>(new FieldListStage(split_list(fields), false));
  };
  factories_["count"] = [](const StageParams& p) -> Result<std::unique_ptr<Stage>> {
    auto it = p.find("field");
    return std::unique_ptr<Stage>(new CountStage(it == p.end() ? "seq" : it->second));
  };
  factories_["sleep"] = [](const StageParams& p) -> Result<std::unique_ptr<Stage>> {
    SY_ASSIGN_OR_RETURN(auto text, require(p, "sleep", "us"));
    char* end = nullptr;
    unsigned long long us = std::strtoull(text.c_str(), &end, 10);
    if (text[0] < '0' || text[0] > '9' || *end != '\0' || us > 60000000ull)
      return invalid_argument("stage 'sleep': us='" + text +
                              "' must be a number of microseconds up to 60000000");
    return std::unique_ptr<Stage>(new SleepStage(us));
  };
  factories_["rename_field"] = [](const StageParams& p) -> Result<std::unique_ptr<Stage>> {
    SY_ASSIGN_OR_RETURN(auto from, require(p, "rename_field", "from"));
    SY_ASSIGN_OR_RETURN(auto to, require(p, "rename_field", "to"));
    return std::unique_ptr<Stage>(new RenameStage(from, to));
  };
  blind_ = {"select_fields", "drop_fields", "count", "sleep", "rename_field"};
}

StageRegistry& StageRegistry::global() {
  static StageRegistry registry;
  return registry;
}

Status StageRegistry::add(const std::string& type, StageFactory factory, bool reads_bytes) {
  if (type.empty() || !factory) return invalid_argument("a stage type needs a name and a factory");
  std::lock_guard<std::mutex> lock(mu_);
  factories_[type] = std::move(factory);
  if (reads_bytes) {
    blind_.erase(type);
  } else {
    blind_.insert(type);
  }
  return Status::ok();
}

bool StageRegistry::reads_bytes(const std::string& type) const {
  std::lock_guard<std::mutex> lock(mu_);
  return blind_.count(type) == 0;
}

bool spec_reads_bytes(const Spec& spec) {
  for (const auto& s : spec.stages())
    if (StageRegistry::global().reads_bytes(s.type)) return true;
  return false;
}

bool StageRegistry::contains(const std::string& type) const {
  std::lock_guard<std::mutex> lock(mu_);
  return factories_.count(type) > 0;
}

Result<std::unique_ptr<Stage>> StageRegistry::make(const StageSpec& spec) const {
  StageFactory factory;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = factories_.find(spec.type);
    if (it == factories_.end())
      return invalid_argument("unknown stage type '" + spec.type +
                              "': register it with StageRegistry::global().add() in every "
                              "process that runs workers");
    factory = it->second;
  }
  return factory(spec.params);
}

Result<std::vector<std::unique_ptr<Stage>>> build_pipeline(const Spec& spec) {
  return build_stages(spec, 0, spec.stages().size());
}

Result<std::vector<std::unique_ptr<Stage>>> build_stages(const Spec& spec, size_t begin,
                                                         size_t end) {
  std::vector<std::unique_ptr<Stage>> out;
  for (size_t i = begin; i < end && i < spec.stages().size(); ++i) {
    SY_ASSIGN_OR_RETURN(auto stage, StageRegistry::global().make(spec.stages()[i]));
    out.push_back(std::move(stage));
  }
  return out;
}

namespace {

bool plain_spec_char(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == ',' || c == '+' || c == '@';
}

std::string spec_escape(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (plain_spec_char(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

Result<std::string> spec_unescape(const std::string& s, const std::string& token) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      if (!plain_spec_char(static_cast<unsigned char>(s[i])))
        return invalid_argument("pipeline spec token '" + token + "': byte '" + s[i] +
                                "' must be written %XX");
      out += s[i];
      continue;
    }
    int hi = i + 2 < s.size() ? nibble(s[i + 1]) : -1;
    int lo = i + 2 < s.size() ? nibble(s[i + 2]) : -1;
    if (hi < 0 || lo < 0)
      return invalid_argument("pipeline spec token '" + token + "': bad %XX escape");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace

std::string spec_to_string(const Spec& spec) {
  std::string out;
  const auto& stages = spec.stages();
  for (size_t i = 0; i <= stages.size(); ++i) {
    if (spec.has_merge() && spec.merge_at() == i) out += out.empty() ? "merge" : " merge";
    if (i == stages.size()) break;
    const auto& s = stages[i];
    if (!out.empty()) out += ' ';
    out += s.replicable ? "map/" : "once/";
    out += spec_escape(s.type);
    char sep = ':';
    for (const auto& [k, v] : s.params) {
      out += sep;
      out += spec_escape(k) + "=" + spec_escape(v);
      sep = ';';
    }
  }
  return out;
}

Result<Spec> spec_from_string(const std::string& text) {
  Spec spec;
  size_t pos = 0;
  bool merged = false;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string token = text.substr(pos, end - pos);
    pos = end + 1;
    if (token.empty()) return invalid_argument("pipeline spec '" + text + "': empty stage");
    if (token == "merge") {
      if (merged) return invalid_argument("pipeline spec '" + text + "': two merge points");
      spec.merge();
      merged = true;
      continue;
    }
    bool once = token.rfind("once/", 0) == 0;
    if (!once && token.rfind("map/", 0) != 0)
      return invalid_argument("pipeline spec token '" + token +
                              "' is neither map/TYPE, once/TYPE nor merge");
    std::string body = token.substr(once ? 5 : 4);
    auto colon = body.find(':');
    SY_ASSIGN_OR_RETURN(std::string type, spec_unescape(body.substr(0, colon), token));
    if (type.empty()) return invalid_argument("pipeline spec token '" + token + "': no type");
    StageParams params;
    if (colon != std::string::npos) {
      std::string rest = body.substr(colon + 1);
      size_t p = 0;
      while (p <= rest.size()) {
        size_t semi = rest.find(';', p);
        if (semi == std::string::npos) semi = rest.size();
        std::string kv = rest.substr(p, semi - p);
        auto eq = kv.find('=');
        if (eq == std::string::npos)
          return invalid_argument("pipeline spec token '" + token + "': '" + kv +
                                  "' is not key=value");
        SY_ASSIGN_OR_RETURN(std::string key, spec_unescape(kv.substr(0, eq), token));
        SY_ASSIGN_OR_RETURN(std::string value, spec_unescape(kv.substr(eq + 1), token));
        params[key] = value;
        p = semi + 1;
      }
    }
    if (once) {
      spec.once(type, std::move(params));
    } else {
      spec.map(type, std::move(params));
    }
  }
  return spec;
}

}  // namespace shardyard
