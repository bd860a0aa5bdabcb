// Metrics: counters, gauges and histograms with fixed buckets, a registry that names them,
// and the plain snapshot a scrape takes of them (rendered as Prometheus text by
// runtime/metrics_text.h).
//
// The live metrics are updated on hot paths: one relaxed atomic per update, no lock, no
// allocation. The registry owns them (references stay valid for its lifetime) and, at
// collection, adds the values of its collectors: callbacks that read state kept elsewhere
// (queue depths, per-actor counters) only when someone asks. A MetricsSnapshot is plain
// data: a process collects its own and a coordinator may merge the snapshots of several
// processes (merge_metrics), their `rank` and `node` labels keeping the series apart.
//
// Thread-safe: any thread updates a metric; registration and collect() lock the registry.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/mutex.h"
#include "runtime/status.h"

namespace shardyard {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge, kHistogram };
const char* metric_type_name(MetricType type);  // "counter", "gauge", "histogram"

// One series at collection time. Histograms: `buckets[i]` counts the observations in
// (bounds[i-1], bounds[i]] (not cumulative), the last entry those above every bound.
struct MetricPoint {
  MetricLabels labels;
  double value = 0;  // counter, gauge
  std::vector<uint64_t> buckets;
  double sum = 0;
  uint64_t count = 0;
};

struct MetricFamily {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<double> bounds;  // histograms: ascending upper bounds; +Inf is implied
  std::vector<MetricPoint> points;
};

struct MetricsSnapshot {
  std::vector<MetricFamily> families;
  // The family of that name, added (empty) when there is none yet.
  MetricFamily& family(const std::string& name, const std::string& help, MetricType type,
                       std::vector<double> bounds = {});
  const MetricFamily* find(std::string_view name) const;
};

// Prometheus' rules: [a-zA-Z_:][a-zA-Z0-9_:]* for metrics, [a-zA-Z_][a-zA-Z0-9_]* for labels.
bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);

// Adds the families of `from` to `into`, same names together, and gives every point of
// `from` the labels of `extra` it does not have. A family whose type or buckets differ
// from the one already in `into` is refused (kInvalidArgument, naming it).
Status merge_metrics(MetricsSnapshot* into, const MetricsSnapshot& from,
                     const MetricLabels& extra = {});

class Counter {
 public:
  void add(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Gauge {
 public:
  void set(int64_t v) { v_.store(v, std::memory_order_relaxed); }
  void add(int64_t n) { v_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // sorted and deduplicated here
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  MetricPoint point() const;  // buckets, sum and count (labels empty)

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<uint64_t> sum_bits_{0};                // the sum as a double's bits
  std::atomic<uint64_t> count_{0};
};

// Bucket bounds for durations in seconds: 100 us to 60 s, about three per decade.
std::vector<double> duration_buckets();

class MetricsRegistry {
 public:
  // `constant` labels go on every point collected (for example the node).
  explicit MetricsRegistry(MetricLabels constant = {}) : constant_(std::move(constant)) {}
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The metric of that name and labels, made on first use. A name registered with another
  // type (or other buckets) is a programming error: the first registration wins.
  Counter& counter(const std::string& name, const std::string& help, MetricLabels labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, MetricLabels labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                       MetricLabels labels = {});

  // Runs at every collect(), after the registered metrics are copied, on the collecting
  // thread and without the registry's lock; it adds points with MetricsSnapshot::family().
  // It must not block.
  using Collector = std::function<void(MetricsSnapshot*)>;
  void add_collector(Collector collector);

  MetricsSnapshot collect() const;
  const MetricLabels& constant_labels() const { return constant_; }

 private:
  struct Entry {
    std::string name, help;
    MetricType type;
    MetricLabels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  Entry& entry(const std::string& name, const std::string& help, MetricType type,
               MetricLabels labels, std::vector<double> bounds) SY_REQUIRES(mu_);
  void copy_entries(MetricsSnapshot* out) const SY_REQUIRES(mu_);

  const MetricLabels constant_;
  mutable Mutex mu_;
  std::deque<Entry> entries_ SY_GUARDED_BY(mu_);  // a deque: references stay valid
  std::vector<Collector> collectors_ SY_GUARDED_BY(mu_);
};

}  // namespace shardyard
