// The images scripts/images.sh builds without Docker (lockstep/operator, lockstep/trainer, lockstep/agent),
// checked against docker/*.Dockerfile, which stay the path to a registry:
//   - the image config (User, Entrypoint, Cmd, WorkingDir, Env) is the Dockerfile's final
//     stage's, in the OCI layout and in the archive `ctr images import` reads, under the name
//     the chart and the examples use;
//   - every file the Dockerfile's `cmake --install` lines produce is in the image at the path
//     the Dockerfile puts it, byte for byte, and nothing else is in /usr/local/bin;
//   - the runtime packages are the ones scripts/versions.env pins (the operator's are its
//     Dockerfile's) and were installed;
//   - every binary runs `--version` inside the image's own root file system (chroot, as the
//     image's user, with the image's environment) and ldd finds every library there.
// scripts/test.sh builds the images (scripts/images.sh build), which links each from
// $LOCKSTEP_BUILD_DIR/images/<name>; this suite only reads them. It needs root (umoci unpack,
// chroot), umoci and skopeo; without them it says SKIPPED, or fails under LOCKSTEP_REQUIRE_ALL=1.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "dockerfile.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;
using lockstep::test::Dockerfile;
using lockstep::test::env_or;
using lockstep::test::read_file;

namespace {

const std::string kSource = LOCKSTEP_SOURCE_DIR;

std::string build_dir() { return env_or("LOCKSTEP_BUILD_DIR", ""); }
bool require_all() { return env_or("LOCKSTEP_REQUIRE_ALL", "") == "1"; }

std::string project_version() {
  std::smatch m;
  const std::string cmake = read_file(kSource + "/CMakeLists.txt");
  return std::regex_search(cmake, m, std::regex(R"(project\(lockstep VERSION ([0-9.]+))")) ? m[1].str() : "";
}

bool on_path(const std::string& tool) {
  std::istringstream path(env_or("PATH", ""));
  for (std::string dir; std::getline(path, dir, ':');)
    if (!dir.empty() && ::access((dir + "/" + tool).c_str(), X_OK) == 0) return true;
  return false;
}

// The image directory scripts/images.sh linked for this build tree (oci/, image.tar,
// image.env, packages.txt).
std::string image_dir(const std::string& name) { return build_dir() + "/images/" + name; }

// Why this suite cannot check `name` here, or "" when it can.
std::string missing_prerequisite(const std::string& name) {
  if (build_dir().empty()) return "LOCKSTEP_BUILD_DIR is not set (ctest sets it)";
  if (::geteuid() != 0) return "needs root to unpack an image (umoci unpack) and run in it (chroot)";
  for (const char* tool : {"umoci", "skopeo", "chroot", "tar"})
    if (!on_path(tool)) return std::string(tool) + " not found; scripts/setup.sh installs it";
  if (!fs::exists(image_dir(name) + "/image.tar"))
    return "lockstep/" + name + " is not built for this build tree (no " + image_dir(name) +
           "); scripts/images.sh build " + name + " builds it (scripts/test.sh does)";
  return "";
}

#define REQUIRE_IMAGE(name)                                                     \
  do {                                                                          \
    const std::string why = missing_prerequisite(name);                         \
    if (!why.empty()) {                                                         \
      if (require_all()) FAIL() << why << " (LOCKSTEP_REQUIRE_ALL=1)";          \
      GTEST_SKIP() << "SKIPPED: " << why;                                       \
    }                                                                           \
  } while (0)

lockstep::RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 120s) {
  return lockstep::run_capture(argv, {}, timeout);
}

json blob(const std::string& layout, const std::string& digest) {
  return json::parse(read_file(layout + "/blobs/sha256/" + digest.substr(digest.find(':') + 1)));
}

// The image config in the OCI layout, by its tag.
json layout_config(const std::string& layout, const std::string& tag) {
  const json index = json::parse(read_file(layout + "/index.json"));
  for (const auto& m : index["manifests"])
    if (m.value("annotations", json::object()).value("org.opencontainers.image.ref.name", "") == tag)
      return blob(layout, blob(layout, m["digest"])["config"]["digest"]);
  return json();
}

