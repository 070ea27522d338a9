// See process.hpp.
#include "support/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace gpuex::test {

Process::Process(std::vector<std::string> argv, std::string log_path, std::vector<std::string> env)
    : log_path_(std::move(log_path)) {
  std::vector<std::string> environment;
  for (char** e = environ; *e; ++e) environment.emplace_back(*e);
  for (auto& kv : env) environment.push_back(std::move(kv));
  std::vector<char*> args, envp;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto& e : environment) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
}

Process::~Process() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    wait(std::chrono::seconds(10));
  }
}

bool Process::running() {
  if (exit_code_) return false;
  return !wait(std::chrono::milliseconds(0)).has_value();
}

void Process::signal(int sig) {
  if (!exit_code_) ::kill(pid_, sig);
}

std::optional<int> Process::wait(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string Process::log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string scratch_path(const std::string& name) {
  static std::atomic<int> counter{0};
  // A folder of an earlier process that had our pid would hand us its stale port files and logs
  // (a test then talks to no server, or to another test's): start from an empty one.
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("gpuex-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }();
  return (dir / (std::to_string(counter++) + "-" + name)).string();
}

RunResult run_command(std::vector<std::string> argv, std::vector<std::string> env,
                      std::chrono::milliseconds timeout) {
  std::string log = scratch_path("command.log");
  Process p(std::move(argv), log, std::move(env));
  auto code = p.wait(timeout);
  if (!code) {
    p.signal(SIGKILL);
    p.wait(std::chrono::seconds(10));
    return {-1, p.log() + "\n(timed out)"};
  }
  return {*code, p.log()};
}

}  // namespace gpuex::test
