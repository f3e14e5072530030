// Agent task files (kind agent_jsonl): good lines become the worker's task,
// every malformed line is reported at once as file:line plus field, and the
// shipped task set (configs/tasks, scripts/gen_code_tasks.py) loads whole.

#include "loom/tasks/agent_jsonl.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "loom/tasks/conversation.h"
#include "loom/tasks/dataset.h"
#include "testing/temp_dir.h"

namespace loom::tasks {
namespace {

using loom::testing::TempDir;
using Json = nlohmann::json;

// A good line: a Python repair task with test lists and a reference.
Json GoodTask(const std::string& id = "fix-1") {
  return {{"id", id},
          {"problem", "calc.py fails its tests. Fix it."},
          {"environment",
           {{"files", {{"calc.py", "def one():\n    return 2\n"}, {"test_calc.py", "..."}}},
            {"setup", "true"},
            {"setup_timeout_s", 30}}},
          {"verification",
           {{"runner", "unittest"},
            {"fail_to_pass", {"test_calc.CalcTest.test_one"}},
            {"pass_to_pass", {"test_calc.CalcTest.test_two"}},
            {"files", {{"hidden/check.txt", "x"}}},
            {"answer_paths", {"calc.py"}}}},
          {"reference", {{"files", {{"calc.py", "def one():\n    return 1\n"}}}}},
          {"tags", {"python", "repair"}}};
}

std::vector<std::string> ErrorsOf(const Json& line) {
  AgentTask task;
  return ParseAgentTaskLine(line.dump(), "/nonexistent", task);
}

TEST(AgentJsonlTest, AGoodLineBecomesTheWorkersTask) {
  AgentTask task;
  ASSERT_TRUE(ParseAgentTaskLine(GoodTask().dump(), "/", task).empty());
  EXPECT_EQ(task.task.id(), "fix-1");
  EXPECT_EQ(task.task.problem(), "calc.py fails its tests. Fix it.");
  EXPECT_EQ(task.task.environment().files().at("calc.py"), "def one():\n    return 2\n");
  EXPECT_EQ(task.task.environment().setup_command(), "true");
  EXPECT_EQ(task.task.environment().setup_timeout_s(), 30);
  const v1::Verification& v = task.task.verification();
  ASSERT_TRUE(v.has_tests());
  EXPECT_EQ(v.tests().runner(), "unittest");
  EXPECT_EQ(v.tests().fail_to_pass(0), "test_calc.CalcTest.test_one");
  EXPECT_EQ(v.tests().pass_to_pass(0), "test_calc.CalcTest.test_two");
  EXPECT_EQ(v.files().at("hidden/check.txt"), "x");
  EXPECT_EQ(v.answer_paths(0), "calc.py");
  EXPECT_EQ(task.reference.at("calc.py"), "def one():\n    return 1\n");
  EXPECT_EQ(task.tags, (std::vector<std::string>{"python", "repair"}));
}

TEST(AgentJsonlTest, EachVerificationKindParses) {
  Json line = GoodTask();
  line["verification"] = {{"command", "test -f done"}};
  AgentTask a;
  ASSERT_TRUE(ParseAgentTaskLine(line.dump(), "/", a).empty());
  EXPECT_EQ(a.task.verification().command(), "test -f done");
  line["verification"] = {{"exact_answer", "42"}};
  AgentTask b;
  ASSERT_TRUE(ParseAgentTaskLine(line.dump(), "/", b).empty());
  EXPECT_EQ(b.task.verification().exact_answer(), "42");
  line["verification"] = {{"output_regex", {{"command", "cat out"}, {"regex", "ok [0-9]+"}}}};
  AgentTask c;
  ASSERT_TRUE(ParseAgentTaskLine(line.dump(), "/", c).empty());
  EXPECT_EQ(c.task.verification().output_regex().regex(), "ok [0-9]+");
  line["verification"] = {{"fail_to_pass", {"a"}}, {"test_command", "bash tests/{test}.sh"}};
  AgentTask d;
  ASSERT_TRUE(ParseAgentTaskLine(line.dump(), "/", d).empty());
  EXPECT_EQ(d.task.verification().tests().command(), "bash tests/{test}.sh");
}

// One malformed form per field; each error names its field.
TEST(AgentJsonlTest, EveryMalformedFieldIsNamed) {
  auto expect = [](Json line, const std::string& want) {
    const std::vector<std::string> errors = ErrorsOf(line);
    ASSERT_EQ(errors.size(), 1u) << want << " / " << line.dump();
    EXPECT_EQ(errors[0].substr(0, want.size()), want) << errors[0];
  };
  Json line = GoodTask();
  line.erase("id");
  expect(line, "id: must be 1..200 characters");
  line = GoodTask("a b");
  expect(line, "id: must be 1..200 characters");
  line = GoodTask();
  line["problem"] = 7;
  expect(line, "problem: must be a string");
  line = GoodTask();
  line["colour"] = "red";
  expect(line, "colour: unknown key");
  line = GoodTask();
  line["environment"]["files"]["../escape.py"] = "x";
  expect(line, "environment.files[\"../escape.py\"]: is not a relative path");
  line = GoodTask();
  line["environment"]["files"]["/etc/passwd"] = "x";
  expect(line, "environment.files[\"/etc/passwd\"]: is not a relative path");
  line = GoodTask();
  line["environment"]["files"]["a.py"] = 3;
  expect(line, "environment.files[\"a.py\"]: must be a string");
  line = GoodTask();
  line["environment"]["setup_timeout_s"] = 0;
  expect(line, "environment.setup_timeout_s: must be an integer in 1..3600");
  line = GoodTask();
  line["environment"]["dir"] = "no-such-dir";
  expect(line, "environment.dir: /nonexistent/no-such-dir is not a directory");
  line = GoodTask();
  line["environment"]["image"] = "debian";
  expect(line, "environment.image: unknown key");
  line = GoodTask();
  line.erase("verification");
  expect(line, "verification: is required");
  line = GoodTask();
  line["verification"]["command"] = "true";
  expect(line, "verification: has more than one kind: fail_to_pass, command");
  line = GoodTask();
  line["verification"] = {{"answer_paths", {"a"}}};
  expect(line, "verification: needs one of");
  line = GoodTask();
  line["verification"]["runner"] = "nose";
  expect(line, "verification.runner: must be unittest or pytest");
  line = GoodTask();
  line["verification"]["test_command"] = "run {test}";
  expect(line, "verification.runner: test lists need a runner or a test_command, not both");
  line = GoodTask();
  line["verification"]["fail_to_pass"] = Json::array();
  expect(line, "verification.fail_to_pass: must list at least one test");
  line = GoodTask();
  line["verification"]["fail_to_pass"] = {"ok", 3};
  expect(line, "verification.fail_to_pass[1]: must be a non-empty string");
  line = GoodTask();
  line["verification"]["runner"] = Json();
  line["verification"]["test_command"] = "bash run.sh {test}";
  expect(line, "verification.runner: must be a string");
  line = GoodTask();
  line["verification"] = {{"command", "true"}, {"runner", "unittest"}};
  expect(line, "verification.runner: is only for test lists");
  line = GoodTask();
  line["verification"] = {{"output_regex", {{"regex", "(unclosed"}}}};
  expect(line, "verification.output_regex.regex:");
  line = GoodTask();
  line["verification"]["answer_paths"] = {"../../etc"};
  expect(line, "verification.answer_paths: '../../etc' leaves the workspace");
  line = GoodTask();
  line["reference"] = {{"files", Json::object()}};
  expect(line, "reference.files: must name at least one file");
  line = GoodTask();
  line["reference"] = {{"patch", "--- a"}};
  EXPECT_EQ(ErrorsOf(line).size(), 2u);  // the unknown key, and no files
  line = GoodTask();
  line["tags"] = "python";
  expect(line, "tags: must be an array of strings");
  EXPECT_EQ(ErrorsOf(Json::array()), std::vector<std::string>{"line: not a JSON object"});
  AgentTask task;
  EXPECT_EQ(ParseAgentTaskLine("{\"id\": ", "/", task),
            std::vector<std::string>{"line: not valid JSON"});
}

TEST(AgentJsonlTest, TooLargeATaskIsRefused) {
  Json line = GoodTask();
  line["environment"]["files"]["big.bin"] = std::string(kMaxAgentTaskBytes, 'x');
  const std::vector<std::string> errors = ErrorsOf(line);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("a task holds at most"), std::string::npos) << errors[0];
}

// A file with a malformed line of every kind: all reported, each as
// file:line: field, with the good lines' tasks not returned.
TEST(AgentJsonlTest, AFileReportsEveryMalformedLineAtOnce) {
  TempDir dir;
  Json missing_problem = GoodTask("t3");
  missing_problem.erase("problem");
  Json bad_path = GoodTask("t4");
  bad_path["reference"]["files"]["../x"] = "y";
  const std::string text = GoodTask("t1").dump() + "\n\n{not json\n" + missing_problem.dump() +
                           "\n" + bad_path.dump() + "\n" + GoodTask("t1").dump() + "\n";
  const std::string path = dir.Write("tasks.jsonl", text);
  auto tasks = ReadAgentTasks(path);
  ASSERT_FALSE(tasks.ok());
  EXPECT_EQ(tasks.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(tasks.status().message()),
            path + ":3: line: not valid JSON\n" + path + ":4: problem: is required\n" + path +
                ":5: reference.files[\"../x\"]: is not a relative path inside the workspace\n" +
                path + ":6: id: 't1' is also the id of line 1");

  EXPECT_FALSE(ReadAgentTasks(dir.Write("empty.jsonl", "\n")).ok());
  EXPECT_EQ(ReadAgentTasks(dir / "absent.jsonl").status().code(), absl::StatusCode::kNotFound);
}

TEST(AgentJsonlTest, ManyBadLinesAreCountedPastTheFirstFifty) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 60; ++i) text += "[]\n";
  auto tasks = ReadAgentTasks(dir.Write("bad.jsonl", text));
  ASSERT_FALSE(tasks.ok());
  EXPECT_NE(std::string(tasks.status().message()).find("\n... and 10 more"), std::string::npos);
}

