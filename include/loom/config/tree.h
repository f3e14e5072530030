#pragma once
// ConfigTree: the merged YAML document a config is bound from, with the file,
// line and column every key came from, so each error can point at its source.
//
// Loading resolves `base: other.yaml` (relative to the including file,
// recursively, cycles detected), merges maps key by key (the including file
// wins; lists and scalars are replaced whole), interpolates `${env:NAME}` and
// `${env:NAME:-default}` in scalars, then applies `--set a.b.c=value`
// overrides (value parsed as YAML, so lists and maps use flow syntax). An
// override reaches into lists of maps by index or by the entry's `name`
// (`tasks.datasets.1.weight`, `tasks.datasets[1].weight`,
// `tasks.datasets.sort.weight`), appends with `+list=VALUE` and removes with
// `~key` (a list entry or a map key), as Hydra/OmegaConf overrides do.
// Not thread-safe; used once at start-up.

#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace loom::config {

// Where a key came from: "file:line:col", or "--set key=value".
struct Location {
  std::string file;  // path of the YAML file, or "--set key=value"
  int line = 0;      // 1-based; 0 when unknown (overrides)
  int column = 0;    // 1-based
  std::string ToString() const;
};

// One problem with a config. Printed as "LOCATION: KEY: MESSAGE".
struct ConfigError {
  Location location;
  std::string key;  // dotted path, e.g. "rollout.max_batch" or "datasets[1].name"
  std::string message;
  std::string ToString() const;
};

class ConfigTree {
 public:
  // Loads `path` and its bases. Problems are appended to `errors`; the tree
  // holds whatever could be read.
  static ConfigTree Load(const std::string& path, std::vector<ConfigError>& errors);
  // Builds a tree from YAML text (for tests and embedded configs).
  static ConfigTree FromString(const std::string& yaml, const std::string& name,
                               std::vector<ConfigError>& errors);

  // Applies one "a.b.c=value", "+list=value" or "~key" override.
  void ApplyOverride(const std::string& assignment, std::vector<ConfigError>& errors);

  const YAML::Node& root() const { return root_; }
  // The location of `key`, or of its closest recorded ancestor.
  Location LocationOf(const std::string& key) const;
  // The location of the file as a whole (its first line).
  const Location& file_location() const { return file_location_; }

 private:
  void MergeFile(const std::string& path, std::vector<std::string>& stack,
                 std::vector<ConfigError>& errors);
  void MergeDocument(YAML::Node doc, const std::string& file, std::vector<ConfigError>& errors);
  void MergeInto(YAML::Node target, const YAML::Node& source, const std::string& prefix,
                 const std::string& file, std::vector<ConfigError>& errors);
  YAML::Node Interpolate(const YAML::Node& node, const std::string& key, const std::string& file,
                         std::vector<ConfigError>& errors);
  void RecordLocations(const YAML::Node& node, const std::string& key, const Location& where);
  // Drops the recorded locations of everything below `key` (it is being replaced).
  void ForgetLocationsUnder(const std::string& key);

  YAML::Node root_ = YAML::Node(YAML::NodeType::Map);
  std::map<std::string, Location> locations_;
  Location file_location_;
};

// Joins a dotted key path: JoinKey("a", "b") == "a.b", JoinKey("", "b") == "b".
std::string JoinKey(const std::string& prefix, const std::string& key);

// Edit distance, for "did you mean" suggestions.
int EditDistance(const std::string& a, const std::string& b);

}  // namespace loom::config
