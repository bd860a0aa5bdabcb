// The Prometheus text exposition format, version 0.0.4, of a MetricsSnapshot.
//
// Per family: `# HELP` (backslash and newline escaped), `# TYPE`, then one line per point,
// `name{label="value",...} value`, label values escaped (backslash, double quote,
// newline). A histogram's point becomes cumulative `name_bucket{...,le="B"}` lines ending
// with le="+Inf" (equal to the count), then `name_sum` and `name_count`. Values print
// exactly (integers without an exponent; +Inf, -Inf and NaN as Prometheus spells them).
// Families with no point are left out; a family or label name that Prometheus would refuse
// is left out too (it is a bug of the code that made it: valid_metric_name()).
//
// Pure functions; thread-safe.
#pragma once

#include <string>

#include "runtime/metrics.h"

namespace shardyard {

// "text/plain; version=0.0.4; charset=utf-8"
extern const char* const kPrometheusContentType;

std::string render_prometheus(const MetricsSnapshot& snapshot);

// A number as the format writes it ("3", "0.25", "+Inf", "NaN").
std::string prometheus_number(double v);

}  // namespace shardyard