// environment.dir: the directory's regular files join the inline ones, read
// by the trainer; a link inside is refused, not followed.
TEST(AgentJsonlTest, AnEnvironmentDirectoryIsReadWithoutFollowingLinks) {
  TempDir dir;
  dir.Write("repo/src/main.py", "print(1)\n");
  dir.Write("repo/README", "hello\n");
  Json line = GoodTask();
  line["environment"]["dir"] = "repo";
  const std::string path = dir.Write("tasks.jsonl", line.dump() + "\n");
  auto tasks = ReadAgentTasks(path);
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  const auto& files = (*tasks)[0].task.environment().files();
  EXPECT_EQ(files.at("src/main.py"), "print(1)\n");
  EXPECT_EQ(files.at("README"), "hello\n");
  EXPECT_EQ(files.at("calc.py"), "def one():\n    return 2\n");
  EXPECT_EQ((*tasks)[0].source, path + ":1");

  ASSERT_EQ(::symlink("/etc/passwd", (dir / "repo/src/passwd").c_str()), 0);
  auto linked = ReadAgentTasks(path);
  ASSERT_FALSE(linked.ok());
  EXPECT_NE(std::string(linked.status().message())
                .find(":1: environment.dir: " + (dir / "repo/src/passwd") +
                      " is not a regular file (links are not followed)"),
            std::string::npos)
      << linked.status();
}

