// The safetensors reader (mmap, every header field checked against the file)
// and writer.

#include "loom/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "loom/config/files.h"

namespace loom::model {
namespace {

using nlohmann::json;

// Headers above this are refused before allocating (the format's own reader
// uses 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DtypeInfo {
  const char* name;
  at::ScalarType type;
  int64_t size;
};

const DtypeInfo kDtypes[] = {
    {"F32", at::kFloat, 4}, {"F16", at::kHalf, 2}, {"BF16", at::kBFloat16, 2},
    {"I64", at::kLong, 8},  {"I32", at::kInt, 4},  {"I16", at::kShort, 2},
    {"U8", at::kByte, 1},
};

const DtypeInfo* DtypeByName(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const DtypeInfo* DtypeByType(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (type == d.type) return &d;
  }
  return nullptr;
}

// A read-only mapping of a whole file, unmapped when the last tensor goes.
class Mapping {
 public:
  Mapping(void* data, size_t size) : data_(data), size_(size) {}
  ~Mapping() {
    if (data_ != nullptr && size_ > 0) munmap(data_, size_);
  }
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(data_); }
  size_t size() const { return size_; }

 private:
  void* data_;
  size_t size_;
};

absl::StatusOr<std::shared_ptr<Mapping>> MapFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  size_t size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", strerror(errno)));
    }
  }
  close(fd);
  return std::make_shared<Mapping>(data, size);
}

// Elements of `shape`, or -1 on a negative dim or overflow past `limit`.
int64_t CheckedNumel(const std::vector<int64_t>& shape, uint64_t limit) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > limit / static_cast<uint64_t>(d)) return -1;
    n *= static_cast<uint64_t>(d);
  }
  return static_cast<int64_t>(n);
}

absl::StatusOr<at::Tensor> TensorFromEntry(const std::shared_ptr<Mapping>& map, uint64_t data_start,
                                           const std::string& name, const json& entry,
                                           const std::string& path,
                                           std::vector<std::pair<uint64_t, uint64_t>>& spans) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "': ", why));
  };
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    return bad("entry needs dtype, shape and data_offsets");
  }
  if (!entry["dtype"].is_string()) return bad("dtype is not a string");
  const DtypeInfo* dtype = DtypeByName(entry["dtype"].get<std::string>());
  if (dtype == nullptr) return bad(absl::StrCat("unsupported dtype ", entry["dtype"].dump()));
  std::vector<int64_t> shape;
  const json& offsets = entry["data_offsets"];
  if (!entry["shape"].is_array() || !offsets.is_array() || offsets.size() != 2 ||
      !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    return bad("shape must be a list and data_offsets two non-negative integers");
  }
  for (const json& d : entry["shape"]) {
    if (!d.is_number_integer()) return bad("shape holds a non-integer");
    shape.push_back(d.get<int64_t>());
  }
  uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  uint64_t data_size = map->size() - data_start;
  if (begin > end || end > data_size) {
    return bad(absl::StrCat("data_offsets [", begin, ", ", end, ") exceed the ", data_size,
                            " data bytes of the file (truncated?)"));
  }
  int64_t numel = CheckedNumel(shape, data_size);
  if (numel < 0 || static_cast<uint64_t>(numel) * dtype->size != end - begin) {
    return bad(absl::StrCat("shape ", entry["shape"].dump(), " of ", dtype->name,
                            " does not match its ", end - begin, " bytes"));
  }
  spans.emplace_back(begin, end);
  const uint8_t* ptr = map->bytes() + data_start + begin;
  auto options = at::TensorOptions().dtype(dtype->type);
  if (reinterpret_cast<uintptr_t>(ptr) % dtype->size != 0) {
    at::Tensor copy = at::empty(shape, options);  // unaligned: copy into aligned memory
    if (numel > 0) std::memcpy(copy.data_ptr(), ptr, end - begin);
    return copy;
  }
  std::shared_ptr<Mapping> keep = map;
  return at::from_blob(
      const_cast<uint8_t*>(ptr), shape, [keep](void*) {}, options);
}

}  // namespace

