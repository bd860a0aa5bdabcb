#include "runtime/metrics_text.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace shardyard {

const char* const kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string prometheus_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  // The shortest of 15 to 17 digits that reads back as the same double.
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

namespace {

void escape(const std::string& s, bool quotes, std::string* out) {
  for (char c : s) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '\n') {
      *out += "\\n";
    } else if (quotes && c == '"') {
      *out += "\\\"";
    } else {
      *out += c;
    }
  }
}

// `{a="x",b="y"}` with `le` last when given; nothing at all for no labels.
bool append_labels(const MetricLabels& labels, const std::string* le, std::string* out) {
  if (labels.empty() && !le) return true;
  std::string s = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!valid_label_name(k)) return false;
    if (!first) s += ',';
    first = false;
    s += k + "=\"";
    escape(v, true, &s);
    s += '"';
  }
  if (le) s += std::string(first ? "" : ",") + "le=\"" + *le + "\"";
  *out += s + "}";
  return true;
}

void append_sample(const std::string& name, const MetricLabels& labels, const std::string* le,
                   double value, std::string* out) {
  std::string line = name;
  if (!append_labels(labels, le, &line)) return;
  *out += line + ' ' + prometheus_number(value) + '\n';
}

}  // namespace

std::string render_prometheus(const MetricsSnapshot& snapshot) {
  std::string out;
  for (const auto& f : snapshot.families) {
    if (f.points.empty() || !valid_metric_name(f.name)) continue;
    out += "# HELP " + f.name + ' ';
    escape(f.help, false, &out);
    out += "\n# TYPE " + f.name + ' ' + metric_type_name(f.type) + '\n';
    for (const auto& p : f.points) {
      if (f.type != MetricType::kHistogram) {
        append_sample(f.name, p.labels, nullptr, p.value, &out);
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= f.bounds.size(); ++i) {
        cumulative += i < p.buckets.size() ? p.buckets[i] : 0;
        const std::string le = i < f.bounds.size() ? prometheus_number(f.bounds[i]) : "+Inf";
        append_sample(f.name + "_bucket", p.labels, &le, static_cast<double>(cumulative), &out);
      }
      append_sample(f.name + "_sum", p.labels, nullptr, p.sum, &out);
      append_sample(f.name + "_count", p.labels, nullptr, static_cast<double>(cumulative), &out);
    }
  }
  return out;
}

}  // namespace shardyard
