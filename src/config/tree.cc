#include "loom/config/tree.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace loom::config {
namespace fs = std::filesystem;

std::string Location::ToString() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

std::string ConfigError::ToString() const {
  std::string out = location.ToString();
  if (!key.empty()) out += ": " + key;
  return out + ": " + message;
}

std::string JoinKey(const std::string& prefix, const std::string& key) {
  if (prefix.empty()) return key;
  if (!key.empty() && key[0] == '[') return prefix + key;
  return prefix + "." + key;
}

int EditDistance(const std::string& a, const std::string& b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

namespace {

Location MarkLocation(const std::string& file, const YAML::Mark& mark) {
  return Location{file, mark.line + 1, mark.column + 1};
}

// Replaces ${env:NAME} and ${env:NAME:-default} in `text`.
bool InterpolateEnv(const std::string& text, std::string& out, std::string& error) {
  out.clear();
  size_t pos = 0;
  while (true) {
    size_t start = text.find("${env:", pos);
    if (start == std::string::npos) break;
    size_t end = text.find('}', start);
    if (end == std::string::npos) {
      error = "unterminated ${env:...} in '" + text + "'";
      return false;
    }
    out += text.substr(pos, start - pos);
    std::string spec = text.substr(start + 6, end - start - 6);
    std::string name = spec;
    std::optional<std::string> fallback;
    if (size_t dash = spec.find(":-"); dash != std::string::npos) {
      name = spec.substr(0, dash);
      fallback = spec.substr(dash + 2);
    }
    if (name.empty()) {
      error = "empty variable name in '" + text + "'";
      return false;
    }
    if (const char* value = std::getenv(name.c_str())) {
      out += value;
    } else if (fallback) {
      out += *fallback;
    } else {
      error = "environment variable " + name + " is not set (use ${env:" + name +
              ":-default} for a default)";
      return false;
    }
    pos = end + 1;
  }
  out += text.substr(pos);
  return true;
}

}  // namespace

ConfigTree ConfigTree::Load(const std::string& path, std::vector<ConfigError>& errors) {
  ConfigTree tree;
  tree.file_location_ = Location{path, 1, 1};
  std::vector<std::string> stack;
  tree.MergeFile(path, stack, errors);
  return tree;
}

ConfigTree ConfigTree::FromString(const std::string& yaml, const std::string& name,
                                  std::vector<ConfigError>& errors) {
  ConfigTree tree;
  tree.file_location_ = Location{name, 1, 1};
  try {
    tree.MergeDocument(YAML::Load(yaml), name, errors);
  } catch (const YAML::Exception& e) {
    errors.push_back({MarkLocation(name, e.mark), "", "YAML syntax error: " + e.msg});
  }
  return tree;
}

void ConfigTree::MergeFile(const std::string& path, std::vector<std::string>& stack,
                           std::vector<ConfigError>& errors) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(path, ec);
  std::string id = ec ? path : canonical.string();
  if (std::find(stack.begin(), stack.end(), id) != stack.end()) {
    std::string chain;
    for (const auto& s : stack) chain += s + " -> ";
    errors.push_back({Location{path, 1, 1}, "base", "base files form a cycle: " + chain + id});
    return;
  }
  std::ifstream in(path);
  if (!in) {
    errors.push_back({Location{path, 0, 0}, "", "cannot open config file"});
    return;
  }
  std::stringstream text;
  text << in.rdbuf();
  YAML::Node doc;
  try {
    doc = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    errors.push_back({MarkLocation(path, e.mark), "", "YAML syntax error: " + e.msg});
    return;
  }
  if (doc.IsNull()) return;  // an empty file is an empty map
  if (!doc.IsMap()) {
    errors.push_back(
        {MarkLocation(path, doc.Mark()), "", "expected a map of keys at the top level"});
    return;
  }
  if (YAML::Node base = doc["base"]) {
    Location where = MarkLocation(path, base.Mark());
    if (!base.IsScalar() || base.Scalar().empty()) {
      errors.push_back({where, "base", "expected the path of a YAML file"});
    } else {
      fs::path base_path = fs::path(path).parent_path() / base.Scalar();
      if (!fs::exists(base_path)) {
        errors.push_back({where, "base", "base file '" + base_path.string() + "' does not exist"});
      } else {
        stack.push_back(id);
        MergeFile(base_path.string(), stack, errors);
        stack.pop_back();
      }
    }
    doc.remove("base");
  }
  MergeDocument(doc, path, errors);
}

void ConfigTree::MergeDocument(YAML::Node doc, const std::string& file,
                               std::vector<ConfigError>& errors) {
  if (doc.IsNull()) return;
  if (!doc.IsMap()) {
    errors.push_back(
        {MarkLocation(file, doc.Mark()), "", "expected a map of keys at the top level"});
    return;
  }
  MergeInto(root_, doc, "", file, errors);
}

