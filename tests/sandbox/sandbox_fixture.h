#pragma once
// A fixture with a real bubblewrap Sandbox in a fresh directory. When
// bubblewrap cannot create sandboxes on this machine (no user namespaces)
// the tests FAIL saying so; set LOOM_ALLOW_NO_BWRAP=1 to skip them instead.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>

#include "loom/sandbox/sandbox.h"

namespace loom::sandbox {

class SandboxFixture : public testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = testing::TempDir() + "/loom_sbx_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    config_.root = tmpl;
    config_.limits.processes = 64;
    config_.limits.address_space = 512LL << 20;
    config_.limits.file_size = 1 << 20;
    config_.output_cap = 4096;
    absl::Status bwrap = CheckBubblewrap(config_);
    if (!bwrap.ok()) {
      const char* allow = getenv("LOOM_ALLOW_NO_BWRAP");
      if (allow != nullptr && std::string(allow) == "1") GTEST_SKIP() << bwrap.message();
      FAIL() << "sandboxes cannot run on this machine: " << bwrap.message();
    }
  }
  void TearDown() override {
    sandbox_.reset();
    EXPECT_TRUE(RemoveWorkerDirectory(config_.root).ok());
  }

  const Sandbox& Make(const v1::Environment& env = v1::Environment()) {
    sandbox_.reset();  // its directory has the same name
    auto created = Sandbox::Create(config_, 0, "test", env);
    EXPECT_TRUE(created.ok()) << created.status();
    sandbox_ = std::move(*created);
    return *sandbox_;
  }

  ProcessResult Run(const std::string& command, double timeout_s = 20) {
    auto result = sandbox_->Bash(command, timeout_s);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : ProcessResult();
  }

  SandboxConfig config_;
  std::unique_ptr<Sandbox> sandbox_;
};

}  // namespace loom::sandbox