// The settings a Dockerfile leaves unset are absent from the config (or, for JSON arrays,
// null): compare them as the same "unset".
json array_or_null(const std::string& dockerfile_json) {
  return dockerfile_json.empty() ? json() : json::parse(dockerfile_json);
}

struct Unpacked {
  std::string bundle;     // umoci unpack's bundle: rootfs/ and config.json
  std::string rootfs;
  std::string userspec;   // uid:gid, as umoci resolved the image's User in its rootfs
  std::vector<std::string> env;
};

class BuiltImage : public ::testing::TestWithParam<std::string> {
 protected:
  static std::map<std::string, Unpacked>& unpacked() {
    static std::map<std::string, Unpacked> u;
    return u;
  }
  static std::string scratch() { return ::testing::TempDir() + "/built-images-" + std::to_string(::getpid()); }
  static void TearDownTestSuite() { fs::remove_all(scratch()); }

  std::string name() const { return GetParam(); }
  Dockerfile dockerfile() const {
    return lockstep::test::parse_dockerfile(read_file(kSource + "/docker/" + name() + ".Dockerfile"));
  }
  std::string layout() const { return image_dir(name()) + "/oci"; }

  // The image's root file system, unpacked once per image for the whole suite.
  const Unpacked* unpack() {
    auto it = unpacked().find(name());
    if (it != unpacked().end()) return &it->second;
    Unpacked u;
    u.bundle = scratch() + "/" + name();
    u.rootfs = u.bundle + "/rootfs";
    fs::remove_all(u.bundle);
    fs::create_directories(scratch());
    auto r = run({"umoci", "unpack", "--image", layout() + ":" + project_version(), u.bundle}, 300s);
    if (!r.status.success()) {
      ADD_FAILURE() << "umoci unpack failed: " << r.output;
      return nullptr;
    }
    auto spec = json::parse(read_file(u.bundle + "/config.json"));
    u.userspec = std::to_string(spec["process"]["user"]["uid"].get<int>()) + ":" +
                 std::to_string(spec["process"]["user"]["gid"].get<int>());
    for (const auto& e : spec["process"]["env"]) u.env.push_back(e);
    return &unpacked().emplace(name(), u).first->second;
  }
};

TEST_P(BuiltImage, ConfigIsTheDockerfilesUnderTheChartsAndExamplesName) {
  REQUIRE_IMAGE(name());
  const Dockerfile d = dockerfile();
  // What `ctr images import` reads: the archive's manifest and config. The name is the one a
  // pod's `image: lockstep/<name>:<version>` resolves to.
  const std::string ref = "docker.io/lockstep/" + name() + ":" + project_version();
  auto manifest = run({"tar", "-xOf", image_dir(name()) + "/image.tar", "manifest.json"});
  ASSERT_TRUE(manifest.status.success()) << manifest.output;
  EXPECT_EQ(json::parse(manifest.output)[0]["RepoTags"], json::array({ref}));
  auto inspect = run({"skopeo", "inspect", "--config", "docker-archive:" + image_dir(name()) + "/image.tar"});
  ASSERT_TRUE(inspect.status.success()) << inspect.output;
  const json archive = json::parse(inspect.output)["config"];
  const json oci = layout_config(layout(), project_version())["config"];
  ASSERT_FALSE(oci.is_null()) << "no tag " << project_version() << " in " << layout();
  for (const json* c : {&archive, &oci}) {
    SCOPED_TRACE(c == &archive ? "the archive's config" : "the OCI layout's config");
    EXPECT_EQ(c->value("User", ""), d.user);
    EXPECT_EQ(c->value("Entrypoint", json()), array_or_null(d.entrypoint));
    EXPECT_EQ(c->value("Cmd", json()), array_or_null(d.cmd));
    EXPECT_EQ(c->value("WorkingDir", ""), d.workdir);
    const auto env = c->value("Env", std::vector<std::string>{});
    for (const auto& e : d.env) EXPECT_NE(std::find(env.begin(), env.end(), e), env.end()) << "ENV " << e;
    // The operator starts `lockstep-agent` and `lockstep-trainer` by name: PATH must hold them.
    auto path = std::find_if(env.begin(), env.end(), [](const std::string& e) { return e.rfind("PATH=", 0) == 0; });
    ASSERT_NE(path, env.end());
    EXPECT_NE((":" + path->substr(5) + ":").find(":/usr/local/bin:"), std::string::npos) << *path;
  }
}

