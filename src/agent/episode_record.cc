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

namespace {

// Turn `i` of a record; an error says what is wrong with it (the caller
// names the record).
absl::StatusOr<EpisodeRecord::Turn> TurnFromJson(const nlohmann::json& j, size_t i) {
  const std::string at = absl::StrCat("turns[", i, "]");
  auto fail = [&](const std::string& why) { return absl::DataLossError(at + why); };
  if (!j.is_object() || !j.contains("request") || !j["request"].is_object()) {
    return fail(": needs a `request` object");
  }
  EpisodeRecord::Turn turn;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(j["request"].dump(), &turn.request);
  if (!parsed.ok()) return fail(".request: " + parsed.ToString());
  if (turn.request.turn() != static_cast<int>(i)) {
    return fail(absl::StrCat(".request.turn: ", turn.request.turn(), " where ", i,
                             " comes (turns follow each other from 0)"));
  }
  if (j.contains("completion")) {
    if (!j["completion"].is_string()) return fail(".completion: must be a string");
    turn.completion = j["completion"].get<std::string>();
  }
  if (j.contains("cut")) {
    if (!j["cut"].is_boolean()) return fail(".cut: must be a boolean");
    turn.cut = j["cut"].get<bool>();
  }
  return turn;
}

// The record's snapshot: it waits on the last turn recorded or, when that
// one was answered, the next; or the episode ended.
absl::StatusOr<v1::EpisodeSnapshot> SnapshotFromJson(
    const nlohmann::json& json, const std::vector<EpisodeRecord::Turn>& turns) {
  std::string bytes;
  v1::EpisodeSnapshot snapshot;
  if (!json.is_string() || !absl::Base64Unescape(json.get<std::string>(), &bytes) ||
      !snapshot.ParseFromString(bytes)) {
    return absl::DataLossError("`snapshot` must be a base64 EpisodeSnapshot");
  }
  const int last = turns.empty() ? -1 : turns.back().request.turn();
  const int waits = snapshot.pending().turn();
  if (!snapshot.has_pending()) {
    if (snapshot.trajectory().failure_reason().empty() && !snapshot.trajectory().has_verdict()) {
      return absl::DataLossError("`snapshot` has neither a pending request nor the episode's end");
    }
  } else if (last < 0 || !(waits == last || (waits == last + 1 && turns.back().completion))) {
    return absl::DataLossError(
        absl::StrCat("`snapshot` waits on turn ", waits,
                     ", neither the last turn recorded nor the one after its answer"));
  }
  return snapshot;
}

}  // namespace

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
  const nlohmann::json& turns = json["turns"];
  for (size_t i = 0; i < turns.size(); ++i) {
    absl::StatusOr<EpisodeRecord::Turn> turn = TurnFromJson(turns[i], i);
    if (!turn.ok()) return fail(std::string(turn.status().message()));
    if (i + 1 < turns.size() && !turn->completion && !turn->cut) {
      return fail(absl::StrCat("turns[", i, "]: only the last turn may be unanswered"));
    }
    record.turns.push_back(*std::move(turn));
  }
  if (json.contains("snapshot")) {
    absl::StatusOr<v1::EpisodeSnapshot> snapshot = SnapshotFromJson(json["snapshot"], record.turns);
    if (!snapshot.ok()) return fail(std::string(snapshot.status().message()));
    record.snapshot = *std::move(snapshot);
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
