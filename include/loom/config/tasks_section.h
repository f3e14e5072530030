#pragma once
// `tasks:` — the datasets prompts come from: built-in generators (arithmetic,
// sort, reverse) or JSON-lines files, each with its sampling weight,
// concurrency cap and held-out evaluation split; or built-in agentic tasks
// (`environment: sandbox`) whose samples are multi-turn episodes run on the
// sandbox workers.

#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "loom/base/env_name.h"
#include "loom/config/schema.h"

namespace loom::config {

// Online difficulty filtering of one dataset's training tasks.
struct DatasetFilterSection {
  double min_pass = 0;
  double max_pass = 1;
  int after_attempts = 0;  // 0 = off
  int window = 0;          // 0 = every attempt of the run
  bool from_ledger = false;

  template <class V>
  void Visit(V& v) {
    v.Field("min_pass", min_pass,
            Doc("A task whose running pass rate falls below this, after `after_attempts` "
                "attempts, is retired for the rest of the run (its GRPO subgroups would all "
                "fail and teach nothing).")
                .Range(0, 1));
    v.Field("max_pass", max_pass,
            Doc("A task whose running pass rate rises above this, after `after_attempts` "
                "attempts, is retired for the rest of the run (every sample solves it).")
                .Range(0, 1));
    v.Field("after_attempts", after_attempts,
            Doc("Trained samples of a task (every effort and step counted; infrastructure "
                "failures not) before its pass rate can retire it. 0 turns the filter off. "
                "One GRPO group's worth (the sum of effort.samples_per_level) judges a task on "
                "its first group.")
                .Unit("samples")
                .Min(0));
    v.Field("window", window,
            Doc("Judge a task on its most recent `window` attempts in this run instead of all of "
                "them, so that a task the policy learns (or unlearns) during the run retires "
                "once the window leaves the band: a moving curriculum. Until the run has "
                "min(window, after_attempts) attempts at a task, its whole tally judges it. 0: "
                "every attempt.")
                .Unit("samples")
                .Range(0, 64));
    v.Field("from_ledger", from_ledger,
            Doc("Start each task's tally from its attempts in the task ledger (tasks.ledger: "
                "earlier runs, any dataset, training and evaluation splits, infrastructure "
                "failures left out), so a task the ledger already shows outside the band is "
                "retired before the run draws it. Read once, when the stage starts afresh."));
  }

  void Validate(ErrorSink& errors) const {
    if (min_pass > max_pass) {
      errors.Error("min_pass", "must be <= max_pass (" + std::to_string(max_pass) + ")");
    }
  }
};

// One dataset of the mix.
struct DatasetSection {
  std::string name;  // required; unique; names metrics and problem ids
  std::string kind = "arithmetic";
  std::string environment = "none";  // "sandbox": multi-turn agent episodes on sandbox workers
  std::string path;                  // kind jsonl: the training file
  std::string eval_path;             // kind jsonl: optional separate held-out file
  double weight = 1.0;               // relative sampling weight
  bool active = true;                // false: no new prompts from it (in-flight ones still train)
  int max_inflight = 0;              // concurrency cap in samples; 0 = none
  int min_difficulty = 1;
  int max_difficulty = 3;
  double eval_fraction = 0.1;             // share of the problem space held out
  int eval_size = 64;                     // held-out problems evaluated (generators)
  std::string system_prompt;              // "" = no system message
  double answer_only_fraction = 0;        // generators: SFT references without the worked reasoning
  double partial_reasoning_fraction = 0;  // generators: worked references cut after some lines
  double answer_only_spread = 0;          // generators: answer-only share rises with difficulty
  int answer_only_keeps_lines = 0;        // generators: answer-only references keep N lines
  double reversed_answer_fraction = 0;    // generators: SFT references whose answer is reversed
  double demonstration_slip_fraction = 0;          // agentic: demonstrations with the task's slip
  bool restate_effort = false;                     // SFT reasoning opens with "effort KLM..."
  bool restate_problem = false;                    // SFT working opens with the user's message
  bool answer_restates_problem = false;            // the final answer opens with the user's message
  std::string teacher;                             // opd stage: the teacher (opd.teachers[].name)
  std::string harness = "builtin";                 // sandbox: what runs the episodes
  std::string harness_command;                     // a harness not built in: its bash command
  std::string harness_args;                        // a built-in harness: more arguments
  std::map<std::string, std::string> harness_env;  // an external harness: more environment
  DatasetFilterSection filter;                     // online difficulty filtering

