// What `shardyard run --device` does with each batch in place of a trainer: waits until its
// columns are on the device and, with --check-device, copies each back and compares it
// with the host column (a self-test of the device path). Thread-safe.
#pragma once

#include "runtime/batch.h"
#include "runtime/status.h"

namespace shardyard::tools {

Status consume_on_device(const Batch& batch, bool check);

}  // namespace shardyard::tools
