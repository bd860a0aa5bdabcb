#include "runtime/metrics.h"

#include <algorithm>
#include <cstring>

namespace shardyard {

const char* metric_type_name(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

MetricFamily& MetricsSnapshot::family(const std::string& name, const std::string& help,
                                      MetricType type, std::vector<double> bounds) {
  for (auto& f : families)
    if (f.name == name) return f;
  families.push_back(MetricFamily{name, help, type, std::move(bounds), {}});
  return families.back();
}

const MetricFamily* MetricsSnapshot::find(std::string_view name) const {
  for (const auto& f : families)
    if (f.name == name) return &f;
  return nullptr;
}

namespace {
bool name_char(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}
bool valid_name(std::string_view name, bool colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (!name_char(name[i], i == 0, colon)) return false;
  return true;
}
bool has_label(const MetricLabels& labels, const std::string& name) {
  for (const auto& [k, v] : labels)
    if (k == name) return true;
  return false;
}
}  // namespace

bool valid_metric_name(std::string_view name) { return valid_name(name, true); }
bool valid_label_name(std::string_view name) {
  return valid_name(name, false) && name.substr(0, 2) != "__";  // __ is reserved
}

Status merge_metrics(MetricsSnapshot* into, const MetricsSnapshot& from,
                     const MetricLabels& extra) {
  for (const auto& f : from.families) {
    MetricFamily& target = into->family(f.name, f.help, f.type, f.bounds);
    if (target.type != f.type || target.bounds != f.bounds)
      return invalid_argument("metric " + f.name + " is a " + metric_type_name(f.type) +
                              " here and a " + metric_type_name(target.type) +
                              " (or has other buckets) in the snapshot it is merged into");
    for (const auto& p : f.points) {
      target.points.push_back(p);
      for (const auto& label : extra)
        if (!has_label(p.labels, label.first)) target.points.back().labels.push_back(label);
    }
  }
  return Status::ok();
}

// ---- histogram ---------------------------------------------------------------------------

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  counts_.reset(new std::atomic<uint64_t>[bounds_.size() + 1]);
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  // No fetch_add for doubles before C++20: a compare-exchange on the bits.
  uint64_t old_bits = sum_bits_.load(std::memory_order_relaxed);
  for (;;) {
    double sum;
    std::memcpy(&sum, &old_bits, sizeof sum);
    sum += v;
    uint64_t new_bits;
    std::memcpy(&new_bits, &sum, sizeof sum);
    if (sum_bits_.compare_exchange_weak(old_bits, new_bits, std::memory_order_relaxed)) break;
  }
  count_.fetch_add(1, std::memory_order_relaxed);
}

MetricPoint Histogram::point() const {
  MetricPoint p;
  p.buckets.resize(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i)
    p.buckets[i] = counts_[i].load(std::memory_order_relaxed);
  // The count is the buckets' total, so the rendered +Inf bucket always equals _count even
  // while observations land during the copy.
  p.count = 0;
  for (auto c : p.buckets) p.count += c;
  uint64_t bits = sum_bits_.load(std::memory_order_relaxed);
  std::memcpy(&p.sum, &bits, sizeof p.sum);
  return p;
}

std::vector<double> duration_buckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
}

// ---- registry ----------------------------------------------------------------------------

MetricsRegistry::Entry& MetricsRegistry::entry(const std::string& name, const std::string& help,
                                               MetricType type, MetricLabels labels,
                                               std::vector<double> bounds) {
  for (auto& e : entries_)
    if (e.name == name && e.labels == labels && e.type == type) return e;
  entries_.push_back(Entry{name, help, type, std::move(labels), nullptr, nullptr, nullptr});
  Entry& e = entries_.back();
  if (type == MetricType::kCounter) e.counter = std::make_unique<Counter>();
  if (type == MetricType::kGauge) e.gauge = std::make_unique<Gauge>();
  if (type == MetricType::kHistogram) e.histogram = std::make_unique<Histogram>(std::move(bounds));
  return e;
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help,
                                  MetricLabels labels) {
  MutexLock lock(&mu_);
  return *entry(name, help, MetricType::kCounter, std::move(labels), {}).counter;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help,
                              MetricLabels labels) {
  MutexLock lock(&mu_);
  return *entry(name, help, MetricType::kGauge, std::move(labels), {}).gauge;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      std::vector<double> bounds, MetricLabels labels) {
  MutexLock lock(&mu_);
  return *entry(name, help, MetricType::kHistogram, std::move(labels), std::move(bounds)).histogram;
}

void MetricsRegistry::add_collector(Collector collector) {
  MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

MetricsSnapshot MetricsRegistry::collect() const {
  MetricsSnapshot out;
  std::vector<Collector> collectors;
  {
    MutexLock lock(&mu_);
    copy_entries(&out);
    // Collectors run without the lock: one may take locks of its own that are held while a
    // metric is registered (a StatusBoard making a role), and a collector may register.
    collectors = collectors_;
  }
  for (const auto& c : collectors) c(&out);
  for (auto& f : out.families)
    for (auto& p : f.points)
      for (const auto& label : constant_)
        if (!has_label(p.labels, label.first)) p.labels.push_back(label);
  return out;
}

void MetricsRegistry::copy_entries(MetricsSnapshot* out) const {
  for (const auto& e : entries_) {
    MetricPoint p;
    if (e.histogram) {
      p = e.histogram->point();
      out->family(e.name, e.help, e.type, e.histogram->bounds()).points.push_back(std::move(p));
    } else {
      p.value = e.counter ? static_cast<double>(e.counter->value())
                          : static_cast<double>(e.gauge->value());
      out->family(e.name, e.help, e.type).points.push_back(std::move(p));
    }
    out->family(e.name, e.help, e.type).points.back().labels = e.labels;
  }
}

}  // namespace shardyard