absl::StatusOr<TensorMap> ReadSafetensors(const std::string& path) {
  auto map = MapFile(path);
  if (!map.ok()) return map.status();
  const Mapping& m = **map;
  if (m.size() < 8) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": too short for a safetensors file"));
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | m.bytes()[i];
  if (header_size > kMaxHeaderBytes || header_size > m.size() - 8) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header length ", header_size,
                                                   " exceeds the file (", m.size(), " bytes)"));
  }
  std::string header_text(reinterpret_cast<const char*>(m.bytes() + 8), header_size);
  json header = json::parse(header_text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header is not a JSON object"));
  }
  TensorMap tensors;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    auto tensor = TensorFromEntry(*map, 8 + header_size, name, entry, path, spans);
    if (!tensor.ok()) return tensor.status();
    tensors.emplace(name, *tensor);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensors overlap in the data"));
    }
  }
  return tensors;
}

absl::StatusOr<TensorMap> ReadModelTensors(const std::string& dir) {
  std::string index_path = dir + "/model.safetensors.index.json";
  struct stat st {};
  if (stat(index_path.c_str(), &st) != 0) return ReadSafetensors(dir + "/model.safetensors");
  auto text = ReadFile(index_path);
  if (!text.ok()) return text.status();
  json index = json::parse(*text, nullptr, false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
      !index["weight_map"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": no weight_map object"));
  }
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": tensor '", name, "' names an invalid file"));
    }
    by_file[file.get<std::string>()].push_back(name);
  }
  TensorMap all;
  for (const auto& [file, names] : by_file) {
    auto shard = ReadSafetensors(dir + "/" + file);
    if (!shard.ok()) return shard.status();
    for (const auto& name : names) {
      auto it = shard->find(name);
      if (it == shard->end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(index_path, ": tensor '", name, "' is not in ", file));
      }
      all.emplace(name, it->second);
    }
  }
  return all;
}

absl::Status WriteSafetensors(const std::string& path, const TensorMap& tensors) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<at::Tensor> cpu;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const DtypeInfo* dtype = DtypeByType(tensor.scalar_type());
    if (dtype == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", name, "' has an unsupported dtype"));
    }
    cpu.push_back(tensor.detach().to(at::kCPU).contiguous());
    uint64_t bytes = cpu.back().numel() * dtype->size;
    header[name] = {{"dtype", dtype->name},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + header_text.size() + offset);
  uint64_t n = header_text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += header_text;
  for (const at::Tensor& t : cpu) {
    out.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  }
  return WriteFileAtomic(path, out);
}

namespace {

constexpr char kIndexName[] = "model.safetensors.index.json";
constexpr char kSingleName[] = "model.safetensors";

std::string ShardName(size_t i, size_t n) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return name;
}

bool IsShardName(const std::string& name) {
  unsigned a = 0, b = 0;
  char tail[32] = {0};
  return std::sscanf(name.c_str(), "model-%5u-of-%5u%31s", &a, &b, tail) == 3 &&
         std::string(tail) == ".safetensors" && name.size() == ShardName(0, 1).size();
}

// Removes DIR's model files that `keep` does not name (stale shards, the
// index or the single file of the other layout).
absl::Status RemoveStaleModelFiles(const std::string& dir, const std::set<std::string>& keep) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool model_file = name == kIndexName || name == kSingleName || IsShardName(name);
    if (!model_file || keep.count(name)) continue;
    if (!std::filesystem::remove(entry.path(), ec) && ec) {
      return absl::InternalError(
          absl::StrCat(entry.path().string(), ": cannot remove stale file: ", ec.message()));
    }
  }
  if (ec) return absl::InternalError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteModelTensors(const std::string& dir, const TensorMap& tensors,
                               int64_t max_shard_bytes) {
  std::vector<TensorMap> shards(1);
  int64_t total = 0, in_shard = 0;
  for (const auto& [name, tensor] : tensors) {
    const int64_t bytes = static_cast<int64_t>(tensor.numel() * tensor.element_size());
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().emplace(name, tensor);
    in_shard += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    if (auto s = WriteSafetensors(dir + "/" + kSingleName, tensors); !s.ok()) return s;
    return RemoveStaleModelFiles(dir, {kSingleName});
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", json::object()}};
  std::set<std::string> written = {kIndexName};
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = ShardName(i, shards.size());
    if (auto s = WriteSafetensors(dir + "/" + file, shards[i]); !s.ok()) return s;
    for (const auto& [name, tensor] : shards[i]) index["weight_map"][name] = file;
    written.insert(file);
  }
  if (auto s = WriteFileAtomic(dir + "/" + kIndexName, index.dump(2) + "\n"); !s.ok()) return s;
  return RemoveStaleModelFiles(dir, written);
}

}  // namespace loom::model