// environment.archive: a tar archive made by Python's tarfile (an
// independent writer: ustar, pax long names, gzip) gives the same files as
// the directory it was made of; a link or a path leaving the root inside is
// refused, naming the member.
TEST(AgentJsonlTest, AnEnvironmentArchiveIsReadLikeItsDirectory) {
  TempDir dir;
  const std::string long_name = std::string(120, 'n') + "/deep/file.py";
  dir.Write("repo/src/main.py", "print(1)\n");
  dir.Write("repo/empty.txt", "");
  dir.Write("repo/" + long_name, std::string(3000, 'z'));
  const std::string make =
      "cd " + dir.path() +
      " && python3 -c \"import tarfile, sys\n"
      "for name, mode, fmt in (('plain.tar', 'w', tarfile.PAX_FORMAT), "
      "('gnu.tar', 'w', tarfile.GNU_FORMAT), ('zipped.tar.gz', 'w:gz', tarfile.PAX_FORMAT)):\n"
      "    with tarfile.open(name, mode, format=fmt) as t:\n"
      "        t.add('repo', arcname='.')\n"
      "with tarfile.open('linked.tar', 'w') as t:\n"
      "    t.add('repo', arcname='.')\n"
      "    i = tarfile.TarInfo('./passwd'); i.type = tarfile.SYMTYPE; i.linkname = '/etc/passwd'\n"
      "    t.addfile(i)\n"
      "with tarfile.open('escaping.tar', 'w') as t:\n"
      "    t.add('repo/src/main.py', arcname='../main.py')\n\"";
  const auto made = testing::RunCommand(make);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  for (const char* archive : {"plain.tar", "gnu.tar", "zipped.tar.gz"}) {
    Json line = GoodTask();
    line["environment"].erase("files");
    line["environment"]["archive"] = archive;
    const std::string path = dir.Write("tasks.jsonl", line.dump() + "\n");
    auto tasks = ReadAgentTasks(path);
    ASSERT_TRUE(tasks.ok()) << archive << ": " << tasks.status();
    const auto& files = (*tasks)[0].task.environment().files();
    EXPECT_EQ(files.size(), 3u) << archive;
    EXPECT_EQ(files.at("src/main.py"), "print(1)\n") << archive;
    EXPECT_EQ(files.at("empty.txt"), "") << archive;
    EXPECT_EQ(files.at(long_name), std::string(3000, 'z')) << archive;
  }
  auto expect_refused = [&](const std::string& archive, const std::string& want) {
    Json line = GoodTask();
    line["environment"]["archive"] = archive;
    auto tasks = ReadAgentTasks(dir.Write("tasks.jsonl", line.dump() + "\n"));
    ASSERT_FALSE(tasks.ok()) << archive;
    EXPECT_NE(std::string(tasks.status().message()).find(want), std::string::npos)
        << tasks.status();
  };
  expect_refused("linked.tar", ":1: environment.archive: " + (dir / "linked.tar") +
                                   ": member './passwd' is not a regular file");
  expect_refused("escaping.tar", "member '../main.py' is not a relative path inside the archive");
  expect_refused("absent.tar", "absent.tar: no such archive");
  dir.Write("cut.tar", std::string(700, 'x'));
  expect_refused("cut.tar", "cut.tar: member");
}

