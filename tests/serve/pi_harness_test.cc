// A real agent harness against `loom serve`: Pi (@mariozechner/pi-coding-agent,
// installed by scripts/setup.sh at a pinned version) runs one non-interactive
// episode offline, with its own system prompt, four tools, content parts,
// the developer role and reasoning effort, and prints the model's answer.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "serve/serve_process.h"

namespace loom {
namespace {

using nlohmann::json;
using testing::AnswerXModel;
using testing::Server;
using testing::TempDir;

std::string PiBinary() {
  return std::string(LOOM_SOURCE_DIR) + "/third_party/npm/node_modules/.bin/pi";
}

TEST(PiHarnessTest, PiRunsAnEpisodeAgainstLoom) {
  if (!std::filesystem::exists(PiBinary())) {
    GTEST_SKIP() << "Pi is not installed: run scripts/setup.sh";
  }
  TempDir dir;
  // Pi's system prompt and tool schemas are about 6 kB.
  Server server(dir, AnswerXModel(dir, 16384), "--effort low");
  ASSERT_GT(server.port(), 0) << server.Log();

  const std::string agent_dir = dir / "pi-agent";
  ASSERT_EQ(testing::RunCommand("mkdir -p " + agent_dir + " " + dir / "home" + " " + dir / "work")
                .exit_code,
            0);
  const json models = {{"providers",
                        {{"loom",
                          {{"baseUrl", "http://127.0.0.1:" + std::to_string(server.port()) + "/v1"},
                           {"api", "openai-completions"},
                           {"apiKey", "LOOM_API_KEY"},  // the name of the variable that holds it
                           {"models",
                            {{{"id", "tiny"},
                              {"reasoning", true},
                              {"contextWindow", 16384},
                              {"maxTokens", 64}}}}}}}}};
  std::ofstream(agent_dir + "/models.json") << models.dump(2);

  // Offline: Pi's version check and telemetry are off, and its home is ours.
  const std::string command = "cd " + dir / "work" + " && HOME=" + dir / "home" +
                              " PI_CODING_AGENT_DIR=" + agent_dir +
                              " LOOM_API_KEY=" + testing::kKey + " PI_OFFLINE=1 PI_TELEMETRY=0 " +
                              PiBinary() + " -p --no-session --model loom/tiny 'Say x.'";
  auto pi = testing::RunCommand(command);
  EXPECT_EQ(pi.exit_code, 0) << pi.out << pi.err << server.Log();
  EXPECT_EQ(pi.out, "x\n") << pi.err;
  // Pi asked for its default thinking level, which the effort table turned
  // into the prompt's effort line; the turn ended at the end of sentence.
  EXPECT_FALSE(server.AwaitLog("turn 0: stop after 3 tokens, prompt [0-9]+").empty())
      << server.Log();
}

}  // namespace
}  // namespace loom
