// See process.hpp.
#include "support/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
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

  // fork + exec rather than posix_spawn, for one thing posix_spawn cannot do: the child asks the
  // kernel to kill it when this process dies. A test killed by ctest's timeout (or by hand) would
  // otherwise leave its gpuexd running, holding a port and a database of the test cluster. (The signal
  // comes when the *thread* that forked exits: start long-lived children from the test's main thread.)
  int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int status_pipe[2] = {-1, -1};  // the child writes errno here if exec fails; closed by a good exec
  if (log_fd < 0 || null_fd < 0 || ::pipe2(status_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    for (int fd : {log_fd, null_fd}) if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(err));
  }
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {  // the child: async-signal-safe calls only
    errno = ESRCH;  // what a parent that died before prctl reads as
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && ::getppid() == parent && ::dup2(null_fd, 0) == 0 &&
        ::dup2(log_fd, 1) == 1 && ::dup2(log_fd, 2) == 2)
      ::execve(args[0], args.data(), envp.data());
    int err = errno;
    [[maybe_unused]] auto n = ::write(status_pipe[1], &err, sizeof err);
    ::_exit(127);
  }
  int fork_errno = errno;
  ::close(status_pipe[1]);
  ::close(log_fd);
  ::close(null_fd);
  if (pid_ < 0) {
    ::close(status_pipe[0]);
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(fork_errno));
  }
  int exec_errno = 0;
  ssize_t got;
  do got = ::read(status_pipe[0], &exec_errno, sizeof exec_errno);
  while (got < 0 && errno == EINTR);
  ::close(status_pipe[0]);
  if (got > 0) {
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(exec_errno));
  }
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

namespace {

// Set when the first scratch path is handed out.
std::optional<std::filesystem::path> scratch_dir;

const std::filesystem::path& make_scratch_dir() {
  static const std::filesystem::path& dir = []() -> const std::filesystem::path& {
    // A folder of an earlier process that had our pid would hand us its stale port files and logs
    // (a test then talks to no server, or to another test's): start from an empty one.
    auto d = std::filesystem::temp_directory_path() / ("gpuex-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return scratch_dir.emplace(std::move(d));
  }();
  return dir;
}

}  // namespace

std::optional<std::filesystem::path> scratch_folder() { return scratch_dir; }

std::string scratch_path(const std::string& name) {
  static std::atomic<int> counter{0};
  return (make_scratch_dir() / (std::to_string(counter++) + "-" + name)).string();
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
