// `shardyard monitor HOST:PORT`: the actors of a running job, from its GET /status.
//
// Live (the default): a table redrawn in place every --interval seconds, sized to the
// terminal and redrawn at once when the terminal is resized; Ctrl-C ends it (exit 0). When
// stdout is not a terminal, each refresh is printed after the previous one. --once prints
// one view; --json prints the status JSON (once with --once, else one line per refresh).
// A job that cannot be reached, or goes away, ends the command with a message and exit 1.
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "commands.h"
#include "io/serve/http.h"
#include "monitor_view.h"

namespace shardyard::tools {

namespace {

struct MonitorArgs {
  std::string target;
  bool once = false, json = false;
  double interval_s = 1.0;
  uint32_t timeout_ms = 5000;
};

volatile sig_atomic_t g_stop = 0;
volatile sig_atomic_t g_resized = 0;
void on_signal(int sig) {
  if (sig == SIGWINCH) {
    g_resized = 1;
  } else {
    g_stop = 1;
  }
}

void install_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGWINCH}) sigaction(sig, &sa, nullptr);
}

std::pair<int, int> terminal_size(bool tty) {
  winsize ws{};
  if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return {ws.ws_col, ws.ws_row};
  return {120, 0};
}

void write_out(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

Result<std::string> fetch_status(const std::string& host, uint16_t port, const MonitorArgs& a) {
  SY_ASSIGN_OR_RETURN(auto r, io::http_get(host, port, "/status", a.timeout_ms));
  if (r.status != 200)
    return unavailable(host + ":" + std::to_string(port) + " answered HTTP " +
                       std::to_string(r.status) + " to GET /status: is it a shardyard job's " +
                       "--metrics-port?");
  return r.body;
}

std::string frame(const std::vector<std::string>& lines, bool tty) {
  std::string out = tty ? "\x1b[H" : "";
  for (const auto& l : lines) out += l + (tty ? "\x1b[K\n" : "\n");
  out += tty ? "\x1b[J" : "\n";
  return out;
}

int monitor(const MonitorArgs& a) {
  auto hp = io::parse_host_port(a.target);
  if (!hp.is_ok()) {
    print_error(hp.status().message());
    return 2;
  }
  const auto& [host, port] = *hp;
  const bool tty = isatty(STDOUT_FILENO) != 0;
  ViewOptions view;
  view.source = a.target;
  if (a.once) {
    auto body = fetch_status(host, port, a);
    if (!body.is_ok()) {
      print_error("cannot read the job's status: " + body.status().message());
      return 1;
    }
    if (a.json) {
      write_out(*body);
      return 0;
    }
    auto status = actors::parse_status_json(*body);
    if (!status.is_ok()) {
      print_error(a.target + ": " + status.status().message());
      return 1;
    }
    view.width = terminal_size(tty).first;
    write_out(frame(render_view(*status, nullptr, view), false));
    return 0;
  }

  install_handlers();
  const bool redraw = tty && !a.json;
  if (redraw) write_out("\x1b[?25l\x1b[2J");  // hide the cursor, clear the screen
  auto leave = [&] {
    if (redraw) write_out("\x1b[?25h");
  };
  std::optional<actors::JobStatus> previous, current;
  bool reached = false;
  while (!g_stop) {
    auto body = fetch_status(host, port, a);
    if (!body.is_ok()) {
      leave();
      print_error(reached ? "the job at " + a.target + " went away: " + body.status().message()
                          : "cannot read the job's status: " + body.status().message());
      return 1;
    }
    reached = true;
    if (a.json) {
      std::string line = *body;
      while (!line.empty() && line.back() == '\n') line.pop_back();
      write_out(line + "\n");
    } else {
      auto status = actors::parse_status_json(*body);
      if (!status.is_ok()) {
        leave();
        print_error(a.target + ": " + status.status().message());
        return 1;
      }
      previous = std::move(current);
      current = std::move(status).value();
      g_resized = 0;
      std::tie(view.width, view.height) = terminal_size(tty);
      write_out(frame(render_view(*current, previous ? &*previous : nullptr, view), redraw));
    }
    // Wait for the next refresh; a resize redraws the last view at once.
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration<double>(std::max(0.1, a.interval_s));
    while (!g_stop && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (g_resized && current && !a.json) {
        g_resized = 0;
        std::tie(view.width, view.height) = terminal_size(tty);
        write_out((redraw ? "\x1b[2J" : "") +
                  frame(render_view(*current, previous ? &*previous : nullptr, view), redraw));
      }
    }
  }
  leave();
  return 0;
}

}  // namespace

Command add_monitor_command(CLI::App& app) {
  auto args = std::make_shared<MonitorArgs>();
  auto* cmd = app.add_subcommand(
      "monitor", "show the actors of a running job (its --metrics-port) live in the terminal");
  cmd->add_option("target", args->target, "HOST:PORT of the job's metrics endpoint")->required();
  cmd->add_flag("--once", args->once, "print one view (or with --json the status) and exit");
  cmd->add_flag("--json", args->json,
                "print the status JSON (GET /status) instead of the table; one line per refresh "
                "unless --once");
  cmd->add_option("--interval", args->interval_s, "seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--timeout-ms", args->timeout_ms, "give up on a request after this long")
      ->check(CLI::Range(100u, 600000u));
  return [args] { return monitor(*args); };
}

}  // namespace shardyard::tools
