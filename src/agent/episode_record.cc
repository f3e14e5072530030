#include "loom/agent/episode_record.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "loom/config/check.h"
#include "loom/tokenizer/utf8.h"

namespace loom::agent {

nlohmann::json EpisodeRecordJson(const EpisodeRecord& record) {
  nlohmann::json turns = nlohmann::json::array();
  for (const EpisodeRecord::Turn& turn : record.turns) {
    std::string request;
    google::protobuf::util::JsonPrintOptions options;
    options.preserve_proto_field_names = true;
    LOOM_CHECK(google::protobuf::util::MessageToJsonString(turn.request, &request, options).ok(),
               "protobuf cannot print a generate request as JSON");
    nlohmann::json j = {{"request", nlohmann::json::parse(request)}};
    // Reply() repairs a completion the same way, so this replays the same.
    if (turn.completion) j["completion"] = tokenizer::RepairUtf8(*turn.completion);
    if (turn.cut) j["cut"] = true;
    turns.push_back(std::move(j));
  }
  nlohmann::json out = {{"target", record.place.target},
                        {"session_id", record.place.session_id},
                        {"turns", std::move(turns)}};
  if (record.snapshot) out["snapshot"] = absl::Base64Escape(record.snapshot->SerializeAsString());
  return out;
}

absl::StatusOr<EpisodeRecord> EpisodeRecordFromJson(const nlohmann::json& json,
                                                    const std::string& what) {
  auto fail = [&](const std::string& why) { return absl::DataLossError(what + ": " + why); };
  if (!json.is_object()) return fail("an episode record must be an object");
  EpisodeRecord record;
  for (const char* key : {"target", "session_id"}) {
    if (!json.contains(key) || !json[key].is_string() || json[key].get<std::string>().empty()) {
      return fail(absl::StrCat("`", key, "` must be a non-empty string"));
    }
  }
  record.place = {json["target"].get<std::string>(), json["session_id"].get<std::string>()};
  if (!json.contains("turns") || !json["turns"].is_array()) return fail("`turns` must be an array");
  for (size_t i = 0; i < json["turns"].size(); ++i) {
    const nlohmann::json& j = json["turns"][i];
    const std::string at = absl::StrCat("turns[", i, "]");
    if (!j.is_object() || !j.contains("request") || !j["request"].is_object()) {
      return fail(at + ": needs a `request` object");
    }
    EpisodeRecord::Turn turn;
    const auto parsed =
        google::protobuf::util::JsonStringToMessage(j["request"].dump(), &turn.request);
    if (!parsed.ok()) return fail(at + ".request: " + parsed.ToString());
    if (turn.request.turn() != static_cast<int>(i)) {
      return fail(absl::StrCat(at, ".request.turn: ", turn.request.turn(), " where ", i,
                               " comes (turns follow each other from 0)"));
    }
    if (j.contains("completion")) {
      if (!j["completion"].is_string()) return fail(at + ".completion: must be a string");
      turn.completion = j["completion"].get<std::string>();
    }
    if (j.contains("cut")) {
      if (!j["cut"].is_boolean()) return fail(at + ".cut: must be a boolean");
      turn.cut = j["cut"].get<bool>();
    }
    if (i + 1 < json["turns"].size() && !turn.completion && !turn.cut) {
      return fail(at + ": only the last turn may be unanswered");
    }
    record.turns.push_back(std::move(turn));
  }
  if (json.contains("snapshot")) {
    std::string bytes;
    v1::EpisodeSnapshot snapshot;
    if (!json["snapshot"].is_string() ||
        !absl::Base64Unescape(json["snapshot"].get<std::string>(), &bytes) ||
        !snapshot.ParseFromString(bytes)) {
      return fail("`snapshot` must be a base64 EpisodeSnapshot");
    }
    // It waits on the last turn recorded or, when that one was answered, the
    // next; or the episode ended.
    const int last = record.turns.empty() ? -1 : record.turns.back().request.turn();
    const int waits = snapshot.pending().turn();
    if (!snapshot.has_pending()) {
      if (snapshot.trajectory().failure_reason().empty() && !snapshot.trajectory().has_verdict()) {
        return fail("`snapshot` has neither a pending request nor the episode's end");
      }
    } else if (last < 0 ||
               !(waits == last || (waits == last + 1 && record.turns.back().completion))) {
      return fail(absl::StrCat("`snapshot` waits on turn ", waits,
                               ", neither the last turn recorded nor the one after its answer"));
    }
    record.snapshot = std::move(snapshot);
  }
  return record;
}

nlohmann::json TrajectoryJson(const v1::Trajectory& trajectory) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;  // a reward of 0 is a reward
  LOOM_CHECK(google::protobuf::util::MessageToJsonString(trajectory, &text, options).ok(),
             "protobuf cannot print a trajectory as JSON");
  return nlohmann::json::parse(text);
}

absl::StatusOr<v1::Trajectory> TrajectoryFromJson(const nlohmann::json& json,
                                                  const std::string& what) {
  v1::Trajectory trajectory;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json.dump(), &trajectory);
  if (!parsed.ok()) return absl::DataLossError(what + ": " + parsed.ToString());
  return trajectory;
}

}  // namespace loom::agent
