// The container images' build and install steps, without Docker. Each docker/*.Dockerfile
// configures a build, builds some targets (`cmake --build /build --target ...`) and installs
// some components (`cmake --install /build --component C --prefix P`). An image fails to
// build when it installs something it did not build ("file INSTALL cannot find ..."), and is
// useless when it builds something it never installs or copies a path the install did not
// produce. This suite reads the Dockerfiles' own command lines, replays every install against
// this build tree into a temporary prefix, and checks: exactly the built targets are
// installed, each runs (`--version`) with every shared library found (ldd), and each path a
// later stage COPYs from the build stage exists.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <set>

#include "dockerfile.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

using lockstep::test::Dockerfile;
using lockstep::test::parse_dockerfile;

std::string build_dir() { return lockstep::test::env_or("LOCKSTEP_BUILD_DIR", ""); }
std::string cmake() { return lockstep::test::env_or("LOCKSTEP_CMAKE", "cmake"); }

// Replays `recipe`'s installs into `root` (each prefix P becomes root/P); returns the problems.
std::vector<std::string> replay(const Dockerfile& recipe, const std::string& root) {
  std::vector<std::string> problems;
  if (recipe.targets.empty()) problems.push_back("no `cmake --build ... --target` line");
  if (recipe.installs.empty()) problems.push_back("no `cmake --install` line");
  std::set<std::string> installed;
  for (const auto& in : recipe.installs) {
    if (in.prefix.empty()) {
      problems.push_back("a `cmake --install` without --prefix");
      continue;
    }
    std::vector<std::string> argv = {cmake(), "--install", build_dir(), "--prefix", root + in.prefix};
    if (!in.component.empty()) argv.insert(argv.end(), {"--component", in.component});
    auto r = lockstep::run_capture(argv, {}, 120s);
    if (!r.status.success()) {
      problems.push_back(lockstep::shell_join(argv) + " failed: " + r.output);
      continue;
    }
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root + in.prefix + "/bin", ec)) installed.insert(e.path().filename());
    // A bundle target (lockstep-agent-bundle) installs a directory, <prefix>/lockstep, whose
    // launcher has the program's name (docker/agent.Dockerfile).
    for (const auto& t : recipe.targets)
      if (t.size() > 7 && t.compare(t.size() - 7, 7, "-bundle") == 0 &&
          fs::exists(root + in.prefix + "/lockstep/" + t.substr(0, t.size() - 7), ec))
        installed.insert(t);
  }
  for (const auto& name : installed)
    if (!recipe.targets.count(name))
      problems.push_back("installs " + name + ", which it does not build (`cmake --build --target` lacks it): in the image "
                         "`cmake --install` stops with \"file INSTALL cannot find\"; install by --component");
  for (const auto& t : recipe.targets)
    if (!installed.count(t)) problems.push_back("builds " + t + " but installs no bin/" + t);
  for (const auto& c : recipe.copies)
    if (!fs::exists(root + c.src)) problems.push_back("COPY --from=build " + c.src + ": the install produced no such file");
  return problems;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += "  " + s + "\n";
  return out;
}

class Images : public ::testing::TestWithParam<std::string> {};

TEST_P(Images, InstallTreeHasExactlyTheBuiltBinariesAndTheyRun) {
  if (build_dir().empty()) GTEST_SKIP() << "SKIPPED: LOCKSTEP_BUILD_DIR is not set (ctest sets it)";
  const std::string dockerfile = std::string(LOCKSTEP_SOURCE_DIR) + "/docker/" + GetParam();
  auto recipe = parse_dockerfile(lockstep::test::read_file(dockerfile));
  const std::string root = ::testing::TempDir() + "/images-" + std::to_string(::getpid()) + "/" + GetParam();
  fs::remove_all(root);
  auto problems = replay(recipe, root);
  ASSERT_TRUE(problems.empty()) << dockerfile << ":\n" << join(problems);
  for (const auto& in : recipe.installs) {
    std::vector<std::string> programs;
    std::set<std::string> launchers;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root + in.prefix + "/bin", ec)) programs.push_back(e.path().string());
    for (const auto& t : recipe.targets)
      if (t.size() > 7 && t.compare(t.size() - 7, 7, "-bundle") == 0)
        launchers.insert(programs.emplace_back(root + in.prefix + "/lockstep/" + t.substr(0, t.size() - 7)));
    ASSERT_FALSE(programs.empty()) << "nothing to run under " << root + in.prefix;
    for (const auto& bin : programs) {
      SCOPED_TRACE(bin);
      auto version = lockstep::run_capture({bin, "--version"}, {}, 60s);
      EXPECT_EQ(version.status.shell_code(), 0) << version.output;
      EXPECT_NE(version.output.find("0."), std::string::npos) << version.output;
      auto ldd = lockstep::run_capture({"ldd", bin}, {}, 60s);
      if (launchers.count(bin)) {
        // A bundle's launcher is static: it runs where there is no libc at all.
        EXPECT_NE(ldd.output.find("not a dynamic executable"), std::string::npos) << ldd.output;
        continue;
      }
      // The installed RPATH (CMAKE_INSTALL_RPATH_USE_LINK_PATH) must still find every library.
      EXPECT_EQ(ldd.status.shell_code(), 0) << ldd.output;
      EXPECT_EQ(ldd.output.find("not found"), std::string::npos) << ldd.output;
    }
  }
  if (!HasFailure()) fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Dockerfiles, Images, ::testing::Values("operator.Dockerfile", "trainer.Dockerfile", "agent.Dockerfile"),
                         [](const auto& info) { return std::regex_replace(info.param, std::regex("[^A-Za-z0-9]"), "_"); });