TEST_P(BuiltImage, InstallTreeIsInTheImageAtTheDockerfilesPaths) {
  REQUIRE_IMAGE(name());
  const Unpacked* u = unpack();
  ASSERT_NE(u, nullptr);
  const Dockerfile d = dockerfile();
  // Replay the Dockerfile's installs against this build tree; map each file to its image path.
  const std::string root = scratch() + "/install-" + name();
  fs::remove_all(root);
  std::map<std::string, std::string> expected;  // path in the image -> file the install made
  for (const auto& in : d.installs) {
    std::vector<std::string> argv = {env_or("LOCKSTEP_CMAKE", "cmake"), "--install", build_dir(), "--prefix", root + in.prefix};
    if (!in.component.empty()) argv.insert(argv.end(), {"--component", in.component});
    auto r = run(argv);
    ASSERT_TRUE(r.status.success()) << lockstep::shell_join(argv) << ": " << r.output;
    if (!in.final_stage) continue;  // reaches the image only through COPY, below
    for (const auto& e : fs::recursive_directory_iterator(root + in.prefix))
      if (e.is_regular_file()) expected[in.prefix + "/" + fs::relative(e.path(), root + in.prefix).string()] = e.path();
  }
  for (const auto& c : d.copies) expected[c.dst] = root + c.src;
  ASSERT_FALSE(expected.empty());
  std::set<std::string> bins;
  for (const auto& [image_path, file] : expected) {
    SCOPED_TRACE(image_path);
    const std::string in_image = u->rootfs + image_path;
    ASSERT_TRUE(fs::is_regular_file(in_image)) << "missing from the image";
    EXPECT_TRUE(read_file(in_image) == read_file(file))
        << "differs from this build tree's install: the image is older than the build; scripts/images.sh build " << name();
    EXPECT_EQ(fs::status(in_image).permissions(), fs::status(file).permissions());
    if (fs::path(image_path).parent_path() == "/usr/local/bin") bins.insert(fs::path(image_path).filename());
  }
  std::set<std::string> in_bin;
  for (const auto& e : fs::directory_iterator(u->rootfs + "/usr/local/bin")) in_bin.insert(e.path().filename());
  EXPECT_EQ(in_bin, bins) << "/usr/local/bin of the image holds exactly the Dockerfile's binaries";
  fs::remove_all(root);
}

TEST_P(BuiltImage, RuntimePackagesArePinnedAndInstalled) {
  REQUIRE_IMAGE(name());
  std::smatch m;
  const std::string versions = read_file(kSource + "/scripts/versions.env");
  std::string var = "IMAGE_" + name() + "_PACKAGES";
  std::transform(var.begin(), var.end(), var.begin(), ::toupper);
  ASSERT_TRUE(std::regex_search(versions, m, std::regex(var + "=\"([^\"]*)\""))) << var << " in scripts/versions.env";
  const auto pinned = lockstep::test::words(m[1]);
  ASSERT_FALSE(pinned.empty());
  // The operator's runtime stage is Debian too, so its packages must be the same. The trainer's
  // Dockerfile starts from a PyTorch image (no separate runtime stage) and is not comparable.
  if (name() == "operator") {
    EXPECT_EQ(std::set<std::string>(pinned.begin(), pinned.end()), dockerfile().apt_packages);
  }
  const std::string installed = read_file(image_dir(name()) + "/packages.txt");  // dpkg-query in the image
  for (const auto& p : pinned) EXPECT_TRUE(std::regex_search(installed, std::regex("(^|\n)" + std::regex_replace(p, std::regex(R"([.+])"), R"(\$&)") + " "))) << p;
}

