#include "monitor_view.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

namespace shardyard::tools {

using actors::ActorSnapshot;
using actors::JobStatus;

namespace {

const ActorSnapshot* find_actor(const JobStatus* status, const ActorSnapshot& a) {
  if (!status) return nullptr;
  for (const auto& b : status->actors)
    if (b.role == a.role && b.rank == a.rank && b.worker == a.worker) return &b;
  return nullptr;
}

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

std::string percent(double share) { return format("%.0f", 100 * std::clamp(share, 0.0, 1.0)); }

// Mean loads of the actors of one role (in open epochs only, for ranks and workers).
struct RoleLoad {
  double input = 0, output = 0;
  int count = 0;
};
RoleLoad role_load(const JobStatus& now, const JobStatus* before, const std::string& role) {
  RoleLoad r;
  for (const auto& a : now.actors) {
    if (a.role != role) continue;
    ActorLoad l = actor_load(a, find_actor(before, a));
    r.input += l.input;
    r.output += l.output;
    ++r.count;
  }
  if (r.count > 0) {
    r.input /= r.count;
    r.output /= r.count;
  }
  return r;
}

// A bar of `width` cells over the rank's logical shards: '#' consumed, '+' partly, '.' not.
std::string coverage_bar(const actors::RankStatus& r, int width) {
  const size_t n = r.shards.size();
  if (n == 0 || width <= 0) return std::string(std::max(width, 0), ' ');
  const size_t cells = std::min<size_t>(width, n);
  std::string bar;
  for (size_t c = 0; c < cells; ++c) {
    uint64_t take = 0, consumed = 0;
    for (size_t k = c * n / cells; k < (c + 1) * n / cells; ++k) {
      take += r.take[k];
      consumed += std::min(r.consumed[k], r.take[k]);
    }
    bar += consumed >= take ? '#' : consumed == 0 ? '.' : '+';
  }
  return bar;
}

}  // namespace

ActorLoad actor_load(const ActorSnapshot& now, const ActorSnapshot* before) {
  ActorLoad l;
  double span = now.uptime_s, in = now.input_wait_s, out = now.output_wait_s;
  double items = static_cast<double>(now.items);
  if (before && now.uptime_s > before->uptime_s) {
    span = now.uptime_s - before->uptime_s;
    in -= before->input_wait_s;
    out -= before->output_wait_s;
    items -= static_cast<double>(before->items);
    l.items_per_s = std::max(0.0, items / span);
  } else {
    l.items_per_s = now.items_per_s;
  }
  if (span > 0) {
    l.input = std::clamp(in / span, 0.0, 1.0);
    l.output = std::clamp(out / span, 0.0, 1.0);
  }
  return l;
}

Bottleneck find_bottleneck(const JobStatus& now, const JobStatus* before) {
  bool open = false;
  for (const auto& r : now.ranks) open = open || r.epoch_open;
  if (!open) return {"none", "no rank is in an epoch"};
  const RoleLoad loader = role_load(now, before, "loader");
  const RoleLoad workers = role_load(now, before, "worker");
  const RoleLoad dispatcher = role_load(now, before, "dispatcher");
  const std::string numbers = format(
      "the trainer waits for data %s%% of the time; workers wait for input %s%%, are blocked "
      "on output %s%%",
      percent(loader.input).c_str(), percent(workers.input).c_str(),
      percent(workers.output).c_str());
  if (loader.input < 0.10)
    return {"trainer", "the trainer's step is the slowest stage, loading keeps up: " + numbers};
  if (workers.output >= 0.5)
    return {"loader",
            "workers' queues are full while the trainer waits: the merge and collation in the "
            "loader cannot keep up (" +
                numbers + ")"};
  if (now.dispatch != "none" && workers.input >= 0.5)
    return {"dispatcher",
            dispatcher.input >= 0.5
                ? "workers wait for routed items and the dispatcher waits on its reads (" +
                      numbers +
                      format("; dispatcher input %s%%)", percent(dispatcher.input).c_str())
                : "workers wait for routed items while the dispatcher runs its non-replicable "
                  "stages (" +
                      numbers + ")"};
  if (workers.input >= 0.5) return {"input", "workers wait on reads from storage: " + numbers};
  return {"workers", "workers are busy in their stages (CPU): " + numbers};
}

std::vector<std::string> render_view(const JobStatus& now, const JobStatus* before,
                                     const ViewOptions& o) {
  std::vector<std::string> lines;
  lines.push_back(format(
      "shardyard monitor %s  node %s pid %u  up %.0f s  world %u x %u workers  batch %u  L %u  "
      "dispatch %s",
      o.source.c_str(), now.node.c_str(), now.pid, now.uptime_s, now.world_size, now.workers,
      now.batch_size, now.logical_shards, now.dispatch.c_str()));
  lines.push_back("");
  lines.push_back(format("%-11s %4s %4s %-12s %7s %-14s %9s %9s %4s %4s %11s", "ROLE", "RANK",
                         "WKR", "NODE", "PID", "STATE", "ITEMS/S", "QUEUE", "IN%", "OUT%",
                         "ITEMS"));
  // Rows that do not fit: rank lines, the bottleneck and the headings take 6 + ranks.
  size_t room = now.actors.size();
  if (o.height > 0) {
    const int fixed = 7 + static_cast<int>(now.ranks.size());
    room = static_cast<size_t>(std::max(1, o.height - fixed));
  }
  size_t shown = 0;
  for (const auto& a : now.actors) {
    if (shown == room && room < now.actors.size()) {
      lines.push_back(
          format("... %zu more actors (a taller terminal shows them)", now.actors.size() - shown));
      break;
    }
    ++shown;
    const bool single = a.role == "coordinator";
    const bool is_worker = a.role == "worker";
    ActorLoad l = actor_load(a, find_actor(before, a));
    std::string queue = "-";
    if (a.queue_capacity > 0) {
      queue = format("%llu/%llu", static_cast<unsigned long long>(a.queue_depth),
                     static_cast<unsigned long long>(a.queue_capacity));
    } else if (a.role == "dispatcher" && a.queue_depth > 0) {
      queue = std::to_string(a.queue_depth);
    }
    lines.push_back(format("%-11s %4s %4s %-12.12s %7u %-14.14s %9.0f %9s %4s %4s %11llu",
                           a.role.c_str(), single ? "-" : std::to_string(a.rank).c_str(),
                           is_worker ? std::to_string(a.worker).c_str() : "-", a.node.c_str(),
                           a.pid, a.state.c_str(), l.items_per_s, queue.c_str(),
                           percent(l.input).c_str(), percent(l.output).c_str(),
                           static_cast<unsigned long long>(a.items)));
  }
  lines.push_back("");
  const int bar_width = std::clamp(o.width - 70, 10, 40);
  for (const auto& r : now.ranks) {
    uint64_t take = 0, consumed = 0, done = 0, unseen = 0;
    for (size_t k = 0; k < r.shards.size(); ++k) {
      take += r.take[k];
      consumed += std::min(r.consumed[k], r.take[k]);
      done += r.consumed[k] >= r.take[k];
      unseen += r.consumed[k] == 0 && r.take[k] > 0;
    }
    lines.push_back(format(
        "rank %-3u epoch %-3u step %llu/%llu [%s] %3.0f%%  shards %llu done %llu unseen of %zu  "
        "ckpt gen %llu",
        r.rank, r.epoch, static_cast<unsigned long long>(r.step),
        static_cast<unsigned long long>(r.steps), coverage_bar(r, bar_width).c_str(),
        take ? 100.0 * consumed / take : 0.0, static_cast<unsigned long long>(done),
        static_cast<unsigned long long>(unseen), r.shards.size(),
        static_cast<unsigned long long>(r.checkpoint_generation)));
  }
  for (auto& line : lines)
    if (o.width > 0 && static_cast<int>(line.size()) > o.width) line.resize(o.width);
  // The bottleneck is wrapped at word boundaries, not cut.
  Bottleneck b = find_bottleneck(now, before);
  lines.push_back("");
  std::string text = "bottleneck: " + b.stage + " - " + b.reason;
  const size_t width = o.width > 20 ? static_cast<size_t>(o.width) : text.size();
  while (text.size() > width) {
    size_t cut = text.rfind(' ', width);
    if (cut == std::string::npos || cut == 0) cut = width;
    lines.push_back(text.substr(0, cut));
    text = "  " + text.substr(text[cut] == ' ' ? cut + 1 : cut);
  }
  lines.push_back(text);
  return lines;
}

}  // namespace shardyard::tools