TEST(AgentJsonlTest, TheReferenceDemonstrationWritesEachFileThenAnswers) {
  AgentTask task;
  Json line = GoodTask();
  line["reference"]["files"]["b/other.py"] = "x = 1\n";
  ASSERT_TRUE(ParseAgentTaskLine(line.dump(), "/", task).empty());
  const std::vector<DemonstrationTurn> turns = ReferenceDemonstration(task);
  ASSERT_EQ(turns.size(), 3u);
  std::set<std::string> written;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(turns[i].assistant.tool_calls_size(), 1);
    EXPECT_EQ(turns[i].assistant.tool_calls(0).name(), "write_file");
    const Json args = Json::parse(turns[i].assistant.tool_calls(0).arguments_json());
    EXPECT_EQ(args["content"], task.reference.at(args["path"].get<std::string>()));
    written.insert(args["path"].get<std::string>());
    ASSERT_EQ(turns[i].results.size(), 1u);
  }
  EXPECT_EQ(written, (std::set<std::string>{"calc.py", "b/other.py"}));
  EXPECT_EQ(turns[2].assistant.tool_calls_size(), 0);
  EXPECT_FALSE(turns[2].assistant.content().empty());
  task.reference.clear();
  EXPECT_TRUE(ReferenceDemonstration(task).empty());
}

