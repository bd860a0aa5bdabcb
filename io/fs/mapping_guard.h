// Guarded file mappings: memory maps of local files that survive the file being cut short.
//
// Touching a page of a file mapping that lies past the file's end raises SIGBUS, whose
// default action kills the process: a shard truncated while a run reads it (another
// process rewriting the dataset, a full disk) would end the run with no message. Checking
// the size before mapping is not enough, since the file can shrink at any time after. So
// every mapping that LocalFile::map() makes is registered here, and the first registration
// installs a SIGBUS handler. For a fault inside a registered mapping the handler puts
// zero-filled anonymous memory over the rest of that mapping (the faulting copy completes
// and reads zeros) and records the fault; a fault anywhere else goes on to the handler
// installed before this one (or the default action), as if this one were not there. A
// SIGBUS handler that the embedding program installs later replaces this one (it should
// chain to it, as this one chains to the one before).
//
// Bytes that came from a mapping may therefore be zeros once a fault is recorded. Whoever
// hands bytes on (the loader, before it returns a batch) calls mapping_fault(): after a
// fault it is the error naming the file, and stays so for the rest of the process, because
// any buffer built since may hold zeros. A fault is damage of the data set, not something
// to retry. Copies made before the fault are the file's old bytes, whole and correct.
//
// Thread-safe and lock-free: registration, removal and the handler use atomics only. At
// most kMaxGuardedMappings mappings are registered at once; beyond that guard_mapping()
// refuses and the caller reads instead of mapping.
#pragma once

#include <cstddef>
#include <string>

#include "runtime/status.h"

namespace shardyard::io {

inline constexpr size_t kMaxGuardedMappings = 4096;

// Registers [base, base + length) (page-aligned base) as a mapping of `uri`, which must
// outlive the registration. Returns a slot for unguard_mapping(), or -1 when every slot is
// taken or the handler cannot be installed (then do not map). Installs the handler once.
int guard_mapping(const void* base, size_t length, const std::string* uri);
// Before munmap(): the range is no longer guarded.
void unguard_mapping(int slot);

// OK until a guarded mapping has faulted; then kCorrupt naming the first file that was cut
// short while mapped, for every later call.
Status mapping_fault();

}  // namespace shardyard::io
