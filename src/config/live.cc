#include "loom/config/live.h"

#include <map>
#include <optional>
#include <set>

#include "loom/config/binder.h"
#include "loom/config/tree.h"

namespace loom::config {
namespace {

using FlatConfig = std::map<std::string, std::string>;

std::string FlowText(const YAML::Node& node) {
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << node;
  return out.c_str();
}

// The `name` of every entry of a list of maps; nothing when one has none.
std::optional<YAML::Node> EntryNames(const YAML::Node& list) {
  YAML::Node names(YAML::NodeType::Sequence);
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node entry = list[i];
    if (!entry.IsMap() || !entry["name"] || !entry["name"].IsScalar()) return std::nullopt;
    names.push_back(entry["name"].Scalar());
  }
  return names;
}

// One key per scalar; a list of named maps as its names plus one subtree per
// entry, keyed by name (`named_lists` collects those lists' keys).
void Flatten(const YAML::Node& node, const std::string& key, FlatConfig& out,
             std::set<std::string>& named_lists) {
  if (node.IsMap()) {
    for (const auto& item : node) {
      Flatten(item.second, JoinKey(key, item.first.Scalar()), out, named_lists);
    }
    return;
  }
  if (node.IsSequence() && node.size() > 0) {
    if (auto names = EntryNames(node)) {
      out[key] = FlowText(*names);
      named_lists.insert(key);
      for (size_t i = 0; i < node.size(); ++i) {
        Flatten(node[i], key + "." + (*names)[i].Scalar(), out, named_lists);
      }
      return;
    }
  }
  out[key] = FlowText(node);
}

FlatConfig FlattenConfig(const RunConfig& config, std::set<std::string>& named_lists) {
  FlatConfig flat;
  Flatten(YAML::Load(ResolvedYaml(config)), "", flat, named_lists);
  return flat;
}

bool MatchesPattern(const std::string& key, const std::string& pattern) {
  size_t k = 0, p = 0;
  while (p < pattern.size()) {
    if (pattern[p] == '*') {
      const size_t end = key.find('.', k);
      k = end == std::string::npos ? key.size() : end;
      ++p;
      if (k == key.size() && p < pattern.size()) return false;
      continue;
    }
    if (k >= key.size() || key[k] != pattern[p]) return false;
    ++k;
    ++p;
  }
  return k == key.size();
}

std::string Lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += (text.empty() ? "" : "\n") + line;
  return text;
}

// "key: message" for an error of a live change: the location is the
// assignment itself, which the caller already knows.
std::string KeyForm(const ConfigError& error) {
  const std::string assignment = error.location.file.rfind("--set ", 0) == 0
                                     ? error.location.file.substr(6)
                                     : error.location.ToString();
  return (error.key.empty() ? assignment : error.key) + ": " + error.message;
}

// `config` re-bound from its resolved YAML with `assignments` applied.
absl::StatusOr<RunConfig> Rebind(const RunConfig& config,
                                 const std::vector<std::string>& assignments) {
  std::vector<ConfigError> errors;
  ConfigTree tree = ConfigTree::FromString(ResolvedYaml(config), "live config", errors);
  for (const std::string& assignment : assignments) tree.ApplyOverride(assignment, errors);
  RunConfig next;
  if (errors.empty()) errors = Bind(tree, next);
  if (errors.empty()) return next;
  std::vector<std::string> lines;
  for (const ConfigError& error : errors) lines.push_back(KeyForm(error));
  return absl::InvalidArgumentError(Lines(lines));
}

}  // namespace

const std::vector<std::string>& LiveKeyPatterns() {
  static const std::vector<std::string> patterns = {"tasks.datasets.*.weight",
                                                    "tasks.datasets.*.active",
                                                    "tasks.datasets.*.max_inflight",
                                                    "tasks.datasets.*.teacher",
                                                    "tasks.eval_every",
                                                    "opd.teachers",
                                                    "opd.teachers.*.name",
                                                    "opd.teachers.*.path",
                                                    "opd.teachers.*.config",
                                                    "tasks.datasets.*.filter.min_pass",
                                                    "tasks.datasets.*.filter.max_pass",
                                                    "tasks.datasets.*.filter.after_attempts",
                                                    "tasks.datasets.*.filter.window"};
  return patterns;
}

bool IsLiveKey(const std::string& flat_key) {
  for (const std::string& pattern : LiveKeyPatterns()) {
    if (MatchesPattern(flat_key, pattern)) return true;
  }
  return false;
}

absl::StatusOr<RunConfig> ApplyLiveChange(const RunConfig& current,
                                          const std::vector<std::string>& assignments,
                                          std::vector<LiveChange>& changes) {
  changes.clear();
  auto next = Rebind(current, assignments);
  if (!next.ok()) return next.status();
  std::set<std::string> named_lists;
  const FlatConfig before = FlattenConfig(current, named_lists);
  const FlatConfig after = FlattenConfig(*next, named_lists);
  std::set<std::string> keys;
  for (const auto& [key, value] : before) keys.insert(key);
  for (const auto& [key, value] : after) keys.insert(key);

  std::string live;
  for (const std::string& pattern : LiveKeyPatterns()) live += (live.empty() ? "" : ", ") + pattern;
  std::vector<std::string> problems;
  std::vector<std::string> fixed_entries;  // lists whose entries changed: reported once
  for (const std::string& key : keys) {
    const auto from = before.find(key);
    const auto to = after.find(key);
    const bool had = from != before.end(), has = to != after.end();
    if (had && has && from->second == to->second) continue;
    changes.push_back({key, had ? from->second : "", has ? to->second : ""});
    if (IsLiveKey(key)) continue;
    bool inside_fixed_entry = false;
    for (const std::string& prefix : fixed_entries) {
      inside_fixed_entry = inside_fixed_entry || key.rfind(prefix, 0) == 0;
    }
    if (inside_fixed_entry) continue;
    if (named_lists.count(key) > 0) {
      problems.push_back(key + ": entries cannot be added, removed or reordered while a run goes " +
                         "on (the run has " + (had ? from->second : "[]") + ", the change gives " +
                         (has ? to->second : "[]") + ")");
      fixed_entries.push_back(key + ".");  // one error for the whole list
      continue;
    }
    problems.push_back(key + ": not live-changeable (live keys: " + live +
                       "); change it in the config and restart with --resume auto");
  }
  if (changes.empty()) {
    problems.push_back("nothing changes: every value given is already the live one");
  }
  if (!problems.empty()) {
    changes.clear();
    return absl::InvalidArgumentError(Lines(problems));
  }
  return next;
}

std::vector<std::string> LiveAssignments(const RunConfig& config) {
  std::set<std::string> named_lists;
  std::vector<std::string> assignments;
  for (const auto& [key, value] : FlattenConfig(config, named_lists)) {
    if (IsLiveKey(key) && key.rfind("opd.teachers", 0) != 0)
      assignments.push_back(key + "=" + value);
  }
  const YAML::Node resolved = YAML::Load(ResolvedYaml(config));
  assignments.push_back("opd.teachers=" + FlowText(resolved["opd"]["teachers"]));
  return assignments;
}

absl::StatusOr<RunConfig> ReapplyLive(const RunConfig& config,
                                      const std::vector<std::string>& assignments) {
  return Rebind(config, assignments);
}

}  // namespace loom::config
