// Tests of runtime/metrics.h and runtime/metrics_text.h: the live metrics, the registry, merging
// snapshots, and the Prometheus text format 0.0.4 (promtool checks the real output end to end,
// tests/e2e/run_monitor_e2e.py).
#include "runtime/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "runtime/metrics_text.h"

namespace shardyard {
namespace {

TEST(Metrics, CountersAndGaugesAddFromManyThreads) {
  MetricsRegistry reg;
  Counter& c = reg.counter("sy_items_total", "items", {{"rank", "0"}});
  Gauge& g = reg.gauge("sy_depth", "depth");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.add();
        g.add(1);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000u);
  EXPECT_EQ(g.value(), 40000);
  EXPECT_EQ(&reg.counter("sy_items_total", "items", {{"rank", "0"}}), &c) << "same series";
  EXPECT_NE(&reg.counter("sy_items_total", "items", {{"rank", "1"}}), &c) << "other labels";
}

TEST(Metrics, HistogramCountsEachObservationInItsBucket) {
  Histogram h({1, 0.1, 10, 1});  // sorted and deduplicated
  ASSERT_EQ(h.bounds(), (std::vector<double>{0.1, 1, 10}));
  for (double v : {0.05, 0.1, 0.5, 1.0, 7.0, 100.0}) h.observe(v);
  MetricPoint p = h.point();
  EXPECT_EQ(p.buckets, (std::vector<uint64_t>{2, 2, 1, 1})) << "le is inclusive";
  EXPECT_EQ(p.count, 6u);
  EXPECT_DOUBLE_EQ(p.sum, 108.65);
}

TEST(Metrics, CollectAddsConstantLabelsAndCollectors) {
  MetricsRegistry reg(MetricLabels{{"node", "n1"}});
  reg.counter("sy_a_total", "a", {{"rank", "2"}}).add(3);
  reg.add_collector([](MetricsSnapshot* s) {
    auto& f = s->family("sy_depth", "depth", MetricType::kGauge);
    f.points.push_back(MetricPoint{{{"queue", "w0"}}, 4, {}, 0, 0});
    f.points.push_back(MetricPoint{{{"queue", "w1"}, {"node", "other"}}, 5, {}, 0, 0});
  });
  MetricsSnapshot s = reg.collect();
  ASSERT_EQ(s.families.size(), 2u);
  const MetricFamily* a = s.find("sy_a_total");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->points[0].labels, (MetricLabels{{"rank", "2"}, {"node", "n1"}}));
  EXPECT_EQ(a->points[0].value, 3);
  const MetricFamily* d = s.find("sy_depth");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->points[1].labels, (MetricLabels{{"queue", "w1"}, {"node", "other"}}))
      << "a label the collector set is kept";
}

TEST(Metrics, MergeKeepsSeriesApartByTheExtraLabels) {
  MetricsRegistry r0, r1;
  r0.counter("sy_items_total", "items", {{"role", "worker"}}).add(1);
  r1.counter("sy_items_total", "items", {{"role", "worker"}}).add(2);
  r1.histogram("sy_wait_seconds", "wait", {0.5, 1}).observe(0.7);
  MetricsSnapshot job;
  ASSERT_TRUE(merge_metrics(&job, r0.collect(), {{"rank", "0"}}).is_ok());
  ASSERT_TRUE(merge_metrics(&job, r1.collect(), {{"rank", "1"}, {"role", "ignored"}}).is_ok());
  const MetricFamily* items = job.find("sy_items_total");
  ASSERT_NE(items, nullptr);
  ASSERT_EQ(items->points.size(), 2u);
  EXPECT_EQ(items->points[1].labels, (MetricLabels{{"role", "worker"}, {"rank", "1"}}));
  // The same name with another type or other buckets cannot be merged.
  MetricsRegistry bad;
  bad.histogram("sy_wait_seconds", "wait", {0.25}).observe(1);
  Status st = merge_metrics(&job, bad.collect());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("sy_wait_seconds"), std::string::npos);
}

TEST(MetricsText, RendersHelpTypeEscapedLabelsAndHistograms) {
  MetricsRegistry reg;
  reg.counter("sy_items_total", "Items.\nSecond line \\ here", {{"path", "a\"b\\c\nd"}}).add(7);
  Histogram& h = reg.histogram("sy_wait_seconds", "Wait.", {0.5, 2}, {{"rank", "0"}});
  h.observe(0.25);
  h.observe(1);
  h.observe(3);
  reg.gauge("sy_unused", "never set");  // a gauge at 0 is still a series
  const std::string text = render_prometheus(reg.collect());
  EXPECT_EQ(text,
            "# HELP sy_items_total Items.\\nSecond line \\\\ here\n"
            "# TYPE sy_items_total counter\n"
            "sy_items_total{path=\"a\\\"b\\\\c\\nd\"} 7\n"
            "# HELP sy_wait_seconds Wait.\n"
            "# TYPE sy_wait_seconds histogram\n"
            "sy_wait_seconds_bucket{rank=\"0\",le=\"0.5\"} 1\n"
            "sy_wait_seconds_bucket{rank=\"0\",le=\"2\"} 2\n"
            "sy_wait_seconds_bucket{rank=\"0\",le=\"+Inf\"} 3\n"
            "sy_wait_seconds_sum{rank=\"0\"} 4.25\n"
            "sy_wait_seconds_count{rank=\"0\"} 3\n"
            "# HELP sy_unused never set\n"
            "# TYPE sy_unused gauge\n"
            "sy_unused 0\n");
}

TEST(MetricsText, NumbersReadBackExactly) {
  EXPECT_EQ(prometheus_number(0), "0");
  EXPECT_EQ(prometheus_number(-3), "-3");
  EXPECT_EQ(prometheus_number(1e15), "1e+15");
  EXPECT_EQ(prometheus_number(0.1), "0.1");
  EXPECT_EQ(prometheus_number(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(prometheus_number(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(prometheus_number(std::nan("")), "NaN");
  for (double v : {1.0 / 3, 2.5e-7, 123456.789, 9007199254740993.0})
    EXPECT_EQ(std::strtod(prometheus_number(v).c_str(), nullptr), v);
}

TEST(MetricsText, LeavesOutNamesPrometheusWouldRefuse) {
  MetricsSnapshot s;
  s.family("9bad", "x", MetricType::kGauge).points.push_back(MetricPoint{});
  s.family("sy_ok", "x", MetricType::kGauge)
      .points.push_back(MetricPoint{{{"__x", "1"}}, 1, {}, 0, 0});
  s.family("sy_ok", "x", MetricType::kGauge)
      .points.push_back(MetricPoint{{{"a", "1"}}, 2, {}, 0, 0});
  EXPECT_EQ(render_prometheus(s), "# HELP sy_ok x\n# TYPE sy_ok gauge\nsy_ok{a=\"1\"} 2\n");
  EXPECT_TRUE(valid_metric_name("a:b_c9"));
  EXPECT_FALSE(valid_metric_name("a-b"));
  EXPECT_FALSE(valid_label_name("a:b"));
  EXPECT_FALSE(valid_label_name(""));
}

}  // namespace
}  // namespace shardyard
