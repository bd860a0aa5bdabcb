#!/usr/bin/env python3
"""End-to-end tests of the monitoring endpoints and `shardyard monitor` (docs/monitor.md).

Usage: run_monitor_e2e.py --shardyard BIN CASE
A slow `shardyard run --metrics-port 0` (a sleep stage, many epochs) stays alive while a
case looks at it; every case kills what it started. No assertion depends on timing; every
wait has a deadline. Exit 0 = pass, 77 = skipped (prometheus/promtool not installed).
"""
import argparse
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "servers"))
from servers import free_port  # noqa: E402  (a port outside the ephemeral range)

ARGS = None
FAILS = []
ROLES = {"coordinator", "dispatcher", "worker", "loader", "checkpoint"}
STATES = {"idle", "running", "waiting_input", "waiting_output", "saving", "restoring", "failed",
          "stopped"}


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, file=sys.stderr)


def wait_for(what, fn, timeout=60.0, step=0.2):
    """fn() until it returns something true, at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # a server still starting
            last = e
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def http(port, path, timeout=10):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


class Job:
    """A slow `shardyard run --metrics-port 0` in the background."""

    def __init__(self, tmp, ranks=2, workers=2, epochs=1000, sleep_us=20000, extra=()):
        data = os.path.join(tmp, "data")
        if not os.path.isdir(data):
            subprocess.run([sys.executable, os.path.join(HERE, "make_dataset.py"), "--out", data,
                            "--shards", "8", "--samples", "200", "--bytes", "512", "--seed", "3"],
                           check=True, stdout=subprocess.DEVNULL)
        self.stderr_path = os.path.join(tmp, f"job-{time.monotonic_ns()}.err")
        self.cmd = [ARGS.shardyard, "run", "--source", data + "/shard-{000000..000007}.tar",
                    "--ranks", str(ranks), "--workers", str(workers), "--batch-size", "4",
                    "--epochs", str(epochs), "--map", f"sleep:us={sleep_us}", "--json",
                    "--metrics-port", "0", "--cache-dir", os.path.join(tmp, "cache"), *extra]
        self.err = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self.err, text=True)
        try:
            self.port = int(wait_for("the job's port on stderr", self._port, timeout=60))
        except BaseException:
            self.stop()  # a job that never served must not outlive the test
            raise

    def _port(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"the job ended early ({self.proc.returncode}): "
                                 + open(self.stderr_path).read())
        m = re.search(r"monitor: http://127\.0\.0\.1:(\d+)/metrics", open(self.stderr_path).read())
        return m.group(1) if m else None

    def status(self):
        code, ctype, body = http(self.port, "/status")
        check(code == 200 and ctype == "application/json", f"/status answered {code} {ctype}")
        return json.loads(body)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.err.close()


def last_frame(out):
    """The last frame drawn whole: from a cursor-home to the clear-to-end after it."""
    frames = [f for f in out.split(b"\x1b[H") if b"\x1b[J" in f]
    return frames[-1] if frames else b""


def run_monitor(port, *extra, timeout=60):
    return subprocess.run([ARGS.shardyard, "monitor", f"127.0.0.1:{port}", *extra],
                          capture_output=True, text=True, timeout=timeout)


# ---- cases -------------------------------------------------------------------------------

def case_prometheus_scrape(tmp):
    """A real Prometheus scrapes the job; its query API returns shardyard's series."""
    prometheus = shutil.which("prometheus")
    if not prometheus:
        print("SKIP: prometheus is not installed (Debian package prometheus)")
        sys.exit(77)
    job = Job(tmp)
    prom = None
    try:
        port = free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: shardyard\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{job.port}']\n")
        log = open(os.path.join(tmp, "prometheus.log"), "w")
        prom = subprocess.Popen([prometheus, f"--config.file={config}",
                                 f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)

        def query(q):
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            with urllib.request.urlopen(url, timeout=5) as r:
                body = json.load(r)
            return body["data"]["result"] if body.get("status") == "success" else None

        up = wait_for("Prometheus to scrape the job",
                      lambda: [s for s in (query('up{job="shardyard"}') or [])
                               if s["value"][1] == "1"], timeout=90)
        check(len(up) == 1, f"one target up: {up}")
        series = wait_for("shardyard_items_total in Prometheus",
                          lambda: query('shardyard_items_total{role="worker"}'), timeout=60)
        check(len(series) == 4, f"2 ranks x 2 workers of items: {len(series)}")
        for s in series:
            labels = s["metric"]
            check({"rank", "worker", "node", "role"} <= set(labels), f"labels: {labels}")
        waits = wait_for("a histogram in Prometheus",
                         lambda: query("shardyard_next_wait_seconds_count"), timeout=60)
        check({s["metric"]["rank"] for s in waits} == {"0", "1"}, f"per rank: {waits}")
        rate = wait_for("items delivered", lambda: [
            s for s in (query('shardyard_items_total{role="loader"}') or [])
            if float(s["value"][1]) > 0], timeout=60)
        check(len(rate) >= 1, "the loader's items grow")
    finally:
        if prom:
            prom.terminate()
            try:
                prom.wait(timeout=30)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait(timeout=30)
        job.stop()


def case_promtool(tmp):
    """promtool accepts the exposition of a running job, and of one at rest."""
    promtool = shutil.which("promtool")
    if not promtool:
        print("SKIP: promtool is not installed (Debian package prometheus)")
        sys.exit(77)
    job = Job(tmp, extra=["--checkpoint-dir", os.path.join(tmp, "ckpt"),
                          "--checkpoint-every", "2"])
    try:
        wait_for("a checkpoint", lambda: job.status()["ranks"][0]["checkpoint"]["saves"] > 0)
        # Rank 0 counts a save once every rank's part is committed; rank 1 times its own save
        # when the answer reaches its loader, which can come a moment later.
        saved = re.compile(r'shardyard_checkpoint_save_seconds_count\{rank="1",[^}]*\} [1-9]')
        wait_for("rank 1's save time", lambda: saved.search(http(job.port, "/metrics")[2]))
        code, ctype, text = http(job.port, "/metrics")
        check(code == 200, f"/metrics answered {code}")
        check(ctype == "text/plain; version=0.0.4; charset=utf-8", f"content type {ctype}")
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
        check(p.returncode == 0, f"promtool check metrics: {p.stdout}{p.stderr}")
        for family in ["shardyard_items_total", "shardyard_bytes_total", "shardyard_batches_total",
                       "shardyard_worker_restarts_total", "shardyard_remote_read_retries_total",
                       "shardyard_checkpoint_saves_total", "shardyard_queue_depth",
                       "shardyard_data_plane_bytes", "shardyard_epoch", "shardyard_step",
                       "shardyard_next_wait_seconds", "shardyard_step_seconds",
                       "shardyard_checkpoint_save_seconds", "shardyard_wait_seconds_total"]:
            check(f"# TYPE {family} " in text, f"{family} is exposed")
        saves = re.findall(r'^shardyard_checkpoint_saves_total\{rank="0",node="[^"]+"\} (\d+)$',
                           text, re.M)
        check(saves and int(saves[0]) > 0, f"checkpoint saves counted: {saves}")
        check(saved.search(text), "save times observed")
    finally:
        job.stop()


def case_monitor_json(tmp):
    """--once --json lists every actor of a running 3-rank job with sane values."""
    ranks, workers = 3, 2
    job = Job(tmp, ranks=ranks, workers=workers, sleep_us=5000)
    try:
        # Until every rank's trainer has taken a batch (workers send packets of up to 128
        # items, so the first batches come after a while).
        wait_for("every rank mid-epoch",
                 lambda: all(r["step"] > 0 for r in job.status()["ranks"]), timeout=120)
        p = run_monitor(job.port, "--once", "--json")
        check(p.returncode == 0, f"monitor --once --json exited {p.returncode}: {p.stderr}")
        s = json.loads(p.stdout)
        check(s["schema"] == "shardyard.status/1", "schema")
        actors = s["actors"]
        count = {}
        for a in actors:
            count[(a["role"])] = count.get(a["role"], 0) + 1
            check(a["role"] in ROLES, f"role {a['role']}")
            check(a["state"] in STATES, f"state {a['state']}")
            check(a["pid"] == job.proc.pid, f"pid {a['pid']} is the job's {job.proc.pid}")
            check(a["node"] == socket.gethostname(), f"node {a['node']}")
            check(a["input_wait_s"] >= 0 and a["output_wait_s"] >= 0, "waits are not negative")
            check(a["input_wait_s"] + a["output_wait_s"] <= a["uptime_s"] * 1.01 + 0.05,
                  f"{a['role']} {a['rank']}/{a['worker']} waited longer than it lived: {a}")
        check(count == {"coordinator": 1, "dispatcher": ranks, "worker": ranks * workers,
                        "loader": ranks, "checkpoint": ranks}, f"actors by role: {count}")
        workers_seen = {(a["rank"], a["worker"]) for a in actors if a["role"] == "worker"}
        check(workers_seen == {(r, w) for r in range(ranks) for w in range(workers)},
              f"every worker once: {sorted(workers_seen)}")
        check(s["job"]["world_size"] == ranks and s["job"]["workers"] == workers, "job shape")
        total_take = 0
        for r in s["ranks"]:
            check(r["steps"] > 0 and 0 <= r["step"] <= r["steps"],
                  f"rank {r['rank']} step {r['step']}/{r['steps']}")
            shards = r["shards"]
            check(len(shards) == r["shards_done"] + r["shards_unseen"] +
                  sum(1 for x in shards if x["state"] == "partial"), "shard states add up")
            check(all(0 <= x["consumed"] <= x["take"] for x in shards), "consumed <= take")
            total_take += sum(x["take"] for x in shards)
            check(len(r["queues"]) == (workers if r["epoch_open"] else 0),
                  f"rank {r['rank']} queues {r['queues']}")
            loader = [a for a in actors if a["role"] == "loader" and a["rank"] == r["rank"]][0]
            check(loader["items"] >= r["items"], "the loader delivered what the cursor says")
        check(total_take == s["job"]["items"], f"take over all ranks {total_take} = items of an "
              f"epoch {s['job']['items']}")
        # The table of --once names every role and the bottleneck: the sleep stage.
        p = run_monitor(job.port, "--once")
        check(p.returncode == 0, f"monitor --once exited {p.returncode}: {p.stderr}")
        check("ROLE" in p.stdout and "\x1b[" not in p.stdout, "a plain table")
        for role in ROLES:
            check(role in p.stdout, f"{role} in the table")
        check(re.search(r"^rank 2 +epoch", p.stdout, re.M), "a coverage line per rank")
        check("bottleneck: workers" in p.stdout, f"the sleeping workers are the bottleneck:\n"
              f"{p.stdout}")
    finally:
        job.stop()


def case_monitor_tty(tmp):
    """The live view in a pseudo-terminal: redrawn in place, resized, and a job that goes away."""
    job = Job(tmp)
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(ARGS.shardyard, [ARGS.shardyard, "monitor", f"127.0.0.1:{job.port}",
                                  "--interval", "0.2"])
    out = b""
    status = None
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))

        def read_until(pred, timeout=60):
            nonlocal out
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not pred(out):
                r, _, _ = select.select([fd], [], [], 0.2)
                if r:
                    try:
                        chunk = os.read(fd, 65536)
                    except OSError:
                        break
                    if not chunk:
                        break
                    out += chunk
            return pred(out)

        check(read_until(lambda o: o.count(b"\x1b[J") >= 3 and b"ROLE" in o),
              f"three frames drawn in place: {out[-400:]!r}")
        check(b"\x1b[?25l" in out, "the cursor is hidden while it draws")
        frame = last_frame(out)
        check(b"worker" in frame and b"bottleneck:" in frame, "a frame holds the table")
        check(all(len(line) <= 130 for line in frame.split(b"\n")), "lines fit 120 columns")
        # A resize redraws at once (a cleared screen) at the new width.
        before = len(out)
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 16, 70, 0, 0))
        os.kill(pid, signal.SIGWINCH)
        check(read_until(lambda o: b"\x1b[2J" in o[before:]), "redrawn after a resize")
        check(read_until(lambda o: o.count(b"\x1b[J", before) >= 2), "frames after the resize")
        last = last_frame(out)
        lines = [l.split(b"\x1b[K")[0] for l in last.split(b"\n")]
        check(all(len(l) <= 70 + 4 for l in lines), f"lines cut to 70 columns: {lines[:4]}")
        check(b"more actors" in last, "rows that do not fit 16 lines are summarised")
        # The job goes away: a clear message, exit 1, the cursor shown again.
        job.stop()
        read_until(lambda o: b"went away" in o, timeout=30)
        check(b"went away" in out, f"a message when the job goes away: {out[-300:]!r}")
        check(b"\x1b[?25h" in out, "the cursor is shown again")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and status is None:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
            else:
                read_until(lambda o: False, timeout=0.2)
        check(status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1,
              f"exit status 1 when the job went away: {status}")
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
        job.stop()


