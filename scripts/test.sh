#!/usr/bin/env bash
# The whole test suite: set up, build, run every test (unit, actors, end to end, example,
# remote sources against nginx, s3rver and a fault proxy that the tests start themselves),
# then rebuild with AddressSanitizer + UndefinedBehaviorSanitizer and run the tests again,
# then build the actor, data-plane, end-to-end and example tests with clang and
# ThreadSanitizer (clang also checks the thread-safety annotations) and run them, then build
# the libFuzzer targets with clang (tar reader, HTTP/S3 response parsers, checkpoint
# formats, manifests, window specs, the shared-memory data plane's decoders) and fuzz each
# for a bounded time.
# Usage: scripts/test.sh   (SY_SKIP_SANITIZE=1 / SY_SKIP_TSAN=1 / SY_SKIP_FUZZ=1 leave parts out)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# The wall time of each part, printed when the script ends, passed or not (a CI log may
# keep only its tail). sy_mark PART: the time since the last mark was PART's.
sy_times=""
sy_last_mark=$(date +%s)
sy_mark() {
  local now
  now=$(date +%s)
  sy_times+="$(printf '  %-24s %5d s' "$1" $((now - sy_last_mark)))"$'\n'
  sy_last_mark=$now
}
sy_print_times() {
  printf '== wall time per part\n%s' "$sy_times"
  printf '  %-24s %5d s\n' "(since the last part)" $(($(date +%s) - sy_last_mark))
}
sy_install_packages
sy_install_test_servers
export SHARDYARD_CACHE_DIR="$(mktemp -d /tmp/shardyard-test-cache.XXXXXX)"
trap 'sy_print_times; rm -rf "$SHARDYARD_CACHE_DIR"' EXIT
sy_mark "set-up"

echo "== build (RelWithDebInfo) and test"
mkdir -p "$SY_ROOT/build"
sy_build "$SY_ROOT/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDYARD_BENCHMARKS=ON
sy_mark "build RelWithDebInfo"
(cd "$SY_ROOT/build" && ctest --output-on-failure -j "$SY_JOBS" --timeout 600)
sy_mark "test RelWithDebInfo"

