// Child processes for integration tests: start a real gpuexd (or script), stop it, read its log.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace gpuex::test {

class Process {
 public:
  // Starts `argv[0]` with `argv`, extra `env` entries ("KEY=value") on top of ours, and stdout and
  // stderr appended to `log_path`.
  Process(std::vector<std::string> argv, std::string log_path, std::vector<std::string> env = {});
  ~Process();  // kills (SIGKILL) a child still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  void signal(int sig);
  // Waits for the exit; nullopt if still running after `timeout`. The code is 128+N for signal N.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  std::string log() const;

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string log_path_;
};

// Runs a command to completion (bounded by `timeout`) and returns its exit code and output.
struct RunResult {
  int exit_code;
  std::string output;
};
RunResult run_command(std::vector<std::string> argv, std::vector<std::string> env = {},
                      std::chrono::milliseconds timeout = std::chrono::seconds(120));

// A fresh path under the run's scratch folder (gpuex-test-<pid> in the temporary directory). In the test
// binaries the folder is removed when the run ends with every test passed (scratch_cleanup.cpp).
std::string scratch_path(const std::string& name);
// The scratch folder, once scratch_path() made it.
std::optional<std::filesystem::path> scratch_folder();

}  // namespace gpuex::test
