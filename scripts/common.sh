# Shared by demo.sh and test.sh: install what is missing from Debian, then configure and
# build. Sourced, not run. Safe to repeat: it installs nothing that is already there.
set -euo pipefail

SY_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SY_JOBS="${SY_JOBS:-$(nproc)}"

SY_PACKAGES=(
  cmake g++ make pkg-config ccache git lld
  libcaf-dev libssl-dev zlib1g-dev nlohmann-json3-dev libcli11-dev libcurl4-openssl-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  python3 tar gzip nginx libarchive-tools
  clang libclang-rt-14-dev llvm
  libdlpack-dev libjemalloc-dev
  libboost-dev prometheus
  python3-torch openmpi-bin
)

sy_install_packages() {
  local missing=()
  for p in "${SY_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then return 0; fi
  echo "== installing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "${missing[@]}"
}

# Node for the S3-compatible test server (tests/servers): Debian's nodejs and npm unless a
# node is already on the PATH (a NodeSource node brings its own npm, and Debian's npm
# package would conflict with it).
sy_install_node() {
  if command -v node >/dev/null && command -v npm >/dev/null; then return 0; fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "== installing Debian packages: nodejs npm"
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends nodejs npm
}

# The test servers' node packages (s3rver), pinned by tests/servers/package-lock.json.
sy_install_test_servers() {
  sy_install_node
  local dir="$SY_ROOT/tests/servers"
  if [ -x "$dir/node_modules/.bin/s3rver" ] && \
     [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then return 0; fi
  echo "== installing test servers (npm ci in tests/servers)"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
}

# sy_build DIR [cmake args...]: configure and build DIR (every target, or the targets
# named in $SY_TARGETS).
sy_build() {
  local dir="$1"; shift
  cmake -S "$SY_ROOT" -B "$dir" "$@" >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log"; return 1; }
  if [ -n "${SY_TARGETS:-}" ]; then
    # shellcheck disable=SC2086  # the list splits into targets on purpose
    cmake --build "$dir" -j "$SY_JOBS" --target $SY_TARGETS
  else
    cmake --build "$dir" -j "$SY_JOBS"
  fi
}
