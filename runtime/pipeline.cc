#include "runtime/pipeline.h"

#include <algorithm>
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
    Field copy = *f;
    item.remove_field(from_);
    item.set_field_view(to_, copy.data, copy.size);
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
}

StageRegistry& StageRegistry::global() {
  static StageRegistry registry;
  return registry;
}

Status StageRegistry::add(const std::string& type, StageFactory factory) {
  if (type.empty() || !factory) return invalid_argument("a stage type needs a name and a factory");
  std::lock_guard<std::mutex> lock(mu_);
  factories_[type] = std::move(factory);
  return Status::ok();
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

}  // namespace shardyard