TEST_P(BuiltImage, BinariesRunInsideTheImageAsItsUserWithEveryLibraryFound) {
  REQUIRE_IMAGE(name());
  const Unpacked* u = unpack();
  ASSERT_NE(u, nullptr);
  EXPECT_NE(u->userspec, "0:0") << "the Dockerfile runs as a non-root USER";
  int ran = 0;
  for (const auto& e : fs::directory_iterator(u->rootfs + "/usr/local/bin")) {
    const std::string bin = e.path().filename();
    SCOPED_TRACE(bin);
    // By name, through the image's PATH, with only the image's environment, as the image's user.
    std::vector<std::string> argv = {"chroot", "--userspec=" + u->userspec, u->rootfs, "/usr/bin/env", "-i"};
    argv.insert(argv.end(), u->env.begin(), u->env.end());
    argv.insert(argv.end(), {bin, "--version"});
    auto version = run(argv);
    EXPECT_EQ(version.status.shell_code(), 0) << lockstep::shell_join(argv) << "\n" << version.output;
    EXPECT_NE(version.output.find(bin + " " + project_version()), std::string::npos) << version.output;
    auto ldd = run({"chroot", u->rootfs, "/usr/bin/ldd", "/usr/local/bin/" + bin});
    EXPECT_EQ(ldd.status.shell_code(), 0) << ldd.output;
    EXPECT_EQ(ldd.output.find("not found"), std::string::npos) << ldd.output;
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

// lockstep/agent (docker/agent.Dockerfile): FROM scratch plus the agent bundle, which the
// operator's init container copies into each pod (Note [Agent injection]).
class AgentImage : public BuiltImage {};

TEST_P(AgentImage, IsTheBundleAloneAsItsDockerfileSays) {
  REQUIRE_IMAGE(name());
  const Dockerfile d = dockerfile();
  const json config = layout_config(layout(), project_version())["config"];
  EXPECT_EQ(config.value("User", ""), d.user);
  EXPECT_EQ(d.user, "65532:65532");
  EXPECT_TRUE(config.value("Entrypoint", json()).is_null()) << config;  // the operator gives the command
  const Unpacked* u = unpack();
  ASSERT_NE(u, nullptr);
  // Nothing but /lockstep: no shell, no libc of a base.
  std::set<std::string> top;
  for (const auto& e : fs::directory_iterator(u->rootfs)) top.insert(e.path().filename());
  EXPECT_EQ(top, (std::set<std::string>{"lockstep"}));
  // Exactly this build tree's bundle, file for file, modes included.
  ASSERT_EQ(d.copies.size(), 1u);
  ASSERT_EQ(d.installs.size(), 1u);
  const std::string root = scratch() + "/install-" + name();
  fs::remove_all(root);
  auto r = run({env_or("LOCKSTEP_CMAKE", "cmake"), "--install", build_dir(), "--prefix", root + d.installs[0].prefix,
                "--component", d.installs[0].component});
  ASSERT_TRUE(r.status.success()) << r.output;
  const std::string built = root + d.copies[0].src, in_image = u->rootfs + d.copies[0].dst;
  std::set<std::string> want, have;
  for (const auto& e : fs::recursive_directory_iterator(built)) want.insert(fs::relative(e.path(), built));
  for (const auto& e : fs::recursive_directory_iterator(in_image)) have.insert(fs::relative(e.path(), in_image));
  EXPECT_EQ(have, want);
  for (const auto& f : want) {
    if (!fs::is_regular_file(built + "/" + f)) continue;
    SCOPED_TRACE(f);
    EXPECT_TRUE(read_file(in_image + "/" + f) == read_file(built + "/" + f))
        << "differs from this build tree's bundle: scripts/images.sh build agent";
    EXPECT_EQ(fs::status(in_image + "/" + f).permissions(), fs::status(built + "/" + f).permissions());
  }
  fs::remove_all(root);
}

// What the init container does, in the image's root as its user: install the bundle into an
// empty directory (the pod's emptyDir), and the installed copy runs.
TEST_P(AgentImage, InstallsTheBundleAsTheInitContainerDoesAndTheCopyRuns) {
  REQUIRE_IMAGE(name());
  const Unpacked* u = unpack();
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->userspec, "65532:65532");
  const std::string target = u->rootfs + "/lockstep-install";
  fs::create_directories(target);
  ASSERT_EQ(::chown(target.c_str(), 65532, 65532), 0);
  auto install = run({"chroot", "--userspec=" + u->userspec, u->rootfs, "/lockstep/lockstep-agent", "--install-bundle",
                      "/lockstep-install"});
  EXPECT_EQ(install.status.shell_code(), 0) << install.output;
  auto version = run({"chroot", "--userspec=" + u->userspec, u->rootfs, "/lockstep-install/lockstep-agent", "--version"});
  EXPECT_EQ(version.status.shell_code(), 0) << version.output;
  EXPECT_NE(version.output.find("lockstep-agent " + project_version()), std::string::npos) << version.output;
  fs::remove_all(target);
}

INSTANTIATE_TEST_SUITE_P(Images, AgentImage, ::testing::Values("agent"), [](const auto& info) { return info.param; });

// `scripts/images.sh import` into a containerd of the test's own (root, state and socket in a
// temporary directory, no CRI plugin), as the real-node cluster's containerd gets the images:
// listed in namespace k8s.io under the name a pod's `image:` resolves to, labelled with the
// image's inputs, and not imported again while they are unchanged.
class ImportedImage : public BuiltImage {};

TEST_P(ImportedImage, ImportsIntoContainerdsK8sNamespaceOnce) {
  REQUIRE_IMAGE(name());
  for (const char* tool : {"containerd", "ctr"}) {
    if (on_path(tool)) continue;
    const std::string why = std::string(tool) + " not found; scripts/setup.sh installs it (Debian package containerd)";
    if (require_all()) FAIL() << why << " (LOCKSTEP_REQUIRE_ALL=1)";
    GTEST_SKIP() << "SKIPPED: " << why;
  }
  const std::string dir = scratch() + "/containerd-" + name(), sock = dir + "/containerd.sock";
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream config(dir + "/config.toml");
    config << "version = 2\nroot = \"" << dir << "/root\"\nstate = \"" << dir << "/state\"\n"
           << "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"
           << "[grpc]\n  address = \"" << sock << "\"\n[ttrpc]\n  address = \"" << sock << ".ttrpc\"\n";
  }
  lockstep::SpawnOptions so;
  so.argv = {"containerd", "--config", dir + "/config.toml"};
  so.output_path = dir + "/containerd.log";
  auto containerd = lockstep::Process::spawn(so);
  ASSERT_TRUE(lockstep::test::eventually([&] {
    return run({"ctr", "--address", sock, "version"}, 10s).status.success();
  })) << read_file(dir + "/containerd.log");
  const std::map<std::string, std::string> env = {{"LOCKSTEP_BUILD_DIR", build_dir()}};
  const std::vector<std::string> import = {kSource + "/scripts/images.sh", "import", "--address", sock, name()};
  auto first = lockstep::run_capture(import, env, 300s);
  EXPECT_TRUE(first.status.success()) << first.output;
  EXPECT_NE(first.output.find("imported in"), std::string::npos) << first.output;
  std::smatch key;
  const std::string image_env = read_file(image_dir(name()) + "/image.env");
  ASSERT_TRUE(std::regex_search(image_env, key, std::regex("key=(\\w+)")));
  auto list = run({"ctr", "--address", sock, "--namespace", "k8s.io", "images", "ls",
                   "name==docker.io/lockstep/" + name() + ":" + project_version()});
  EXPECT_NE(list.output.find("dev.lockstep.inputs=" + key[1].str()), std::string::npos) << list.output;
  auto second = lockstep::run_capture(import, env, 60s);
  EXPECT_TRUE(second.status.success()) << second.output;
  EXPECT_NE(second.output.find("already in containerd"), std::string::npos) << second.output;
  containerd.terminate(10s);
  if (!HasFailure()) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Images, BuiltImage, ::testing::Values("operator", "trainer"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Images, ImportedImage, ::testing::Values("operator", "trainer", "agent"),
                         [](const auto& info) { return info.param; });

}  // namespace