def case_launched_job(tmp):
    """A job of 3 rank processes started with tools/shardyard-launch --metrics-port: the
    coordinator's endpoints show the whole job (every rank's actors with its own pid, every
    rank's series), and a rank that stops answering shows as unresponsive in time."""
    data = os.path.join(tmp, "data")
    subprocess.run([sys.executable, os.path.join(HERE, "make_dataset.py"), "--out", data,
                    "--shards", "8", "--samples", "200", "--bytes", "512", "--seed", "3"],
                   check=True, stdout=subprocess.DEVNULL)
    port = free_port()
    launch = os.path.join(HERE, "..", "..", "tools", "shardyard-launch")
    log = open(os.path.join(tmp, "launch.log"), "w")
    proc = subprocess.Popen(
        [sys.executable, launch, "--shardyard", ARGS.shardyard, "--metrics-port", str(port),
         "--nproc-per-node", "3", "--", ARGS.shardyard, "run", "--source",
         data + "/shard-{000000..000007}.tar", "--workers", "2", "--batch-size", "4",
         "--epochs", "1000", "--map", "sleep:us=5000", "--cache-dir", os.path.join(tmp, "cache")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def every_rank_running():
            code, _, body = http(port, "/status")
            s = json.loads(body)
            return s if len(s["ranks"]) == 3 and all(r["step"] > 0 for r in s["ranks"]) else None
        wait_for("every rank process mid-epoch", every_rank_running, timeout=120)
        p = run_monitor(port, "--once", "--json")
        check(p.returncode == 0, f"monitor --once --json exited {p.returncode}: {p.stderr}")
        s = json.loads(p.stdout)
        roles = {}
        for a in s["actors"]:
            roles.setdefault((a["role"], a["rank"] if a["role"] != "coordinator" else -1),
                             []).append(a)
        coordinator = roles.get(("coordinator", -1), [])
        check(len(coordinator) == 1, f"one coordinator: {coordinator}")
        pids = {}
        for r in range(3):
            for role, n in (("loader", 1), ("dispatcher", 1), ("checkpoint", 1), ("worker", 2)):
                got = roles.get((role, r), [])
                check(len(got) == n, f"rank {r}: {len(got)} {role} actor(s), not {n}")
                for a in got:
                    pids.setdefault(r, set()).add(a["pid"])
                    check(a["node"] == socket.gethostname(), f"node {a['node']}")
        check(all(len(p) == 1 for p in pids.values()) and
              len({next(iter(p)) for p in pids.values()}) == 3,
              f"each rank's actors share one pid, and the 3 ranks have 3: {pids}")
        check(coordinator and coordinator[0]["pid"] not in {next(iter(p)) for p in pids.values()},
              "the coordinator runs in a process of its own")
        check(s["job"]["world_size"] == 3 and s["job"]["workers"] == 2, f"job {s['job']}")
        _, ctype, metrics = http(port, "/metrics")
        for r in range(3):
            check(f'shardyard_items_total{{' in metrics and f'rank="{r}"' in metrics,
                  f"/metrics has no series of rank {r}")
        # A rank that stops answering: /status still answers in time, naming it.
        victim = next(iter(pids[1]))
        os.kill(victim, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            _, _, body = http(port, "/status", timeout=10)
            took = time.monotonic() - t0
            st = json.loads(body)
            loaders = [a for a in st["actors"] if a["role"] == "loader" and a["rank"] == 1]
            check(took < 5, f"/status took {took:.1f} s with a stopped rank")
            check(loaders and loaders[0]["state"] == "unresponsive",
                  f"the stopped rank's loader: {loaders}")
        finally:
            os.kill(victim, signal.SIGCONT)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()


def case_http_errors(tmp):
    """Bad requests get HTTP errors; the endpoint stops when the run ends; the summary says
    which port it served on."""
    job = Job(tmp, epochs=2, sleep_us=10000)
    try:
        def raw(request):
            with socket.create_connection(("127.0.0.1", job.port), timeout=10) as s:
                s.sendall(request)
                data = b""
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        return data
                    data += chunk
        check(raw(b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400"), "garbage: 400")
        delete = b"DELETE /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        check(raw(delete).startswith(b"HTTP/1.1 405"), "DELETE: 405")
        big = b"GET /status HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 20000 + b"\r\n\r\n"
        check(raw(big).startswith(b"HTTP/1.1 431"), "oversized header: 431")
        try:
            http(job.port, "/nope")
            check(False, "/nope: 404")
        except urllib.error.HTTPError as e:
            check(e.code == 404, f"/nope: {e.code}")
        head = raw(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        check(head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n"), "HEAD: no body")
        out, _ = job.proc.communicate(timeout=300)
        check(job.proc.returncode == 0, f"the run ended well: {job.proc.returncode}")
        summary = json.loads(out.strip().splitlines()[-1])
        check(summary.get("metrics_port") == job.port, f"metrics_port in the summary: {summary}")
        try:
            socket.create_connection(("127.0.0.1", job.port), timeout=5).close()
            check(False, "the endpoint is closed after the run")
        except OSError:
            pass
        p = run_monitor(job.port, "--once")
        check(p.returncode == 1 and "cannot read the job's status" in p.stderr,
              f"monitor of a finished job: {p.returncode} {p.stderr}")
    finally:
        job.stop()
    p = subprocess.run([ARGS.shardyard, "monitor", "nonsense"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 2 and "HOST:PORT" in p.stderr, f"a bad target: {p.stderr}")
    env = dict(os.environ, SHARDYARD_METRICS_PORT="not-a-port")
    p = subprocess.run([ARGS.shardyard, "run", "--source", "/nonexistent.tar"],
                       capture_output=True, text=True, timeout=60, env=env)
    check(p.returncode == 2 and "SHARDYARD_METRICS_PORT" in p.stderr, f"bad env: {p.stderr}")


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardyard", required=True)
    ap.add_argument("case")
    ARGS = ap.parse_args()
    fn = globals().get("case_" + ARGS.case)
    if not fn:
        print("unknown case", ARGS.case, file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="sy-monitor-")
    try:
        fn(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print(f"{len(FAILS)} checks failed", file=sys.stderr)
        return 1
    print("PASS", ARGS.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
