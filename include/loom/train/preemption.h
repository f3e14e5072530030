#pragma once
// Preemption: SIGTERM and SIGUSR1 mean "this job is being preempted".
//
// The handler only sets an atomic flag (async-signal-safe); the run loop reads
// PreemptionRequested() between engine steps and between optimizer steps,
// stops at that token boundary, writes a checkpoint with every in-flight
// sample and returns PreemptedStatus(), which `loom train` turns into exit 0.
// A second signal while the checkpoint is being written sets the same flag
// again and changes nothing (SA_RESTART keeps the writes going).
//
// The deadline watchdog (StartPreemptDeadline): a thread that waits for the
// first signal and, if the process is still running `deadline_s` seconds after
// it, exits with status 1 so that a scheduler's kill -9 never comes first;
// checkpoints are atomic, so that exit leaves the previous checkpoint as the
// resume point.
// Process-wide state: install once, from the main thread.

#include <string>

#include "absl/status/status.h"

namespace loom::train {

// Installs the SIGTERM/SIGUSR1 handlers (idempotent).
void InstallPreemptionHandlers();

// True once a preemption signal arrived. Thread-safe.
bool PreemptionRequested();
// The signal number that arrived first (0 if none).
int PreemptionSignal();

// Starts (once) the watchdog: exit status 1 once `deadline_s` seconds passed
// since the first preemption signal, unless the process ended before.
void StartPreemptDeadline(double deadline_s);

// The status a stage returns after its preemption checkpoint is committed.
absl::Status PreemptedStatus(const std::string& checkpoint_dir);
bool IsPreempted(const absl::Status& status);

// For tests in one process: forget a received signal.
void ResetPreemptionForTesting();

}  // namespace loom::train