  template <class V>
  void Visit(V& v) {
    v.Field("name", name, Doc("Dataset name: unique, used in metrics and problem ids.").Required());
    v.Field(
        "kind", kind,
        Doc("Where problems come from: a built-in generator (arithmetic: multi-digit + and - "
            "with a digit-by-digit scratchpad; sort: ascending list of integers; reverse: "
            "reverse a word letter by letter; chain: a given number of digits more, each the "
            "sum of the two before mod 10, one line a digit; effort: asks for the reasoning "
            "effort, each problem shown at its own effort, so that a small model learns to "
            "read the effort line) or a JSON-lines file. With `environment: sandbox`: a built-in "
            "agentic task (arithmetic: a 9-digit product the python tool "
            "helps with; fix_repo: a tiny Python package with a failing test; lookup: a "
            "digit that only a file in the workspace holds), each with demonstrations an SFT "
            "stage trains on; or agent_jsonl: agent tasks from a file (`path`), one per line "
            "with problem, environment, verification, optional reference solution (its "
            "demonstration) and tags (docs/tasks.md).")
            .OneOf({"arithmetic", "sort", "reverse", "chain", "effort", "jsonl", "fix_repo",
                    "lookup", "agent_jsonl"}));
    v.Field("environment", environment,
            Doc("none: single-turn prompts judged by the verifier. sandbox: each sample is a "
                "multi-turn agent episode on a sandbox worker (see `sandbox:`); its tool results "
                "are appended as tokens without loss and its reward is the episode's verdict.")
                .OneOf({"none", "sandbox"}));
    v.Field(
        "path", path,
        Doc("kind jsonl: file with one problem per line (kind agent_jsonl: one agent task per "
            "line, relative to the file for environment dirs): {\"messages\": [...], \"answer\": "
            "..., "
            "\"verifier\": \"exact|numeric|regex\", \"effort\": 1..100} (verifier and effort "
            "optional; effort: the problem is always shown at it). A trailing assistant message "
            "is the SFT reference."));
    v.Field("eval_path", eval_path,
            Doc("kinds jsonl and agent_jsonl: a separate held-out file. Empty: hold out "
                "`eval_fraction` of `path` "
                "(chosen by a hash of each prompt)."));
    v.Field("weight", weight,
            Doc("Relative sampling weight of this dataset when the dispatcher picks the next "
                "prompt.")
                .Min(0));
    v.Field(
        "active", active,
        Doc("Whether the dispatcher (and the SFT sampler) draws prompts from this dataset. "
            "Set false, e.g. live with `loom ctl RUN_DIR set tasks.datasets.NAME.active=false`, "
            "to stop new prompts while the samples already in flight still train. Its "
            "held-out set is still evaluated."));
    v.Field("max_inflight", max_inflight,
            Doc("Concurrency cap: at most this many of its samples in flight at once (steers the "
                "dataset mix of the steady-state batch against length bias). 0 = no cap.")
                .Unit("samples")
                .Min(0));
    v.Field("min_difficulty", min_difficulty,
            Doc("Generators: smallest difficulty drawn (arithmetic: digits per operand; sort: "
                "list length - 1; reverse: word length - 2).")
                .Range(1, 20));
    v.Field("max_difficulty", max_difficulty,
            Doc("Generators: largest difficulty drawn; each problem draws uniformly in between.")
                .Range(1, 20));
    v.Field("eval_fraction", eval_fraction,
            Doc("Share of the problem space held out for evaluation, chosen by a hash of the "
                "prompt so training never sees a held-out prompt.")
                .Range(0, 0.5));
    v.Field("eval_size", eval_size,
            Doc("Held-out problems per evaluation (generators; jsonl: at most this many, 0 = all).")
                .Unit("problems")
                .Min(0));
    v.Field("system_prompt", system_prompt,
            Doc("Generators: system message prepended to every prompt; empty for none."));
    v.Field("answer_only_fraction", answer_only_fraction,
            Doc("Generators: share of training problems whose SFT reference gives only the "
                "final answer, with empty reasoning (chosen per problem, deterministically). "
                "Makes the demonstrations deliberately incomplete: above 0.5 the SFT model "
                "answers without working by default, and GRPO has to find that working it "
                "out pays. Held-out problems and verifiers are unaffected.")
                .Range(0, 1));
    v.Field("answer_only_spread", answer_only_spread,
            Doc("Generators: how much more often the hardest problems' SFT references are "
                "answer-only than the easiest ones'. The share rises linearly with the "
                "difficulty, from answer_only_fraction - spread/2 at min_difficulty to "
                "answer_only_fraction + spread/2 at max_difficulty (clipped to 0..1), the same "
                "at every effort: the SFT model then works short problems more often than long "
                "ones, and what the length reward has to find is only where, at each effort, "
                "working stops paying.")
                .Range(0, 1));
    v.Field("answer_only_keeps_lines", answer_only_keeps_lines,
            Doc("Generators: answer-only SFT references (`answer_only_fraction`) keep the first "
                "N lines of the working instead of none, so that every reference opens the "
                "same way and the choice to work on or to answer comes after them. chain: 1, "
                "whose letter says how many steps the working would take, puts the length of "
                "the work right before the choice (after the restated effort, if any).")
                .Unit("lines")
                .Range(0, 1000));
    v.Field("partial_reasoning_fraction", partial_reasoning_fraction,
            Doc("Generators: share of the training problems whose SFT reference still has its "
                "worked reasoning (after `answer_only_fraction`) that stops the reasoning after "
                "a random number of its lines, at least one and not all (chosen per problem, "
                "deterministically), so that the SFT model has seen every amount of working, "
                "from none to all, and the length reward could buy more of it at each higher "
                "effort. On two-digit arithmetic it weakened SFT instead (docs/rl.md). Held-out "
                "problems and verifiers are unaffected.")
                .Range(0, 1));
    v.Field("reversed_answer_fraction", reversed_answer_fraction,
            Doc("Generators: share of training problems whose SFT reference writes its final "
                "answer reversed, character by character, after correct reasoning (chosen per "
                "problem, deterministically): a systematic slip the verifier rejects. Above 0.5 "
                "the greedy SFT model makes the slip, while sampling still gives the right "
                "answer that often, so GRPO has plenty of correct samples to reinforce. "
                "Held-out problems and verifiers are unaffected.")
                .Range(0, 1));
    v.Field("demonstration_slip_fraction", demonstration_slip_fraction,
            Doc("Agentic fix_repo: share of training problems whose SFT demonstration makes a "
                "systematic slip the tests reject (its one-line sed patches the `return low` on "
                "line 4 instead of the bug on line 6; chosen per problem, deterministically). "
                "Above 0.5 the SFT model mostly makes the slip, while sampling still gives the "
                "fix often enough for GRPO to reinforce it from the sandbox's verdicts.")
                .Range(0, 1));
    v.Field("restate_effort", restate_effort,
            Doc("SFT references open their reasoning with `effort` and one capital letter per "
                "started tenth of the effort their prompt shows, from K on (`effort KLM` at 25, "
                "`effort KLMNOPQR` at 75; nothing when efforts are not shown), then a line break "
                "and the working, or the end of the reasoning for an answer-only reference. The "
                "model's choice to work then follows a letter of the effort's own, and nothing "
                "in the restatement looks like the working's digits or its carry marks. What to "
                "do at each effort is left to the length reward."));
    v.Field("restate_problem", restate_problem,
            Doc("Generators: SFT references that work the problem out open the working with "
                "the user's message copied, on a line of its own (after the restated effort, "
                "if any). The working then reads its operands at the same distance whatever "
                "came before it, instead of across a prompt and a restatement whose lengths "
                "vary with the effort. Answer-only references and held-out problems are "
                "unaffected."));
    v.Field("answer_restates_problem", answer_restates_problem,
            Doc("Generators: the final answer opens with the user's message copied, then ` = ` "
                "and the result (`Compute: 47+38 = 85`), checked whole by the exact verifier, "
                "for training and held-out problems alike. An answer given without working "
                "then reads the problem right before its result, at the same distance at every "
                "effort, instead of across a reasoning whose length varies with the effort. "
                "On the effort config it made such answers better without ordering them by "
                "effort (docs/rl.md)."));
    v.Field("harness", harness,
            Doc("environment sandbox: what runs each episode. builtin: loom's own loop (the "
                "worker renders and parses the turns). pi, claude-code, codex, opencode: that "
                "npm harness, the episode's main process in the sandbox (mounted from "
                "`sandbox.harness_dir`), its model calls served by loom's endpoint and trained "
                "as the session's segments, each with the episode's advantage. Any other name "
                "needs `harness_command`. To mix harnesses by weight, list the same file as "
                "several datasets, one per harness: each prompt group then runs under one "
                "harness (docs/tasks.md)."));
    v.Field("harness_command", harness_command,
            Doc("A harness not built in: the bash command that runs it in /workspace, the "
                "problem in $LOOM_PROBLEM, the endpoint in OPENAI_BASE_URL / ANTHROPIC_BASE_URL "
                "and the session's key in OPENAI_API_KEY / ANTHROPIC_API_KEY."));
    v.Field("harness_args", harness_args,
            Doc("A built-in harness: more arguments (bash words) for its command, before the "
                "problem. For a small model, Pi's `--system-prompt 'You are a coding agent.' "
                "--tools bash,write --no-context-files --no-skills` cuts its prompt from ~6k to "
                "~1.3k byte tokens."));
    v.Field("harness_env", harness_env,
            Doc("An external harness: environment variables its command gets, over the ones "
                "loom sets (e.g. {PI_OFFLINE: '1'}); the endpoint's URLs and key cannot be "
                "replaced."));
    v.Field("teacher", teacher,
            Doc("The opd stage distils this dataset's samples from this teacher (a name in "
                "opd.teachers); required for every dataset when train.stages has opd."));
    v.Section("filter", filter,
              Doc("Online difficulty filtering (GRPO and OPD): the dispatcher retires training "
                  "tasks whose running pass rate leaves [min_pass, max_pass] and skips them "
                  "for the rest of the run. Recorded in <run dir>/retired_tasks.jsonl and the "
                  "step line (tasks_retired_by_dataset, problems_skipped); its effect shows in "
                  "informative_subgroup_fraction. Live: min_pass, max_pass, after_attempts, window "
                  "(docs/tasks.md)."));
  }

