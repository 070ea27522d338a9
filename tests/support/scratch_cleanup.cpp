// Removes the scratch folder (process.hpp) of a test run that passed. ctest runs each case in a process of its
// own, and every one left a gpuex-test-<pid> folder behind: hundreds per run of the suite. A run with a failure
// keeps its folder, for its logs, and names it on stderr.
#include <filesystem>
#include <iostream>
#include <system_error>

#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include "support/process.hpp"

namespace gpuex::test {
namespace {

struct ScratchCleanup : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunEnded(const Catch::TestRunStats& stats) override {
    const auto folder = scratch_folder();
    if (!folder) return;
    if (stats.totals.assertions.failed == 0 && stats.totals.testCases.failed == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(*folder, ignored);
    } else {
      std::cerr << "the logs of this run are kept in " << folder->string() << "\n";
    }
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(ScratchCleanup)

}  // namespace gpuex::test