// The shipped set: 200 training and 48 held-out tasks, ids distinct across
// both files, every one with tests, a reference and tags, and no held-out
// task's files equal to a training task's.
TEST(AgentJsonlTest, TheShippedTaskSetLoadsWhole) {
  auto train = ReadAgentTasks(LOOM_SOURCE_DIR "/configs/tasks/code-train.jsonl");
  ASSERT_TRUE(train.ok()) << train.status();
  auto eval = ReadAgentTasks(LOOM_SOURCE_DIR "/configs/tasks/code-eval.jsonl");
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_GE(train->size(), 200u);
  EXPECT_GE(eval->size(), 40u);
  std::set<std::string> ids, contents;
  std::map<std::string, int> kinds;
  for (const auto* part : {&*train, &*eval}) {
    for (const AgentTask& t : *part) {
      EXPECT_TRUE(ids.insert(t.task.id()).second) << t.task.id();
      EXPECT_TRUE(t.task.verification().has_tests()) << t.task.id();
      EXPECT_GT(t.task.verification().tests().fail_to_pass_size(), 0) << t.task.id();
      EXPECT_FALSE(t.reference.empty()) << t.task.id();
      EXPECT_GE(t.tags.size(), 2u) << t.task.id();
      std::string files;
      for (const auto& [path, text] : t.task.environment().files()) files += path + text;
      EXPECT_TRUE(contents.insert(files).second) << t.task.id() << " repeats another's files";
      ++kinds[t.tags[0] + "/" + t.tags[1]];
    }
  }
  // Python and shell, repair and implementation.
  for (const char* kind :
       {"python/repair", "python/implement", "shell/repair", "shell/implement"}) {
    EXPECT_GE(kinds[kind], 20) << kind;
  }
}

// A dataset of kind agent_jsonl: problems carry their task, the held-out
// file is the eval split, and a problem's prompt is the task's problem.
TEST(AgentJsonlTest, ADatasetOfAgentTasksSplitsByItsFiles) {
  TempDir dir;
  config::DatasetSection spec;
  spec.name = "code";
  spec.kind = "agent_jsonl";
  spec.environment = "sandbox";
  spec.path = dir.Write("train.jsonl", GoodTask("a").dump() + "\n" + GoodTask("b").dump() + "\n");
  spec.eval_path = dir.Write("eval.jsonl", GoodTask("c").dump() + "\n");
  auto dataset = LoadDataset(spec, 7);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  std::set<std::string> seen;
  for (uint64_t i = 0; i < 4; ++i) {
    const Problem p = (*dataset)->Train(i);
    ASSERT_NE(p.agent_task, nullptr);
    seen.insert(p.agent_task->task.id());
    EXPECT_EQ(p.messages[0]["content"], p.agent_task->task.problem());
  }
  EXPECT_EQ(seen, (std::set<std::string>{"a", "b"}));
  ASSERT_EQ((*dataset)->Eval().size(), 1u);
  EXPECT_EQ((*dataset)->Eval()[0].agent_task->task.id(), "c");

  spec.path = dir.Write("broken.jsonl", "{}\n");
  auto broken = LoadDataset(spec, 7);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(std::string(broken.status().message()).find("broken.jsonl:1: id:"), std::string::npos)
      << broken.status();
}

// The scaffold's answer to a completion that did not parse carries the
// parser's reason, and `loom tasks reverify` reads it back to replay that
// turn: whatever the reason says, even the words around it.
TEST(FormatErrorMessageTest, TheReasonComesBackAndOtherMessagesAreNotFormatErrors) {
  for (const std::string why : {"", "no closing tag", "x). Reply with reasoning, then y"}) {
    const v1::Message message = FormatErrorMessage(why);
    EXPECT_EQ(message.role(), "user");
    EXPECT_EQ(FormatErrorReason(message), why);
  }
  v1::Message assistant = FormatErrorMessage("why");
  assistant.set_role("assistant");
  EXPECT_EQ(FormatErrorReason(assistant), std::nullopt);
  v1::Message cut = FormatErrorMessage("why");
  cut.set_content(cut.content().substr(0, 60));
  EXPECT_EQ(FormatErrorReason(cut), std::nullopt);
}

}  // namespace
}  // namespace loom::tasks
