#pragma once
// `rollout:` — the generation engine: batch shape, KV pool, sampling defaults,
// what happens to in-flight samples when the weights change, and how a full
// KV pool makes room.

#include <cstdint>
#include <string>

#include "loom/config/schema.h"

namespace loom::config {

// Sharing the KV blocks of common token prefixes between samples.
struct PrefixCacheSection {
  bool enabled = false;
  int64_t max_version_lag = 0;
  bool keep_released = false;

  template <class V>
  void Visit(V& v) {
    v.Field("enabled", enabled,
            Doc("Samples whose tokens start alike (a GRPO group's prompt, a harness's system "
                "prompt, the earlier turns of a conversation) share the KV blocks of that prefix "
                "instead of each prefilling and holding its own copy. Blocks no sample holds "
                "are freed, or kept cached with keep_released."));
    v.Field("max_version_lag", max_version_lag,
            Doc("How many policy versions old a cached block may be and still be reused by a new "
                "sample. 0 reuses only KV computed by the current weights. Higher saves more "
                "prefill after each optimizer step, at the price of rollout log-probs computed "
                "on stale prefix KV, which raises their mismatch with the trainer's (docs/"
                "rollout.md).")
                .Unit("versions")
                .Min(0));
    v.Field("keep_released", keep_released,
            Doc("Keep the blocks no sample holds any more (finished samples' prompts, a "
                "conversation's earlier turns) cached for later samples, evicted least recently "
                "used. Off, a block is shared only while some sample holds it, and the engine's "
                "whole state is in its samples, so a run resumed from a checkpoint is "
                "bit-identical to the uninterrupted one; on, a resumed run starts with an empty "
                "cache and is not (docs/rollout.md)."));
  }
};

struct RolloutSection {
  int64_t max_batch = 64;            // samples in the running batch at once
  int64_t step_token_budget = 2048;  // tokens fed to the model per step (decode + prefill)
  int64_t block_size = 16;           // tokens per KV block
  int64_t pool_tokens = 65536;       // KV pool capacity in tokens (rounded up to blocks)
  int64_t max_new_tokens = 512;      // default generation limit per sample
  double temperature = 1.0;          // 0 = greedy
  double top_p = 1.0;
  int64_t top_k = 0;  // 0 = whole vocabulary
  std::string on_weight_update = "keep";
  std::string preemption = "recompute";
  bool offload_parked = false;      // move parked samples' KV to host before training
  PrefixCacheSection prefix_cache;  // share KV blocks of common prefixes

  template <class V>
  void Visit(V& v) {
    v.Field("max_batch", max_batch,
            Doc("Samples in the running batch at once (prefilling or decoding). More raises "
                "decode throughput and KV memory.")
                .Unit("samples")
                .Min(1));
    v.Field("step_token_budget", step_token_budget,
            Doc("Tokens fed to the model per engine step: one per decoding sample, the rest for "
                "prompt chunks. Smaller keeps steps (and interruption latency) short; larger "
                "prefills faster.")
                .Unit("tokens")
                .Min(1));
    v.Field("block_size", block_size,
            Doc("Tokens per paged KV block. Smaller wastes less memory on partial blocks.")
                .Unit("tokens")
                .Range(1, 4096));
    v.Field("pool_tokens", pool_tokens,
            Doc("Capacity of the KV block pool. When it is full, admission waits and running "
                "samples are preempted (see `preemption`).")
                .Unit("tokens")
                .Min(1));
    v.Field("max_new_tokens", max_new_tokens,
            Doc("Default limit on generated tokens per sample (a request may set its own).")
                .Unit("tokens")
                .Min(1));
    v.Field("temperature", temperature,
            Doc("Default sampling temperature; 0 is greedy. Behaviour log-probs are taken at "
                "this temperature (1 for greedy), before top-p/top-k truncation, and GRPO scores "
                "the policy at the same temperature so the importance ratios compare like with "
                "like.")
                .Range(0, 100));
    v.Field("top_p", top_p, Doc("Default nucleus sampling mass; 1 keeps every token.").Range(0, 1));
    v.Field("top_k", top_k,
            Doc("Default number of most likely tokens kept; 0 keeps every token.").Min(0));
    v.Field("on_weight_update", on_weight_update,
            Doc("What parked samples do when the weights changed while they were parked. keep: "
                "continue on their KV cache as it is (no re-prefill; only new tokens see the new "
                "weights). recompute: re-prefill their whole sequence with the new weights.")
                .OneOf({"keep", "recompute"}));
    v.Field("preemption", preemption,
            Doc("How a running sample that cannot get a KV block makes room: the most recently "
                "admitted sample is preempted. recompute: drop its blocks and re-prefill it "
                "later. swap: copy its KV to host memory and copy it back later.")
                .OneOf({"recompute", "swap"}));
    v.Field("offload_parked", offload_parked,
            Doc("Copy parked samples' KV to host memory and free their blocks while training "
                "runs, so training activations can use the device memory."));
    v.Section("prefix_cache", prefix_cache,
              Doc("Prefix sharing in the paged KV pool (docs/rollout.md)."));
  }
};

}  // namespace loom::config
