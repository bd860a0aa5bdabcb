#!/usr/bin/env python3
"""Real servers on loopback for the remote-source tests: nginx, s3rver and a fault proxy.

Standard library only. Used two ways:

  * as a module (tests/e2e/run_e2e.py): `with Nginx(root) as n:` serves `root` at n.url;
    `with S3rver(folder, bucket) as s:` runs s3rver at s.endpoint; `s.upload(dir, prefix)`
    puts a folder's files into the bucket; `with FaultProxy(upstream_port) as p:` relays
    to nginx and injects faults;
  * as a wrapper around a test binary (registered with ctest):
      servers.py --root DIR -- COMMAND...      (or --fixtures: see make_fixtures)
    starts all three, exports SY_TEST_HTTP_URL, SY_TEST_PROXY_URL, SY_TEST_S3_ENDPOINT and
    SY_TEST_S3_BUCKET (files of DIR are served by nginx and uploaded to the bucket under
    the same names), runs COMMAND, stops the servers and exits with COMMAND's status.
    Exits 77 (ctest's skip code) with a message when nginx or node is not installed.

Fault proxy paths: /_f/SPEC/REST relays REST to nginx, where SPEC is a comma-separated
list of KIND[:ARG][xCOUNT] (COUNT = how many requests of this exact path get the fault;
no COUNT = all of them):
  503xN         answer 503 (plain)          slowdownxN   answer 503 with an S3 SlowDown body
  429xN         answer 429                  403 / 404    answer that status
  reset xN      close the connection before answering
  drop:BYTESxN  GET: send headers and BYTES bytes of the body, then close the connection
  stall:BYTESxN GET: send headers and BYTES bytes, then go silent for 60 s
  hang:BYTESxN  GET: send headers and BYTES bytes, then nothing, the connection left open
                until the client closes it (or 10 minutes pass)
  slow:BPSxN    GET: send the body at BPS bytes per second (slow:1 is a byte a second)
  norangexN     GET: ignore Range, as some servers do: 200 with the whole object
  redirectxN    GET and HEAD: answer 302 to the same object on nginx
  chunkedxN     GET: send the body with Transfer-Encoding: chunked (no Content-Length)
  badrangexN    GET: answer 206 with a Content-Range that starts one byte later
  otheretagxN   GET: answer with another ETag than the object's (a HEAD gets the real one)
  pass[:N]      relay unchanged (a path of its own in /_stats; N tells such paths apart)
Every request through the proxy is counted in /_stats (JSON: path -> [method, range]...);
FaultProxy.sent_bytes() says how many body bytes went out per path.
"""
import argparse
import http.client
import http.server
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
S3RVER = os.path.join(HERE, "node_modules", ".bin", "s3rver")
SKIP = 77


