#include "io/fs/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace shardyard::io {

namespace {

// A registered mapping. state: 0 free, 1 being filled or emptied, 2 live. The handler reads
// only live slots; a slot's fields are written before it turns live (release) and read
// after it was seen live (acquire).
struct Slot {
  std::atomic<int> state{0};
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> length{0};
  std::atomic<const std::string*> uri{nullptr};
};

Slot g_slots[kMaxGuardedMappings];
std::atomic<size_t> g_hint{0};  // where the next registration starts looking
struct sigaction g_previous;    // written once, before any slot turns live
size_t g_page = 4096;
bool g_installed = false;

// Faults so far (counted before anything else, so that no reader can miss one), and the
// first fault's file name, copied by the handler (no allocation there) and published by
// g_fault_named.
std::atomic<uint64_t> g_faults{0};
std::atomic<bool> g_fault_claimed{false};
std::atomic<bool> g_fault_named{false};
char g_fault_uri[4096];

// What the handler installed before ours would have done; for SIG_DFL (and SIG_IGN, which
// the kernel overrides for a fault) the default is restored and the faulting instruction
// runs again, so the process ends as it would have without this handler.
void forward(int sig, siginfo_t* info, void* context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
}

void record_fault(const std::string* uri) {
  g_faults.fetch_add(1);
  bool expected = false;
  if (!g_fault_claimed.compare_exchange_strong(expected, true)) return;  // not the first
  size_t n = uri == nullptr ? 0 : std::min(uri->size(), sizeof g_fault_uri - 1);
  for (size_t i = 0; i < n; ++i) g_fault_uri[i] = (*uri)[i];
  g_fault_uri[n] = '\0';
  g_fault_named.store(true, std::memory_order_release);
}

// Async-signal-safe: atomics, mmap and sigaction only.
void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (auto& s : g_slots) {
    if (s.state.load(std::memory_order_acquire) != 2) continue;
    const uintptr_t base = s.base.load(std::memory_order_relaxed);
    const size_t length = s.length.load(std::memory_order_relaxed);
    if (addr < base || addr >= base + length) continue;
    // Zeros over the rest of this mapping: the copy that faulted, and any later touch of the
    // missing pages, reads them instead of faulting again.
    const uintptr_t page = addr & ~static_cast<uintptr_t>(g_page - 1);
    void* at = ::mmap(reinterpret_cast<void*>(page), base + length - page, PROT_READ,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (at == MAP_FAILED) break;
    record_fault(s.uri.load(std::memory_order_relaxed));
    return;
  }
  forward(sig, info, context);
}

bool install() {
  static std::once_flag once;
  std::call_once(once, [] {
    long page = ::sysconf(_SC_PAGESIZE);
    if (page > 0) g_page = static_cast<size_t>(page);
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    g_installed = ::sigaction(SIGBUS, &sa, &g_previous) == 0;
  });
  return g_installed;
}

}  // namespace

int guard_mapping(const void* base, size_t length, const std::string* uri) {
  if (!install()) return -1;
  const size_t start = g_hint.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < kMaxGuardedMappings; ++i) {
    const size_t k = (start + i) % kMaxGuardedMappings;
    Slot& s = g_slots[k];
    int free_state = 0;
    if (!s.state.compare_exchange_strong(free_state, 1, std::memory_order_acquire)) continue;
    s.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_relaxed);
    s.length.store(length, std::memory_order_relaxed);
    s.uri.store(uri, std::memory_order_relaxed);
    s.state.store(2, std::memory_order_release);
    return static_cast<int>(k);
  }
  return -1;
}

void unguard_mapping(int slot) {
  if (slot < 0 || static_cast<size_t>(slot) >= kMaxGuardedMappings) return;
  Slot& s = g_slots[slot];
  s.state.store(1, std::memory_order_relaxed);
  s.base.store(0, std::memory_order_relaxed);
  s.length.store(0, std::memory_order_relaxed);
  s.uri.store(nullptr, std::memory_order_relaxed);
  s.state.store(0, std::memory_order_release);
}

Status mapping_fault() {
  if (g_faults.load() == 0) return Status::ok();
  // The first faulting thread names the file right after it counted the fault; until then
  // the message cannot name it (a race of microseconds).
  std::string uri = "a memory-mapped shard", now;
  if (g_fault_named.load(std::memory_order_acquire)) {
    uri = g_fault_uri;
    struct stat st {};
    if (::stat(uri.c_str(), &st) == 0) now = " (now " + std::to_string(st.st_size) + " bytes)";
  }
  return corrupt(uri + ": changed during the run: the file was cut short" + now +
                 " while it was being read, so bytes read since may be wrong; the run stops "
                 "here (restore the file, or rebuild the manifest and start again)");
}

}  // namespace shardyard::io