void ConfigTree::MergeInto(YAML::Node target, const YAML::Node& source, const std::string& prefix,
                           const std::string& file, std::vector<ConfigError>& errors) {
  for (const auto& item : source) {
    if (!item.first.IsScalar()) {
      errors.push_back(
          {MarkLocation(file, item.first.Mark()), prefix, "map keys must be plain names"});
      continue;
    }
    const std::string name = item.first.Scalar();
    const std::string key = JoinKey(prefix, name);
    const YAML::Node& value = item.second;
    YAML::Node existing = target[name];
    if (value.IsMap() && existing.IsMap()) {
      locations_[key] = MarkLocation(file, item.first.Mark());
      MergeInto(existing, value, key, file, errors);
      continue;
    }
    // Replacing a subtree: forget where its old children came from.
    ForgetLocationsUnder(key);
    target[name] = Interpolate(value, key, file, errors);
    RecordLocations(value, key, MarkLocation(file, item.first.Mark()));
  }
}

YAML::Node ConfigTree::Interpolate(const YAML::Node& node, const std::string& key,
                                   const std::string& file, std::vector<ConfigError>& errors) {
  if (node.IsScalar()) {
    const std::string& text = node.Scalar();
    if (text.find("${") == std::string::npos) return node;
    std::string out, error;
    if (!InterpolateEnv(text, out, error)) {
      errors.push_back({MarkLocation(file, node.Mark()), key, error});
      return node;
    }
    return YAML::Node(out);
  }
  if (node.IsSequence()) {
    YAML::Node copy(YAML::NodeType::Sequence);
    for (size_t i = 0; i < node.size(); ++i) {
      copy.push_back(Interpolate(node[i], key + "[" + std::to_string(i) + "]", file, errors));
    }
    return copy;
  }
  if (node.IsMap()) {
    YAML::Node copy(YAML::NodeType::Map);
    for (const auto& item : node) {
      copy[item.first] = Interpolate(item.second, JoinKey(key, item.first.Scalar()), file, errors);
    }
    return copy;
  }
  return node;
}

void ConfigTree::ForgetLocationsUnder(const std::string& key) {
  for (const std::string& prefix : {key + ".", key + "["}) {
    for (auto it = locations_.lower_bound(prefix);
         it != locations_.end() && it->first.rfind(prefix, 0) == 0;) {
      it = locations_.erase(it);
    }
  }
}

void ConfigTree::RecordLocations(const YAML::Node& node, const std::string& key,
                                 const Location& where) {
  locations_[key] = where;
  const bool from_file = where.line > 0;
  auto child_location = [&](const YAML::Node& child) {
    return from_file ? MarkLocation(where.file, child.Mark()) : where;
  };
  if (node.IsMap()) {
    for (const auto& item : node) {
      RecordLocations(item.second, JoinKey(key, item.first.Scalar()), child_location(item.first));
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      RecordLocations(node[i], key + "[" + std::to_string(i) + "]", child_location(node[i]));
    }
  }
}

Location ConfigTree::LocationOf(const std::string& key) const {
  std::string probe = key;
  while (!probe.empty()) {
    if (auto it = locations_.find(probe); it != locations_.end()) return it->second;
    size_t cut = probe.find_last_of(".[");
    if (cut == std::string::npos) break;
    probe.resize(cut);
  }
  return file_location_;
}

namespace {

// "a.b[1].c" -> {"a", "b", "1", "c"}; nothing when a part is empty.
std::optional<std::vector<std::string>> SplitKey(const std::string& key) {
  std::string dotted;
  for (size_t i = 0; i < key.size(); ++i) {
    if (key[i] == '[') {
      const size_t close = key.find(']', i);
      if (close == std::string::npos) return std::nullopt;
      dotted += "." + key.substr(i + 1, close - i - 1);
      i = close;
    } else {
      dotted += key[i];
    }
  }
  std::vector<std::string> parts;
  std::stringstream split(dotted);
  for (std::string part; std::getline(split, part, '.');) parts.push_back(part);
  if (parts.empty() || dotted.back() == '.' ||
      std::any_of(parts.begin(), parts.end(), [](const std::string& p) { return p.empty(); })) {
    return std::nullopt;
  }
  return parts;
}

// The entry of `list` that `part` names: its index, or the entry whose
// `name` is `part`. An error text when there is none.
std::optional<size_t> ListEntry(const YAML::Node& list, const std::string& part,
                                std::string& error) {
  const bool digits =
      !part.empty() && part.size() < 10 &&
      std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits && std::stoul(part) < list.size()) return std::stoul(part);
  std::string names;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node entry = list[i];
    const YAML::Node name = entry.IsMap() ? entry["name"] : YAML::Node();
    if (name && name.IsScalar()) {
      if (!digits && name.Scalar() == part) return i;
      names += (names.empty() ? "" : ", ") + name.Scalar();
    }
  }
  if (list.size() == 0) {
    error = "the list is empty: it has no entry '" + part + "'";
  } else {
    error = "no entry '" + part + "': give an index 0.." + std::to_string(list.size() - 1) +
            (names.empty() ? "" : " or a name (" + names + ")");
  }
  return std::nullopt;
}

}  // namespace