// Every Dockerfile in docker/ is covered by the suite above.
TEST(Images, EveryDockerfileIsChecked) {
  std::set<std::string> found;
  for (const auto& e : fs::directory_iterator(std::string(LOCKSTEP_SOURCE_DIR) + "/docker"))
    if (e.path().extension() == ".Dockerfile") found.insert(e.path().filename());
  EXPECT_EQ(found, (std::set<std::string>{"operator.Dockerfile", "trainer.Dockerfile", "agent.Dockerfile"}));
}

// The check can fail: the operator recipe as it was (build one target, install everything)
// is caught, with the message the image build would have stopped on in mind.
TEST(Images, CatchesARecipeThatInstallsWhatItDidNotBuild) {
  if (build_dir().empty()) GTEST_SKIP() << "SKIPPED: LOCKSTEP_BUILD_DIR is not set (ctest sets it)";
  auto recipe = parse_dockerfile(
      "FROM debian:bookworm AS build\n"
      "RUN cmake -S /src -B /build -G Ninja -DLOCKSTEP_BUILD_TESTS=OFF \\\n"
      " && cmake --build /build --target lockstep-operator \\\n"
      " && cmake --install /build --prefix /out\n"
      "FROM debian:bookworm-slim\n"
      "COPY --from=build /out/bin/lockstep-operator /usr/local/bin/lockstep-operator\n");
  EXPECT_EQ(recipe.targets, (std::set<std::string>{"lockstep-operator"}));
  ASSERT_EQ(recipe.installs.size(), 1u);
  EXPECT_EQ(recipe.installs[0].component, "");
  const std::string root = ::testing::TempDir() + "/images-old-" + std::to_string(::getpid());
  fs::remove_all(root);
  auto problems = replay(recipe, root);
  EXPECT_NE(join(problems).find("installs lockstep, which it does not build"), std::string::npos) << join(problems);
  fs::remove_all(root);
}

// The final stage's settings are read as the image will have them: a later stage resets them,
// JSON-array ENTRYPOINT kept as written, apt packages without options.
TEST(Images, ReadsTheFinalStagesSettings) {
  auto d = parse_dockerfile(
      "FROM debian:bookworm AS build\n"
      "USER 7\nENV A=1\nRUN apt-get install -y build-essential\n"
      "FROM debian:bookworm-slim\n"
      "RUN apt-get update && apt-get install -y --no-install-recommends \\\n"
      "      libssl3 ca-certificates \\\n && rm -rf /var/lib/apt/lists/*\n"
      "COPY --from=build /out/bin/x /usr/local/bin/x\n"
      "# USER 0\n"
      "USER 65532:65532\nWORKDIR /w\nENV B=2\n"
      "ENTRYPOINT [\"/usr/local/bin/x\"]\n");
  EXPECT_EQ(d.user, "65532:65532");
  EXPECT_EQ(d.entrypoint, "[\"/usr/local/bin/x\"]");
  EXPECT_EQ(d.cmd, "");
  EXPECT_EQ(d.workdir, "/w");
  EXPECT_EQ(d.env, std::vector<std::string>{"B=2"});
  EXPECT_EQ(d.apt_packages, (std::set<std::string>{"libssl3", "ca-certificates"}));
  ASSERT_EQ(d.copies.size(), 1u);
  EXPECT_EQ(d.copies[0].dst, "/usr/local/bin/x");
}

// scripts/images.sh names its images lockstep/<name>:<project version>; the chart and every
// example must ask for those names, or a cluster fed with local images cannot find them.
TEST(Images, TheChartAndExamplesNameTheLocallyBuiltImages) {
  const fs::path root = LOCKSTEP_SOURCE_DIR;
  std::smatch m;
  const std::string cmake_lists = lockstep::test::read_file((root / "CMakeLists.txt").string());
  ASSERT_TRUE(std::regex_search(cmake_lists, m, std::regex(R"(project\(lockstep VERSION ([0-9.]+))")));
  const std::string version = m[1];
  const std::string chart = lockstep::test::read_file((root / "charts/lockstep/Chart.yaml").string());
  ASSERT_TRUE(std::regex_search(chart, m, std::regex(R"(appVersion: "?([0-9.]+))")));
  EXPECT_EQ(m[1].str(), version) << "the chart's image tag defaults to its appVersion";
  const std::string values = lockstep::test::read_file((root / "charts/lockstep/values.yaml").string());
  EXPECT_TRUE(std::regex_search(values, std::regex(R"(repository: lockstep/operator\s)"))) << values;
  int images = 0;
  static const std::regex image(R"(image:\s*(\S+))");
  for (const auto& e : fs::directory_iterator(root / "examples")) {
    // Bring your own image: this one names a stock PyTorch image on purpose (the cluster tier
    // runs it on the locally built lockstep/pytorch instead).
    if (e.path().filename() == "pytorch-script.yaml") continue;
    const std::string text = lockstep::test::read_file(e.path().string());
    for (auto i = std::sregex_iterator(text.begin(), text.end(), image); i != std::sregex_iterator(); ++i) {
      EXPECT_EQ((*i)[1].str(), "lockstep/trainer:" + version) << e.path();
      ++images;
    }
  }
  EXPECT_GT(images, 0);
}

}  // namespace
