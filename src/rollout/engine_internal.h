#pragma once
// RolloutEngine's private records, shared by its implementation files.

#include <cstdint>

#include "loom/model/kv_pool.h"
#include "loom/rollout/engine.h"
#include "loom/rollout/sample_state.h"

namespace loom::rollout {

struct RolloutEngine::Sample {
  SampleState state;     // state.kv holds the KV only while it is off the device
  model::KvSequence kv;  // device blocks; kv.length tokens of state.tokens are cached
  uint64_t arrival = 0;  // order of Add/Import: older samples have priority

  bool HasDeviceKv() const { return !kv.blocks.empty() || kv.length > 0; }
  bool HasHostKv() const { return state.kv.key.defined(); }
  // Tokens whose KV exists somewhere (device or host).
  int64_t KvTokens() const { return HasHostKv() ? state.kv.length : kv.length; }
  // Tokens still to be fed before the next token can be sampled.
  int64_t Pending() const { return state.length() - KvTokens(); }
};

// One sample's share of a step: feed tokens[kv.length, kv.length + count).
struct RolloutEngine::Plan {
  Sample* sample = nullptr;
  int64_t count = 0;
};

}  // namespace loom::rollout