void ConfigTree::ApplyOverride(const std::string& assignment, std::vector<ConfigError>& errors) {
  const Location where{"--set " + assignment, 0, 0};
  // "+key=value" appends to a list; "~key" removes a list entry or a map key.
  const char op =
      !assignment.empty() && (assignment[0] == '+' || assignment[0] == '~') ? assignment[0] : '=';
  const std::string text = op == '=' ? assignment : assignment.substr(1);
  const size_t eq = op == '~' ? text.size() : text.find('=');
  if (op == '~' ? text.find('=') != std::string::npos : eq == std::string::npos || eq == 0) {
    errors.push_back({where, "",
                      "expected key=value, +list=value (append) or ~key (remove), e.g. --set "
                      "rollout.max_batch=32"});
    return;
  }
  const std::string key = text.substr(0, eq);
  const auto parts = SplitKey(key);
  if (!parts) {
    errors.push_back({where, key, "malformed key path"});
    return;
  }
  YAML::Node value;
  if (op != '~') {
    try {
      value = YAML::Load(text.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      errors.push_back({where, key, "value is not valid YAML: " + e.msg});
      return;
    }
    value = Interpolate(value, key, where.file, errors);
  }
  // Walk to the parent of the last part; list entries by index or by name.
  // `walked` is the binder's form of the path (items[1].weight), so errors
  // found while binding point at this override.
  YAML::Node node = root_;
  std::string walked;
  auto step_into_list = [&](const std::string& part, size_t& index) {
    std::string error;
    auto found = ListEntry(node, part, error);
    if (!found) errors.push_back({where, walked, error});
    if (found) index = *found;
    return found.has_value();
  };
  for (size_t i = 0; i + 1 < parts->size(); ++i) {
    const std::string& part = (*parts)[i];
    if (node.IsSequence()) {
      size_t index = 0;
      if (!step_into_list(part, index)) return;
      walked += "[" + std::to_string(index) + "]";
      node.reset(node[index]);
      continue;
    }
    walked = JoinKey(walked, part);
    YAML::Node child = node[part];
    if (!child || child.IsNull()) {
      if (op == '~') return;  // removing what is not there: nothing to do
      node[part] = YAML::Node(YAML::NodeType::Map);
      child.reset(node[part]);
    } else if (!child.IsMap() && !child.IsSequence()) {
      errors.push_back(
          {where, walked, "is not a map or a list, so it has no entry '" + (*parts)[i + 1] + "'"});
      return;
    }
    node.reset(child);
  }
  const std::string& last = parts->back();
  std::string target;  // the binder's path of the node replaced, added or removed
  if (node.IsSequence()) {
    size_t index = 0;
    if (!step_into_list(last, index)) return;
    target = walked + "[" + std::to_string(index) + "]";
    if (op == '~') {
      node.remove(index);
      target = walked;  // the entries after it moved: the whole list is this override's now
      value.reset(node);
    } else if (op == '+') {
      errors.push_back({where, target, "is a list entry: append with +" + walked + "=VALUE"});
      return;
    } else {
      node[index] = value;
    }
  } else {
    target = JoinKey(walked, last);
    if (op == '~') {
      node.remove(last);
      ForgetLocationsUnder(target);
      locations_.erase(target);
      return;
    }
    if (op == '+') {
      YAML::Node list = node[last];
      if (list && !list.IsNull() && !list.IsSequence()) {
        errors.push_back({where, target, "is not a list, so nothing can be appended to it"});
        return;
      }
      YAML::Node appended(YAML::NodeType::Sequence);
      if (list && list.IsSequence()) {
        for (size_t i = 0; i < list.size(); ++i) appended.push_back(list[i]);
      }
      appended.push_back(value);
      value.reset(appended);
    }
    node[last] = value;
  }
  ForgetLocationsUnder(target);
  RecordLocations(value, target, where);
  // Intermediate maps created here also come from this override.
  for (std::string prefix = target; prefix.find_first_of(".[") != std::string::npos;) {
    prefix.resize(prefix.find_last_of(".["));
    locations_.emplace(prefix, where);
  }
}

}  // namespace loom::config