  void Validate(ErrorSink& errors) const {
    if (min_difficulty > max_difficulty) {
      errors.Error("min_difficulty",
                   "must be <= max_difficulty (" + std::to_string(max_difficulty) + ")");
    }
    const bool file = kind == "jsonl" || kind == "agent_jsonl";
    if (file && path.empty()) errors.Error("path", "is required for kind " + kind);
    if (!file && !path.empty()) errors.Error("path", "is only for kinds jsonl and agent_jsonl");
    if (!file && !eval_path.empty()) {
      errors.Error("eval_path", "is only for kinds jsonl and agent_jsonl");
    }
    static const char* const kBuiltinHarnesses[] = {"builtin", "pi", "claude-code", "codex",
                                                    "opencode"};
    const bool builtin_harness =
        std::find(std::begin(kBuiltinHarnesses), std::end(kBuiltinHarnesses), harness) !=
        std::end(kBuiltinHarnesses);
    if (harness != "builtin" && environment != "sandbox") {
      errors.Error("harness", "runs agent episodes: only with environment sandbox");
    } else if (harness.empty()) {
      errors.Error("harness", "must name a harness (builtin, pi, claude-code, codex, opencode)");
    } else if (!builtin_harness && harness_command.empty()) {
      errors.Error("harness_command",
                   "is required for harness '" + harness +
                       "' (built in: builtin, pi, claude-code, codex, opencode)");
    } else if (builtin_harness && !harness_command.empty()) {
      errors.Error("harness_command", "is only for a harness not built in, not '" + harness + "'");
    }
    if (!harness_env.empty() && harness == "builtin") {
      errors.Error("harness_env", "is only for an external harness, not builtin");
    }
    static const char* const kEndpointVariables[] = {"LOOM_PROBLEM",       "LOOM_ENDPOINT",
                                                     "OPENAI_BASE_URL",    "OPENAI_API_KEY",
                                                     "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"};
    for (const auto& [name, value] : harness_env) {
      if (!IsEnvName(name)) {
        errors.Error("harness_env", "'" + name + "' is not a variable name");
      } else if (std::find(std::begin(kEndpointVariables), std::end(kEndpointVariables), name) !=
                 std::end(kEndpointVariables)) {
        errors.Error("harness_env", name + " is loom's: the episode's endpoint and problem");
      }
    }
    if (!harness_args.empty() && (harness == "builtin" || !builtin_harness)) {
      errors.Error("harness_args",
                   "is only for the harnesses built in (pi, claude-code, codex, opencode)");
    }
    if (environment == "sandbox" && kind != "arithmetic" && kind != "fix_repo" &&
        kind != "lookup" && kind != "agent_jsonl") {
      errors.Error("kind",
                   "environment sandbox runs agent tasks: agent_jsonl (a task file) or the "
                   "built-in arithmetic, fix_repo or lookup");
    }
    if (environment != "sandbox" &&
        (kind == "fix_repo" || kind == "lookup" || kind == "agent_jsonl")) {
      errors.Error("kind", kind + " is an agentic task: set environment: sandbox");
    }
    if (demonstration_slip_fraction > 0 && (environment != "sandbox" || kind != "fix_repo")) {
      errors.Error("demonstration_slip_fraction",
                   "is only for the agentic fix_repo task (environment: sandbox)");
    }
  }
};

struct TasksSection {
  std::vector<DatasetSection> datasets;
  int eval_every = 10;  // training steps between evaluations; 0 = never
  std::string ledger;   // "" = <run dir>/ledger.sqlite; "off" = none
  std::string ledger_errors = "continue";

