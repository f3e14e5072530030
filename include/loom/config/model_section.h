#pragma once
// `model:` — which model the run starts from, and how to create it if absent.

#include <map>
#include <string>

#include "loom/config/schema.h"

namespace loom::config {

struct ModelSection {
  std::string path;                         // required; HF-layout model directory
  std::string arch;                         // "" = the directory must exist
  std::map<std::string, std::string> init;  // config.json overrides when creating
  std::string init_tokenizer = "bytes";
  std::string dtype = "float32";
  std::string autocast = "none";
  std::string device = "auto";

  template <class V>
  void Visit(V& v) {
    v.Field("path", path,
            Doc("Model directory in the Hugging Face layout (config.json, *.safetensors, "
                "tokenizer.json). Relative paths are relative to the working directory.")
                .Required());
    v.Field("arch", arch,
            Doc("If set and `path` does not exist, a fresh model of this architecture is created "
                "there (as `loom init-model` does). Empty: the directory must exist.")
                .OneOf({"", "llama", "qwen2", "qwen3", "qwen3_moe"}));
    v.Field("init", init,
            Doc("config.json keys for a created model (e.g. hidden_size: 128). Ignored when the "
                "model exists."));
    v.Field("init_tokenizer", init_tokenizer,
            Doc("The tokenizer of a created model: `bytes` (a token per byte, plus the chat "
                "format's special tokens) or `bytes+effort` (also one token for each fixed part "
                "of the effort line, `Reasoning Effort: ` and its range note, so a prompt with a "
                "numeric effort is 80 positions shorter and small tasks train faster). Ignored "
                "when the model exists.")
                .OneOf({"bytes", "bytes+effort"}));
    v.Field("dtype", dtype,
            Doc("Parameter and compute dtype. bfloat16 halves memory and is faster on GPUs; "
                "float32 is exact on CPU.")
                .OneOf({"float32", "bfloat16"}));
    v.Field("autocast", autocast,
            Doc("Mixed precision for training: bfloat16 runs the layers' matrix products of the "
                "training forward and backward in bfloat16 while the parameters, the optimizer, "
                "norms, softmaxes and log-probs stay in `dtype`. The products run several times "
                "faster on CPUs with AMX and on GPUs, slower on CPUs without bfloat16 "
                "instructions; what a step gains depends on their share of it "
                "(docs/PERFORMANCE.md). Decoding is unaffected.")
                .OneOf({"none", "bfloat16"}));
    v.Field("device", device,
            Doc("Where the model lives: auto picks cuda when LibTorch sees a GPU, else cpu.")
                .OneOf({"auto", "cpu", "cuda"}));
  }
};

}  // namespace loom::config