def free_port():
    """A loopback TCP port that is free now, for a process started next to listen on.

    Chosen at random below the kernel's ephemeral range when there is room there: a port
    the kernel hands out itself (bind to port 0) is one any outgoing connection of a test
    running beside this one may take before our process binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    rng = random.SystemRandom()
    for _ in range(200 if low > 12000 else 0):
        port = rng.randrange(10000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


def missing_tools():
    out = []
    if not shutil.which("nginx") and not os.path.exists("/usr/sbin/nginx"):
        out.append("nginx (apt-get install nginx)")
    if not shutil.which("node"):
        out.append("node (apt-get install nodejs npm)")
    elif not os.path.exists(S3RVER):
        out.append(f"s3rver (cd {HERE} && npm ci)")
    return out


class _Process:
    proc = None

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Nginx(_Process):
    """nginx serving `root` on 127.0.0.1 (range requests answered with 206)."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.dir = tempfile.mkdtemp(prefix="sy-nginx-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        d = self.dir
        for t in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(f"{d}/tmp/{t}", exist_ok=True)
        with open(f"{d}/nginx.conf", "w") as f:
            # As root, nginx's workers would drop to "nobody", who cannot read a private
            # temporary folder: keep them as the user who runs the tests.
            user = "user root root;\n" if os.geteuid() == 0 else ""
            f.write(f"""daemon off;
{user}worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  keepalive_timeout 75s;
  default_type application/octet-stream;
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  server {{
    listen 127.0.0.1:{self.port};
    root {self.root};
    location / {{ }}
  }}
}}
""")
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.proc = subprocess.Popen([nginx, "-p", d, "-c", f"{d}/nginx.conf", "-e", f"{d}/error.log"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc, "nginx")
        return self

    def __exit__(self, *exc):
        super().__exit__(*exc)
        shutil.rmtree(self.dir, ignore_errors=True)


class S3rver(_Process):
    """s3rver (any signature accepted, path-style) with one bucket."""

    def __init__(self, bucket="bucket"):
        self.bucket = bucket
        self.dir = tempfile.mkdtemp(prefix="sy-s3rver-")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.proc = subprocess.Popen(
            [S3RVER, "-d", self.dir, "-a", "127.0.0.1", "-p", str(self.port), "--silent",
             "--no-vhost-buckets", "--configure-bucket", self.bucket],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            # s3rver 3.7 makes continuation tokens with a cipher that OpenSSL 3 (node 17+)
            # only has in its legacy provider: without it the second listing page is a 500.
            env=dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider"))
        wait_port(self.port, self.proc, "s3rver")
        return self

    def __exit__(self, *exc):
        super().__exit__(*exc)
        shutil.rmtree(self.dir, ignore_errors=True)

    def put(self, key, data):
        req = urllib.request.Request(f"{self.endpoint}/{self.bucket}/{key}", data=data, method="PUT")
        with urllib.request.urlopen(req, timeout=30) as r:
            if r.status != 200:
                raise RuntimeError(f"PUT {key}: HTTP {r.status}")

    def upload(self, folder, prefix=""):
        """Puts every file under `folder` at PREFIX + its relative path; returns the count."""
        n = 0
        for base, _, files in os.walk(folder):
            for name in sorted(files):
                path = os.path.join(base, name)
                rel = os.path.relpath(path, folder).replace(os.sep, "/")
                with open(path, "rb") as f:
                    self.put(prefix + rel, f.read())
                n += 1
        return n


class _FaultHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._relay(head=True)

    def do_GET(self):
        self._relay(head=False)

    def _fault(self):
        """(kind, arg) of the fault this request gets, and the upstream path."""
        path = self.path
        if not path.startswith("/_f/"):
            return None, None, path
        spec, _, rest = path[4:].partition("/")
        rest = "/" + rest
        srv = self.server
        if not srv.enabled:
            return None, None, rest
        for item in spec.split(","):
            kind, _, count = item.partition("x")
            kind, _, arg = kind.partition(":")
            if kind in ("drop", "stall", "hang", "slow", "norange", "chunked",
                        "badrange", "otheretag") and self.command != "GET":
                continue
            with srv.lock:
                key = (path, item)
                used = srv.counts.get(key, 0)
                if count and used >= int(count):
                    continue
                srv.counts[key] = used + 1
            return kind, int(arg) if arg else 0, rest
        return None, None, rest

    def _status(self, code, body=b"", ctype="text/plain"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _relay(self, head):
        srv = self.server
        with srv.lock:
            srv.log.append([self.path, self.command, self.headers.get("Range", "")])
        if self.path == "/_stats":
            return self._status(200, json.dumps(srv.log).encode(), "application/json")
        kind, arg, upstream_path = self._fault()
        if kind == "reset":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if kind in ("503", "429", "403", "404"):
            return self._status(int(kind), b"injected\n")
        if kind == "slowdown":
            body = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                    b"<Message>Please reduce your request rate.</Message></Error>")
            return self._status(503, body, "application/xml")
        if kind == "redirect":
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{srv.upstream_port}{upstream_path}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        conn = http.client.HTTPConnection("127.0.0.1", srv.upstream_port, timeout=60)
        relayed = ("if-match",) if kind == "norange" else ("range", "if-match")
        headers = {k: v for k, v in self.headers.items() if k.lower() in relayed}
        conn.request(self.command, upstream_path, headers=headers)
        resp = conn.getresponse()
        self.send_response(resp.status)
        dropped = ("connection", "keep-alive", "transfer-encoding", "server", "date")
        if kind == "chunked":
            dropped += ("content-length",)
            self.send_header("Transfer-Encoding", "chunked")
        for k, v in resp.getheaders():
            if k.lower() not in dropped:
                if kind == "badrange" and k.lower() == "content-range":
                    first, rest = v.split(" ", 1)[1].split("-", 1)
                    v = f"bytes {int(first) + 1}-{rest}"
                if kind == "otheretag" and k.lower() == "etag":
                    v = '"other-' + v.strip('"W/') + '"'
                self.send_header(k, v)
        self.end_headers()
        if head:
            resp.read()
            conn.close()
            return
        if kind == "chunked":
            while True:
                chunk = resp.read(65536)
                self._send(b"%x\r\n" % len(chunk) + chunk + b"\r\n", upstream_path)
                if not chunk:
                    break
            conn.close()
            return
        sent = 0
        try:
            while True:
                chunk = resp.read(65536)
                if not chunk:
                    break
                if kind == "slow":
                    for i in range(0, len(chunk), max(1, arg)):
                        self._send(chunk[i:i + max(1, arg)], upstream_path)
                        time.sleep(1)
                    sent += len(chunk)
                    continue
                if kind in ("drop", "stall", "hang") and sent + len(chunk) >= arg:
                    self._send(chunk[: max(0, arg - sent)], upstream_path)
                    if kind == "stall":
                        time.sleep(60)
                    if kind == "hang":
                        self._wait_for_close(600)
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                self._send(chunk, upstream_path)
                sent += len(chunk)
        except OSError:  # the client went away
            self.close_connection = True
        finally:
            conn.close()

    def _send(self, data, path):
        self.wfile.write(data)
        self.wfile.flush()
        with self.server.lock:
            self.server.sent[path] = self.server.sent.get(path, 0) + len(data)

    def _wait_for_close(self, seconds):
        """Sends nothing until the client closes the connection (or `seconds` pass)."""
        self.connection.settimeout(1)
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                if not self.connection.recv(1, socket.MSG_PEEK):
                    return
            except socket.timeout:
                continue
            except OSError:
                return


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that drops a connection (as the faults make them) is no news
        super().handle_error(request, client_address)


class FaultProxy:
    """An HTTP relay to 127.0.0.1:upstream_port that injects the faults its paths name."""

    def __init__(self, upstream_port):
        self.server = _QuietServer(("127.0.0.1", 0), _FaultHandler)
        self.server.daemon_threads = True
        self.server.upstream_port = upstream_port
        self.server.lock = threading.Lock()
        self.server.counts = {}
        self.server.log = []
        self.server.sent = {}  # upstream path -> body bytes sent
        self.server.enabled = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def requests(self):
        with self.server.lock:
            return list(self.server.log)

    def set_faults(self, enabled):
        """Turns every fault off (relay as they are) or on again."""
        with self.server.lock:
            self.server.enabled = enabled

    def sent_bytes(self):
        """Body bytes sent so far, by upstream path (the path without its /_f/SPEC part)."""
        with self.server.lock:
            return dict(self.server.sent)


def blob_byte(i):
    """Byte i of fixture remote/blob.bin (tests/io/remote/remote_file_system_test.cc knows it)."""
    return (i * 7 + (i >> 12)) & 0xFF


def make_fixtures(root):
    """remote/blob.bin (3 MiB + 123 bytes) and many/obj-NNNN.tar (1001 tiny objects: more
    than one S3 listing page)."""
    os.makedirs(f"{root}/remote", exist_ok=True)
    n = 3 * 1024 * 1024 + 123
    with open(f"{root}/remote/blob.bin", "wb") as f:
        f.write(bytes(blob_byte(i) for i in range(n)))
    os.makedirs(f"{root}/many", exist_ok=True)
    for i in range(1001):
        with open(f"{root}/many/obj-{i:04d}.tar", "wb") as f:
            f.write(b"x" * (i % 7))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", help="folder served by nginx and uploaded to S3")
    ap.add_argument("--fixtures", action="store_true",
                    help="serve a fresh folder of the fixtures of remote_file_system_test")
    ap.add_argument("--bucket", default="sy-test")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    missing = missing_tools()
    if missing:
        print("SKIPPED: remote-source tests need " + ", ".join(missing) +
              "; scripts/test.sh installs them", file=sys.stderr)
        return SKIP
    if args.fixtures:
        tmp = tempfile.mkdtemp(prefix="sy-remote-fixtures-")
        try:
            make_fixtures(tmp)
            return serve_and_run(tmp, args.bucket, cmd)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if not args.root:
        ap.error("give --root DIR or --fixtures")
    return serve_and_run(args.root, args.bucket, cmd)


def serve_and_run(root, bucket, cmd):
    with Nginx(root) as ng, S3rver(bucket) as s3, FaultProxy(ng.port) as px:
        s3.upload(root)
        env = dict(os.environ, SY_TEST_HTTP_URL=ng.url, SY_TEST_PROXY_URL=px.url,
                   SY_TEST_S3_ENDPOINT=s3.endpoint, SY_TEST_S3_BUCKET=s3.bucket,
                   SY_TEST_ROOT=os.path.abspath(root))
        return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
