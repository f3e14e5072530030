// Real agent harnesses against `loom serve`, each installed from npm by
// scripts/setup.sh at a pinned version and run offline for one
// non-interactive episode with its own system prompt, tools and effort:
//   Pi (@mariozechner/pi-coding-agent) over Chat Completions,
//   Claude Code (@anthropic-ai/claude-code) over Anthropic Messages,
//   Codex (@openai/codex) over Responses,
//   OpenCode (opencode-ai) over Chat Completions.
// Each prints the model's answer; the server's log shows how the turn ended.

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

std::string NpmBinary(const std::string& name) {
  return std::string(LOOM_SOURCE_DIR) + "/third_party/npm/node_modules/.bin/" + name;
}

// A harness's home, its working directory and the server it talks to.
struct Episode {
  TempDir dir;
  Server server;
  explicit Episode(int positions, const std::string& args = "")
      : server(dir, AnswerXModel(dir, positions, /*real_vocab=*/true), args) {
    EXPECT_GT(server.port(), 0) << server.Log();
    EXPECT_EQ(testing::RunCommand("mkdir -p " + dir / "home" + " " + dir / "work").exit_code, 0);
  }
  std::string BaseUrl() const { return "http://127.0.0.1:" + std::to_string(server.port()); }
  // `command` in the working directory with the harness's home as HOME.
  std::string In(const std::string& env, const std::string& command) const {
    return "cd " + dir / "work" + " && HOME=" + dir / "home" + " " + env + " " + command;
  }
};

TEST(HarnessTest, PiRunsAnEpisodeAgainstLoom) {
  if (!std::filesystem::exists(NpmBinary("pi"))) {
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
                              NpmBinary("pi") + " -p --no-session --model loom/tiny 'Say x.'";
  auto pi = testing::RunCommand(command);
  EXPECT_EQ(pi.exit_code, 0) << pi.out << pi.err << server.Log();
  EXPECT_EQ(pi.out, "x\n") << pi.err;
  // Pi asked for its default thinking level, which the effort table turned
  // into the prompt's effort line; the turn ended at the end of sentence.
  EXPECT_FALSE(server.AwaitLog("turn 0: stop after 3 tokens, prompt [0-9]+").empty())
      << server.Log();
}

TEST(HarnessTest, ClaudeCodeRunsAnEpisodeAgainstLoom) {
  if (!std::filesystem::exists(NpmBinary("claude"))) {
    GTEST_SKIP() << "Claude Code is not installed: run scripts/setup.sh";
  }
  // Claude Code's system prompt and twelve tool schemas are about 48 kB.
  Episode episode(32768);
  const std::string env = "ANTHROPIC_BASE_URL=" + episode.BaseUrl() +
                          " ANTHROPIC_API_KEY=" + testing::kKey +
                          " DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1"
                          " CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1";
  auto claude =
      testing::RunCommand(episode.In(env, NpmBinary("claude") + " -p --model tiny 'Say x.'"));
  EXPECT_EQ(claude.exit_code, 0) << claude.out << claude.err << episode.server.Log();
  EXPECT_EQ(claude.out, "x\n") << claude.err;
  // It streamed its request to /v1/messages, asking for effort "high".
  EXPECT_FALSE(episode.server.AwaitLog("turn [0-9]+: stop after 3 tokens, prompt [0-9]+").empty())
      << episode.server.Log();
}

TEST(HarnessTest, CodexRunsAnEpisodeAgainstLoom) {
  if (!std::filesystem::exists(NpmBinary("codex"))) {
    GTEST_SKIP() << "Codex is not installed: run scripts/setup.sh";
  }
  Episode episode(32768);
  // Codex reads its model provider from $CODEX_HOME/config.toml; the key
  // comes from the variable env_key names.
  const std::string codex_home = episode.dir / "codex";
  ASSERT_EQ(testing::RunCommand("mkdir -p " + codex_home).exit_code, 0);
  std::ofstream(codex_home + "/config.toml")
      << "model = \"tiny\"\nmodel_provider = \"loom\"\n"
      << "model_reasoning_effort = \"low\"\n"
      << "[model_providers.loom]\nname = \"loom\"\n"
      << "base_url = \"" << episode.BaseUrl() << "/v1\"\n"
      << "env_key = \"LOOM_API_KEY\"\nwire_api = \"responses\"\n";
  const std::string env = "CODEX_HOME=" + codex_home + " LOOM_API_KEY=" + testing::kKey;
  auto codex = testing::RunCommand(
      episode.In(env, NpmBinary("codex") + " exec --skip-git-repo-check 'Say x.'"));
  EXPECT_EQ(codex.exit_code, 0) << codex.out << codex.err << episode.server.Log();
  EXPECT_EQ(codex.out, "x\n") << codex.err;
  EXPECT_FALSE(episode.server.AwaitLog("turn [0-9]+: stop after 3 tokens, prompt [0-9]+").empty())
      << episode.server.Log();
}

TEST(HarnessTest, OpenCodeRunsAnEpisodeAgainstLoom) {
  if (!std::filesystem::exists(NpmBinary("opencode"))) {
    GTEST_SKIP() << "OpenCode is not installed: run scripts/setup.sh";
  }
  Episode episode(32768);
  // A provider through the AI SDK's OpenAI-compatible package (bundled),
  // from opencode.json in the working directory.
  const json config = {
      {"provider",
       {{"loom",
         {{"npm", "@ai-sdk/openai-compatible"},
          {"name", "loom"},
          {"options", {{"baseURL", episode.BaseUrl() + "/v1"}, {"apiKey", testing::kKey}}},
          {"models", {{"tiny", {{"name", "tiny"}}}}}}}}},
      {"model", "loom/tiny"}};
  std::ofstream(episode.dir / "work/opencode.json") << config.dump(2);
  // Offline: its update check is off and its package lookups find no registry.
  const std::string env = "OPENCODE_DISABLE_AUTOUPDATE=1 npm_config_registry=http://127.0.0.1:9/";
  auto opencode = testing::RunCommand(
      episode.In(env, NpmBinary("opencode") + " run --model loom/tiny 'Say x.'"));
  EXPECT_EQ(opencode.exit_code, 0) << opencode.out << opencode.err << episode.server.Log();
  EXPECT_EQ(opencode.out.substr(opencode.out.size() - std::min<size_t>(2, opencode.out.size())),
            "x\n")
      << opencode.out << opencode.err;
  // Besides the episode's turn, OpenCode asks for a title on its own sample.
  EXPECT_FALSE(
      episode.server.AwaitLog("turn [0-9]+: stop after 3 tokens, prompt [0-9]{4,}").empty())
      << episode.server.Log();
}

}  // namespace
}  // namespace loom
