#pragma once
// The tokenizer of loom's tiny test models: a Hugging Face tokenizer.json with
// a byte-level BPE model of exactly 256 byte tokens (id = byte value, no
// merges) plus every DeepSeek-V4 special string (dsv4_tokens.h) as a special
// added token, numbered from 256 in kAllSpecial order. Hugging Face
// tokenizers loads it and gives the same ids as loom.

#include <string>

namespace loom::tokenizer {

// The tokenizer.json text (deterministic: same bytes on every call).
std::string TinyTokenizerJson();

// Number of ids of the tiny tokenizer (256 bytes + the special strings);
// tiny models use it as vocab_size.
int TinyTokenizerVocabSize();

}  // namespace loom::tokenizer
