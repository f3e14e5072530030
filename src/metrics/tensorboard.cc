#include "loom/metrics/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "loom/tb/event.pb.h"

namespace loom::metrics {
namespace {

std::array<uint32_t, 256> Crc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0u);
    table[i] = crc;
  }
  return table;
}

void AppendLittleEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// Every number under `json` as (tag, value): objects by key, lists by index.
void CollectScalars(const nlohmann::json& json, const std::string& tag, tb::Summary& summary) {
  if (json.is_object()) {
    for (const auto& [key, value] : json.items()) CollectScalars(value, tag + "/" + key, summary);
  } else if (json.is_array()) {
    for (size_t i = 0; i < json.size(); ++i) {
      CollectScalars(json[i], tag + "/" + std::to_string(i), summary);
    }
  } else if (json.is_number()) {
    tb::Summary::Value* value = summary.add_value();
    value->set_tag(tag);
    value->set_simple_value(json.get<float>());
  }
}

}  // namespace

uint32_t Crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = Crc32cTable();
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

uint32_t MaskedCrc32c(const void* data, size_t size) {
  const uint32_t crc = Crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TfRecord(const std::string& payload) {
  std::string record;
  AppendLittleEndian(record, payload.size(), 8);
  AppendLittleEndian(record, MaskedCrc32c(record.data(), 8), 4);
  record += payload;
  AppendLittleEndian(record, MaskedCrc32c(payload.data(), payload.size()), 4);
  return record;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError("cannot create " + dir + ": " + ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const double now = static_cast<double>(std::time(nullptr));
  const std::string path = dir + "/events.out.tfevents." +
                           std::to_string(static_cast<int64_t>(now)) + "." + host + "." +
                           std::to_string(::getpid());
  std::FILE* file = std::fopen(path.c_str(), "ab");
  if (file == nullptr) {
    return absl::UnavailableError("cannot create " + path + ": " + std::strerror(errno));
  }
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path, file));
  tb::Event event;
  event.set_wall_time(now);
  event.set_file_version("brain.Event:2");
  if (absl::Status s = writer->Append(event.SerializeAsString()); !s.ok()) return s;
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

absl::Status TensorBoardWriter::Append(const std::string& event) {
  const std::string record = TfRecord(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::UnavailableError("cannot append to " + path_ + ": " + std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::WriteScalars(const nlohmann::json& record, double wall_time) {
  if (!record.is_object()) return absl::OkStatus();
  std::string prefix = record.value("stage", "run");
  if (record.contains("event") && record["event"].is_string()) {
    prefix += "/" + record["event"].get<std::string>();
  }
  if (record.contains("teacher") && record["teacher"].is_string()) {
    prefix += "/" + record["teacher"].get<std::string>();
  }
  tb::Event event;
  event.set_wall_time(wall_time);
  const char* axis = record.contains("version") ? "version" : "step";
  event.set_step(
      record.contains(axis) && record[axis].is_number_integer() ? record[axis].get<int64_t>() : 0);
  for (const auto& [key, value] : record.items()) {
    CollectScalars(value, prefix + "/" + key, *event.mutable_summary());
  }
  if (event.summary().value_size() == 0) return absl::OkStatus();
  return Append(event.SerializeAsString());
}

absl::Status TensorBoardWriter::WriteText(const std::string& tag, const std::string& markdown,
                                          double wall_time) {
  tb::Event event;
  event.set_wall_time(wall_time);
  tb::Summary::Value* value = event.mutable_summary()->add_value();
  value->set_tag(tag);
  value->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  tb::TensorProto* tensor = value->mutable_tensor();
  tensor->set_dtype(tb::DT_STRING);
  tensor->mutable_tensor_shape()->add_dim()->set_size(1);
  tensor->add_string_val(markdown);
  return Append(event.SerializeAsString());
}

}  // namespace loom::metrics