  template <class V>
  void Visit(V& v) {
    v.List("datasets", datasets, Doc("The dataset mix, one entry per dataset."));
    v.Field("eval_every", eval_every,
            Doc("Evaluate every held-out set greedily every this many training steps (and after "
                "each stage). 0 = only after each stage.")
                .Unit("steps")
                .Min(0));
    v.Field("ledger", ledger,
            Doc("The task ledger (an SQLite file that runs may share): every trained and "
                "evaluated sample is appended with its task's content hash, reward and failure "
                "kind; `loom tasks stats` reads it. Empty: <run dir>/ledger.sqlite. off: none."));
    v.Field("ledger_errors", ledger_errors,
            Doc("When the ledger cannot be opened or written (locked by another run past its "
                "busy timeout, corrupt, or of a newer schema): continue without it, saying so "
                "in the log and metrics (ledger_errors), or stop the run.")
                .OneOf({"continue", "stop"}));
  }

  void Validate(ErrorSink& errors) const {
    for (size_t i = 0; i < datasets.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (datasets[i].name == datasets[j].name) {
          errors.Error("datasets[" + std::to_string(i) + "].name",
                       "duplicate dataset name '" + datasets[i].name + "'");
        }
      }
      if (datasets[i].filter.from_ledger && ledger == "off") {
        errors.Error("datasets[" + std::to_string(i) + "].filter.from_ledger",
                     "reads the task ledger, but tasks.ledger is off");
      }
    }
  }
};

}  // namespace loom::config
