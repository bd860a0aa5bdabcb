// A minimal trainer that embeds shardyard through its public API only (<shardyard/loader.h>):
// it registers a user stage that decodes the ascii label into a 4-byte integer field, opens
// a loader, and walks the epochs, treating the fixed-size "label" column as a [B] uint32
// tensor without copying it. It checks that every sample arrives once per epoch. With
// --checkpoint-dir it saves a checkpoint every --save-every steps; with --resume it
// continues from one (the number of workers may differ).
//
//   trainer --source '/data/shard-{000000..000015}.tar' --workers 2 --batch-size 32 --epochs 2
//   trainer ... --checkpoint-dir /ckpt --save-every 100     then     trainer ... --resume /ckpt
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

#include <shardyard/loader.h>

using namespace shardyard;

namespace {

// A user stage: "cls" holds an ascii label; add "label" as a little-endian uint32.
Status decode_label(Item& item, StageContext& ctx) {
  const Field* cls = item.field("cls");
  if (cls == nullptr) return invalid_argument("sample has no cls field");
  uint32_t label = 0;
  for (char c : cls->view()) {
    if (c < '0' || c > '9') return invalid_argument("cls is not a number");
    label = label * 10 + static_cast<uint32_t>(c - '0');
  }
  // Every stage sees its worker's identity, through the context and thread-locally.
  const WorkerInfo* me = current_worker();
  if (me == nullptr || me->global_worker != ctx.worker.global_worker)
    return internal_error("worker identity is not visible to the stage");
  std::string bytes(4, '\0');
  std::memcpy(bytes.data(), &label, 4);
  item.set_field("label", std::move(bytes));
  return Status::ok();
}

int fail(const Status& st) {
  std::fprintf(stderr, "trainer: %s\n", st.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  LoaderOptions opt;
  uint32_t epochs = 1;
  uint64_t save_every = 0;
  std::string checkpoint_dir, resume_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--source")
      opt.sources.push_back(value);
    else if (flag == "--workers")
      opt.workers = static_cast<uint32_t>(std::stoul(value));
    else if (flag == "--batch-size")
      opt.batch_size = static_cast<uint32_t>(std::stoul(value));
    else if (flag == "--epochs")
      epochs = static_cast<uint32_t>(std::stoul(value));
    else if (flag == "--checkpoint-dir")
      checkpoint_dir = value;
    else if (flag == "--save-every")
      save_every = std::stoull(value);
    else if (flag == "--resume")
      resume_dir = value;
    else
      return fail(invalid_argument("unknown flag " + flag));
  }
  opt.plan.shuffle = true;
  opt.plan.seed = 17;
  if (Status st = opt.topology_from_env(); !st.is_ok()) return fail(st);
  if (Status st = opt.monitor_from_env(); !st.is_ok()) return fail(st);  // SHARDYARD_METRICS_PORT
  if (Status st = StageRegistry::global().add("decode_label", map_stage(decode_label)); !st.is_ok())
    return fail(st);
  opt.pipeline.map("decode_label").map("drop_fields", {{"fields", "json"}});

  auto loader = Loader::open(opt);
  if (!loader.is_ok()) return fail(loader.status());
  if (uint16_t port = (*loader)->cluster().monitor_port(); port > 0)
    std::fprintf(stderr, "monitor: http://%s:%u/status\n", opt.metrics_address.c_str(), port);
  // Resuming: the checkpoint says which epoch (and step) to continue.
  uint32_t first_epoch = 0;
  uint64_t first_step = 0;
  if (!resume_dir.empty()) {
    auto point = (*loader)->restore(resume_dir);
    if (!point.is_ok()) return fail(point.status());
    first_epoch = point->epoch;
    first_step = point->step;
  }
  uint64_t total = 0, label_sum = 0, saves = 0;
  for (uint32_t epoch = first_epoch; epoch < epochs; ++epoch) {
    if (Status st = (*loader)->start_epoch(epoch); !st.is_ok()) return fail(st);
    const bool resumed = epoch == first_epoch && first_step > 0;
    std::set<std::string> seen;
    for (;;) {
      auto batch = (*loader)->next();
      if (!batch.is_ok()) return fail(batch.status());
      if (!batch->has_value()) break;
      const Batch& b = **batch;
      if (b.size() == 0) continue;  // a rank with fewer items than steps (see docs/sharding.md)
      const Column* label = b.field("label");
      if (label == nullptr || label->fixed_size() != 4 || b.field("json") != nullptr)
        return fail(internal_error("the pipeline's columns are not as expected"));
      // A fixed-size column is a contiguous [B] array: use it in place.
      const auto* labels = reinterpret_cast<const uint32_t*>(label->data());
      for (size_t i = 0; i < b.size(); ++i) label_sum += labels[i];
      for (const auto& k : b.keys())
        if (!seen.insert(k).second) return fail(internal_error("sample " + k + " arrived twice"));
      total += b.size();
      // Every rank saves after the same steps; save() returns once the cut is committed.
      if (!checkpoint_dir.empty() && save_every > 0 && (b.step() + 1) % save_every == 0) {
        if (Status st = (*loader)->save(checkpoint_dir); !st.is_ok()) return fail(st);
        ++saves;
      }
    }
    uint64_t expected = (*loader)->manifest().num_samples();
    if (opt.world_size == 1 && !resumed && seen.size() != expected)
      return fail(internal_error("epoch " + std::to_string(epoch) + " delivered " +
                                 std::to_string(seen.size()) + " of " + std::to_string(expected) +
                                 " samples"));
  }
  std::printf("ok: %u epochs, %llu samples, label sum %llu, %llu checkpoints\n",
              epochs - first_epoch, static_cast<unsigned long long>(total),
              static_cast<unsigned long long>(label_sum), static_cast<unsigned long long>(saves));
  return 0;
}