if [ "${SY_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== build with ASan + UBSan and test"
  mkdir -p "$SY_ROOT/build-asan"
  sy_build "$SY_ROOT/build-asan" -DCMAKE_BUILD_TYPE=Debug -DSHARDYARD_SANITIZE=ON \
    -DSHARDYARD_BENCHMARKS=OFF
  sy_mark "build ASan+UBSan"
  (cd "$SY_ROOT/build-asan" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    LSAN_OPTIONS=suppressions=$SY_ROOT/tests/lsan.supp \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure -j "$SY_JOBS" --timeout 900)
  sy_mark "test ASan+UBSan"
fi

if [ "${SY_SKIP_TSAN:-0}" != 1 ]; then
  echo "== build with ThreadSanitizer (clang: thread-safety annotations checked too) and test"
  mkdir -p "$SY_ROOT/build-tsan"
  # What runs threads: the actors, their state classes, the data plane, the remote file
  # systems (the I/O pool, name lookups), the command line, the examples. tests/CMakeLists.txt
  # labels those tests `tsan`, and its target tsan_suite builds what they run.
  SY_TARGETS="tsan_suite" \
    sy_build "$SY_ROOT/build-tsan" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSHARDYARD_TSAN=ON -DSHARDYARD_BENCHMARKS=OFF
  sy_mark "build TSan"
  # tests/tsan.supp says why each suppression is there (all are inside CAF).
  # Reports go to files (a test's harness keeps only the end of a process's stderr), and a
  # failed run ends with a digest of them (scripts/sanitizer_digest.py).
  tsan_reports="$SY_ROOT/build-tsan/tsan-reports"
  rm -rf "$tsan_reports" && mkdir -p "$tsan_reports"
  tsan_rc=0
  (cd "$SY_ROOT/build-tsan" && \
    TSAN_OPTIONS="halt_on_error=1 history_size=7 demangle=0 second_deadlock_stack=1 suppressions=$SY_ROOT/tests/tsan.supp log_path=$tsan_reports/report" \
    ctest --output-on-failure -j "$SY_JOBS" --timeout 900 -L tsan) || tsan_rc=$?
  sy_mark "test TSan"
  if [ "$tsan_rc" -ne 0 ]; then
    python3 "$SY_ROOT/scripts/sanitizer_digest.py" "$tsan_reports"
    exit "$tsan_rc"
  fi
fi

if [ "${SY_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== build the fuzz targets (libFuzzer)"
  mkdir -p "$SY_ROOT/build-fuzz"
  cmake -S "$SY_ROOT" -B "$SY_ROOT/build-fuzz" -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDYARD_FUZZ=ON -DSHARDYARD_TESTS=ON \
    -DSHARDYARD_BENCHMARKS=OFF >"$SY_ROOT/build-fuzz.configure.log"
  cmake --build "$SY_ROOT/build-fuzz" -j "$SY_JOBS" --target tar_fuzz http_fuzz checkpoint_fuzz \
    manifest_fuzz window_fuzz transport_fuzz net_fuzz net_corpus_writer worker_frame_fuzz
  sy_mark "build fuzz targets"
  # sy_fuzz TARGET CORPUS SECONDS: fuzz a copy of the seed corpus (a folder of tests/fuzz,
  # or an absolute path) for a bounded time.
  # Findings go to build-fuzz/artifacts/TARGET/ (never the repository root); a finding
  # fails the run and its file is what to add to the corpus as a regression seed.
  sy_fuzz() {
    local corpus artifacts rc=0
    corpus="$(mktemp -d /tmp/shardyard-fuzz.XXXXXX)"
    artifacts="$SY_ROOT/build-fuzz/artifacts/$1"
    mkdir -p "$artifacts"
    local seeds="$SY_ROOT/tests/fuzz/$2"
    case "$2" in /*) seeds="$2" ;; esac
    cp "$seeds"/* "$corpus"/ 2>/dev/null || true
    "$SY_ROOT/build-fuzz/tests/fuzz/$1" -max_total_time="$3" -timeout=30 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" "$corpus" >"$artifacts.log" 2>&1 || rc=$?
    tail -n 5 "$artifacts.log"
    rm -rf "$corpus"
    if [ "$rc" -ne 0 ]; then
      echo "== $1 found a failing input (exit $rc): $artifacts/"; return "$rc"
    fi
  }
  # sy_fuzz_start WHAT TARGET CORPUS SECONDS: sy_fuzz in the background, SY_JOBS at a time.
  # A fuzzer is one process on one core (libFuzzer's default), so two cores fuzz two targets
  # in the time of one, each for its whole budget. Each one's output is printed, in order,
  # once all have ended; a finding fails the run then.
  fuzz_logs="$(mktemp -d /tmp/shardyard-fuzz-logs.XXXXXX)"
  fuzz_n=0
  sy_fuzz_start() {
    while [ "$(jobs -rp | wc -l)" -ge "$SY_JOBS" ]; do wait -n || true; done
    fuzz_n=$((fuzz_n + 1))
    local log="$fuzz_logs/$fuzz_n" what="$1"
    shift
    (
      rc=0
      echo "== fuzz $what (libFuzzer, bounded)"
      sy_fuzz "$@" || rc=$?
      echo "$rc" >"$log.rc"
    ) >"$log.out" 2>&1 &
  }
  # What net_fuzz starts from: valid messages of every type the gate takes, made fresh.
  rm -rf "$SY_ROOT/build-fuzz/net_corpus" && mkdir -p "$SY_ROOT/build-fuzz/net_corpus"
  "$SY_ROOT/build-fuzz/tests/fuzz/net_corpus_writer" "$SY_ROOT/build-fuzz/net_corpus"
  sy_fuzz_start "the tar reader" tar_fuzz corpus "${SY_FUZZ_SECONDS:-60}"
  sy_fuzz_start "the HTTP and S3 response parsers" http_fuzz http_corpus \
    "${SY_FUZZ_HTTP_SECONDS:-20}"
  sy_fuzz_start "the checkpoint formats" checkpoint_fuzz checkpoint_corpus \
    "${SY_FUZZ_CHECKPOINT_SECONDS:-20}"
  sy_fuzz_start "the manifest format and its packed sample tables" manifest_fuzz \
    manifest_corpus "${SY_FUZZ_MANIFEST_SECONDS:-20}"
  sy_fuzz_start "what the coordinator decodes from the network" net_fuzz \
    "$SY_ROOT/build-fuzz/net_corpus" "${SY_FUZZ_NET_SECONDS:-20}"
  sy_fuzz_start "the window spec parser and window math" window_fuzz window_corpus \
    "${SY_FUZZ_WINDOW_SECONDS:-10}"
  sy_fuzz_start "the shared-memory data plane's decoders" transport_fuzz transport_corpus \
    "${SY_FUZZ_TRANSPORT_SECONDS:-10}"
  sy_fuzz_start "the control frames of worker processes" worker_frame_fuzz \
    worker_frame_corpus "${SY_FUZZ_WORKER_SECONDS:-10}"
  wait
  fuzz_rc=0
  for ((k = 1; k <= fuzz_n; k++)); do
    cat "$fuzz_logs/$k.out"
    r="$(cat "$fuzz_logs/$k.rc" 2>/dev/null || echo 1)"
    [ "$r" -eq 0 ] || fuzz_rc="$r"
  done
  rm -rf "$fuzz_logs"
  sy_mark "fuzz"
  [ "$fuzz_rc" -eq 0 ] || exit "$fuzz_rc"
fi
echo "== all tests passed"
