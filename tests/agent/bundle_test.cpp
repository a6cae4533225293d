// The agent's bundle (agent/bundle/, docs/agent.md "The bundle") in roots that are not this
// machine's, as real processes: the bundle is installed into a root by its own
// `--install-bundle`, and the agent started there as the operator starts it,
// `chroot ROOT /lockstep/lockstep-agent ... -- COMMAND`, with a fresh /proc and the host's /dev
// in a mount namespace of the test's own (tests/agent/bundle/chroot_run.c) and the host's
// network, so /metrics is scraped over loopback.
//   - a root with no libc at all: a statically linked worker trains, /metrics has its steps;
//   - Debian bullseye (glibc 2.31, older than the agent's; scripts/old-glibc-root.sh, passed as
//     LOCKSTEP_OLD_GLIBC_ROOT and never written: an overlay takes the test's files): /bin/sh
//     workers get the image's LD_PRELOAD, LD_AUDIT and LD_LIBRARY_PATH exactly, and the agent
//     never loads them;
//   - a fake libnvidia-ml.so.1 in the image's library directories gives GPU series;
//   - the master's name comes from the root's /etc/hosts, whatever its nsswitch.conf names.
// The roots need root (chroot, mounts): without it every case says SKIPPED (exit 77), and
// fails under LOCKSTEP_REQUIRE_ALL=1, as do the bullseye cases without LOCKSTEP_OLD_GLIBC_ROOT.
#include <gnu/libc-version.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>

#include "bundle_env.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/process.hpp"
#include "nvml.hpp"
#include "suite_result.hpp"
#include "test_util.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using lockstep::Process;
using lockstep::test::env_or;
using lockstep::test::eventually;
using lockstep::test::read_file;

namespace {

bool require_all() { return env_or("LOCKSTEP_REQUIRE_ALL", "") == "1"; }

#define SKIP_OR_FAIL(why)                                              \
  do {                                                                 \
    if (require_all()) FAIL() << why << " (LOCKSTEP_REQUIRE_ALL=1)";   \
    GTEST_SKIP() << "SKIPPED: " << why;                                \
  } while (0)
// The cases that chroot: without root they are skipped (main() then exits 77: the suite did
// not test what it is for), or fail under LOCKSTEP_REQUIRE_ALL=1.
constexpr const char* kNeedsRoot = "bundle_test runs the agent in other root file systems (chroot, mounts): needs root";
bool skipped_for_root = false;
#define REQUIRE_ROOT()                          \
  do {                                          \
    if (::geteuid() != 0) {                     \
      skipped_for_root = true;                  \
      SKIP_OR_FAIL(kNeedsRoot);                 \
    }                                           \
  } while (0)

std::string bundle() { return env_or("LOCKSTEP_AGENT_BUNDLE", ""); }
std::string worker_bin() { return env_or("LOCKSTEP_BUNDLE_TEST_WORKER", ""); }
std::string chroot_bin() { return env_or("LOCKSTEP_BUNDLE_TEST_CHROOT", ""); }
std::string record_lib() { return env_or("LOCKSTEP_BUNDLE_TEST_RECORD", ""); }
std::string fake_nvml() { return env_or("LOCKSTEP_BUNDLE_TEST_NVML", ""); }

std::string temp_dir(const std::string& name) {
  fs::path d = fs::path(::testing::TempDir()) / ("bundle-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return fs::canonical(d).string();
}

// Removes a test's directory (several copies of the bundle) unless the test failed.
void clean_up(const std::string& dir) {
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

void write_file(const std::string& path, const std::string& text, fs::perms mode = fs::perms(0644)) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
  fs::permissions(path, mode);
}

void copy_file(const std::string& from, const std::string& to, fs::perms mode = fs::perms(0755)) {
  fs::create_directories(fs::path(to).parent_path());
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  fs::permissions(to, mode);
}

// A root file system the agent runs in. The test writes and reads its files under `files`:
// the root itself, or the upper directory of an overlay on a read-only `lower` root.
struct Root {
  std::string dir;    // everything of this root on the host
  std::string mount;  // what is chrooted into
  std::string files;  // where the root's files are written and read by the test
  std::string lower;  // the cached root under the overlay, or ""
  std::string host(const std::string& path) const { return files + path; }
};

// The bundle, by its own --install-bundle, into ROOT/lockstep.
void install_bundle(const Root& r) {
  auto res = lockstep::run_capture({bundle() + "/lockstep-agent", "--install-bundle", r.host("/lockstep")}, {}, 60s);
  ASSERT_EQ(res.status.shell_code(), 0) << res.output;
}

// A root holding nothing (no libc, no loader, no /etc): /tmp, /proc and /dev to mount on.
Root empty_root(const std::string& name) {
  Root r;
  r.dir = temp_dir(name);
  r.mount = r.files = r.dir + "/root";
  for (const char* d : {"/tmp", "/proc", "/dev"}) fs::create_directories(r.files + d);
  fs::permissions(r.files + "/tmp", fs::perms(01777));
  return r;
}

// `lower` (a whole distribution) with the test's files in an overlay's upper directory.
Root overlay_root(const std::string& name, const std::string& lower) {
  Root r;
  r.dir = temp_dir(name);
  r.lower = lower;
  r.files = r.dir + "/upper";
  r.mount = r.dir + "/root";
  for (const auto& d : {r.files, r.mount, r.dir + "/work"}) fs::create_directories(d);
  return r;
}

// The environment a container runtime would give the agent's container.
std::map<std::string, std::string> container_env() {
  return {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
          {"HOME", "/root"},
          {"LOCKSTEP_JOB_NAME", "tj"},
          {"LOCKSTEP_JOB_NAMESPACE", "ns"},
          {"LOCKSTEP_JOB_UID", "uid-bundle"},
          {"LOCKSTEP_MASTER_PORT", std::to_string(lockstep::free_loopback_port())},
          {"LOCKSTEP_AGENT_PORT", std::to_string(lockstep::free_loopback_port())}};
}

struct AgentRun {
  Process proc;
  std::string log;
  std::string output() const { return read_file(log); }
};

// Runs `argv` (paths inside the root) in `r` with exactly `env`.
AgentRun start_in(const Root& r, const std::map<std::string, std::string>& env, const std::vector<std::string>& argv,
             const std::string& log_name) {
  AgentRun run;
  run.log = r.dir + "/" + log_name;
  lockstep::SpawnOptions so;
  so.argv = {chroot_bin()};
  if (!r.lower.empty()) so.argv.insert(so.argv.end(), {"--overlay", r.lower + ":" + r.files + ":" + r.dir + "/work"});
  for (const auto& [k, v] : env) so.argv.insert(so.argv.end(), {"--env", k + "=" + v});
  so.argv.push_back(r.mount);
  so.argv.insert(so.argv.end(), argv.begin(), argv.end());
  so.output_path = run.log;
  run.proc = Process::spawn(so);
  return run;
}

// The agent as the operator starts it: /lockstep/lockstep-agent [FLAGS] -- COMMAND.
std::vector<std::string> agent_argv(int metrics_port, int nproc, const std::vector<std::string>& command,
                                    const std::vector<std::string>& flags = {}) {
  std::vector<std::string> argv = {"/lockstep/lockstep-agent", "--nproc-per-node", std::to_string(nproc),
                                   "--metrics-address", "127.0.0.1", "--metrics-port", std::to_string(metrics_port)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::string scrape(int port) {
  return lockstep::run_capture({"curl", "-s", "http://127.0.0.1:" + std::to_string(port) + "/metrics"}, {}, 10s).output;
}

// The value of the series `name` whose labels include `labels`, or NaN.
double metric(const std::string& metrics, const std::string& name, const std::map<std::string, std::string>& labels) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, name.size() + 1, name + "{") != 0) continue;
    auto close = line.find('}');
    if (close == std::string::npos) continue;
    std::string set = line.substr(name.size(), close - name.size() + 1);
    bool all = true;
    for (const auto& [k, v] : labels) all &= set.find(k + "=\"" + v + "\"") != std::string::npos;
    if (all) return std::atof(line.c_str() + close + 1);
  }
  return std::nan("");
}

// Each rank's environment, from the "[rank N] env NAME=VALUE" lines the static worker prints.
std::map<int, std::map<std::string, std::string>> worker_envs(const std::string& output) {
  std::map<int, std::map<std::string, std::string>> out;
  static const std::regex line(R"(^\[rank (\d+)\] env ([^=]+)=(.*)$)");
  std::istringstream in(output);
  std::smatch m;
  for (std::string l; std::getline(in, l);)
    if (std::regex_match(l, m, line)) out[std::stoi(m[1])][m[2]] = m[3];
  return out;
}

std::map<std::string, std::string> env_file(const std::string& path) {
  std::map<std::string, std::string> env;
  std::istringstream in(read_file(path));
  for (std::string l; std::getline(in, l);) {
    auto eq = l.find('=');
    if (eq != std::string::npos) env[l.substr(0, eq)] = l.substr(eq + 1);
  }
  return env;
}

// What no worker may see: the launcher's private variables, or the bundle's library directory.
void expect_nothing_of_the_bundle(const std::map<std::string, std::string>& env, const std::string& who) {
  for (const auto& [k, v] : env) {
    EXPECT_NE(k.rfind("LOCKSTEP_BUNDLE_", 0), 0u) << who << " sees the launcher's private " << k << "=" << v;
    EXPECT_EQ(v.find("/lockstep/lib"), std::string::npos) << who << ": " << k << "=" << v;
  }
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) { out.push_back(cur); cur.clear(); }
    else cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// Every path under `dir` with its type, mode, link target and content.
std::map<std::string, std::string> tree(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    struct stat st {};
    ::lstat(e.path().c_str(), &st);
    std::ostringstream d;
    d << std::oct << (st.st_mode & 0177777);
    if (S_ISLNK(st.st_mode)) d << " -> " << fs::read_symlink(e.path()).string();
    else if (S_ISREG(st.st_mode)) d << " " << std::hash<std::string>()(read_file(e.path()));
    out[e.path().string().substr(dir.size())] = d.str();
  }
  return out;
}

}  // namespace

// --- 1. no libc at all ----------------------------------------------------------------------

TEST(Bundle, TrainsInARootWithNoLibcAtAll) {
  REQUIRE_ROOT();
  Root r = empty_root("nolibc");
  install_bundle(r);
  copy_file(worker_bin(), r.host("/worker"));
  for (const auto& e : fs::recursive_directory_iterator(r.files)) {
    std::string rel = e.path().string().substr(r.files.size());
    if (rel.rfind("/lockstep", 0) != 0) {
      EXPECT_TRUE(!e.is_regular_file() || rel == "/worker") << "the root holds " << rel;
    }
  }
  const int port = lockstep::free_loopback_port();
  AgentRun a = start_in(r, container_env(), agent_argv(port, 2, {"/worker", "5", "/release"}), "agent.log");
  std::string m;
  ASSERT_TRUE(eventually([&] {
    m = scrape(port);
    return metric(m, "lockstep_steps_total", {{"rank", "0"}}) == 5 && metric(m, "lockstep_steps_total", {{"rank", "1"}}) == 5;
  }, 60s)) << m << a.output();
  EXPECT_EQ(metric(m, "lockstep_tokens_total", {{"rank", "1"}, {"trainingjob", "tj"}, {"namespace", "ns"}}), 5 * 256) << m;
  EXPECT_EQ(metric(m, "lockstep_worker_up", {{"rank", "0"}}), 1) << m;
  // It runs as the bundle's loader, started as the launcher says, named as it was started.
  std::string proc = "/proc/" + std::to_string(a.proc.pid());
  EXPECT_EQ(fs::read_symlink(proc + "/exe").string(), r.host("/lockstep/lib/ld-linux-x86-64.so.2"));
  auto cmdline = split(read_file(proc + "/cmdline"), '\0');
  ASSERT_GE(cmdline.size(), 8u);
  EXPECT_EQ(std::vector<std::string>(cmdline.begin(), cmdline.begin() + 8),
            (std::vector<std::string>{"/lockstep/lib/ld-linux-x86-64.so.2", "--inhibit-cache", "--library-path",
                                      "/lockstep/lib", "--argv0", "/lockstep/lockstep-agent",
                                      "/lockstep/libexec/lockstep-agent", "--nproc-per-node"}));
  EXPECT_EQ(read_file(proc + "/comm"), "lockstep-agent\n");

  write_file(r.host("/release"), "");
  auto st = a.proc.wait_for(60s);
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), 0) << a.output();
  auto envs = worker_envs(a.output());
  ASSERT_EQ(envs.size(), 2u) << a.output();
  for (int rank = 0; rank < 2; ++rank) {
    auto& env = envs[rank];
    std::string who = "rank " + std::to_string(rank);
    EXPECT_EQ(env["RANK"], std::to_string(rank)) << who;
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank)) << who;
    EXPECT_EQ(env["WORLD_SIZE"], "2") << who;
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1") << who;
    EXPECT_NE(env["LOCKSTEP_METRICS_SOCKET"], "") << who;
    EXPECT_EQ(env["PATH"], container_env()["PATH"]) << who;
    for (const char* v : {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"})
      EXPECT_EQ(env.count(v), 0u) << who << ": the image set no " << v << ", yet " << v << "=" << env[v];
    expect_nothing_of_the_bundle(env, who);
  }
  EXPECT_NE(a.output().find("[rank 1] rank 1 reported 5 steps"), std::string::npos) << a.output();
  clean_up(r.dir);
}

// --- 2. an older glibc ------------------------------------------------------------------------

// The "2.NN" of the libc-2.NN.so in `root`'s library directory, or "".
std::string glibc_of(const std::string& root) {
  static const std::regex name(R"(libc-(2\.\d+)\.so)");
  for (const char* d : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root + d, ec)) {
      std::smatch m;
      std::string f = e.path().filename().string();
      if (std::regex_match(f, m, name)) return m[1];
    }
  }
  return "";
}

int minor_of(const std::string& version) { return std::atoi(version.c_str() + version.find('.') + 1); }

TEST(Bundle, AnOlderGlibcsWorkersGetTheImagesLoaderVariablesAndTheAgentNone) {
  REQUIRE_ROOT();
  std::string lower = env_or("LOCKSTEP_OLD_GLIBC_ROOT", "");
  if (lower.empty() || !fs::exists(lower + "/bin/sh"))
    SKIP_OR_FAIL("LOCKSTEP_OLD_GLIBC_ROOT names no root file system ('" << lower
                 << "'); scripts/test.sh makes one with scripts/old-glibc-root.sh");
  std::string theirs = glibc_of(lower), ours = gnu_get_libc_version();
  ASSERT_NE(theirs, "") << "cannot tell the glibc of " << lower;
  ASSERT_LT(minor_of(theirs), minor_of(ours)) << lower << " has glibc " << theirs << ", not older than ours, " << ours;

  Root r = overlay_root("bullseye", lower);
  install_bundle(r);
  copy_file(record_lib(), r.host("/opt/preload/librecord.so"), fs::perms(0644));
  fs::create_directories(r.host("/out"));
  write_file(r.host("/etc/hosts"), "127.0.0.1 localhost\n127.0.0.1 lockstep-master.test\n");
  std::string loads = r.host("/lockstep-test-loads.log");

  // The control: the agent without its bundle does not even start there.
  auto plain = start_in(r, container_env(), {"/lockstep/libexec/lockstep-agent", "--version"}, "plain.log");
  auto plain_st = plain.proc.wait_for(30s);
  ASSERT_TRUE(plain_st.has_value());
  EXPECT_NE(plain_st->shell_code(), 0) << plain.output();
  EXPECT_NE(plain.output().find("error while loading shared libraries"), std::string::npos) << plain.output();

  // Set: the image's LD_PRELOAD, LD_AUDIT and LD_LIBRARY_PATH reach the workers unchanged.
  auto env = container_env();
  env["LOCKSTEP_MASTER_ADDR"] = "lockstep-master.test";
  env["LD_PRELOAD"] = "/opt/preload/librecord.so";
  env["LD_AUDIT"] = "/opt/preload/librecord.so";
  env["LD_LIBRARY_PATH"] = "/opt/image/lib:/usr/local/lib";
  const int port = lockstep::free_loopback_port();
  // Each worker also loads the NCCL profiler plugin the agent named for it into one of the
  // image's programs, as NCCL would into the worker: its glibc is older than ours.
  AgentRun a = start_in(r, env, agent_argv(port, 2, {"/bin/sh", "-c", "env > /out/set-rank-$RANK.env; "
                        "LD_PRELOAD=\"$NCCL_PROFILER_PLUGIN\" /bin/true 2> /out/plugin-rank-$RANK.err && echo loaded > /out/plugin-rank-$RANK"}),
                        "set.log");
  auto st = a.proc.wait_for(60s);
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), 0) << a.output();
  EXPECT_NE(a.output().find("master address 'lockstep-master.test' resolved to 127.0.0.1"), std::string::npos) << a.output();
  EXPECT_EQ(a.output().find("ERROR: ld.so"), std::string::npos) << "the record library must load cleanly\n" << a.output();
  for (int rank = 0; rank < 2; ++rank) {
    auto wenv = env_file(r.host("/out/set-rank-" + std::to_string(rank) + ".env"));
    std::string who = "rank " + std::to_string(rank);
    EXPECT_EQ(wenv["RANK"], std::to_string(rank)) << who;
    EXPECT_EQ(wenv["WORLD_SIZE"], "2") << who;
    EXPECT_EQ(wenv["MASTER_ADDR"], "lockstep-master.test") << who;
    for (const char* v : {"LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH"})
      EXPECT_EQ(wenv.count(v) ? wenv[v] : "(unset)", env[v]) << who << ": " << v;
    expect_nothing_of_the_bundle(wenv, who);
    // See Note [NCCL profiler plugin]: the bundle's own, loadable under the image's glibc.
    EXPECT_EQ(wenv["NCCL_PROFILER_PLUGIN"], "/lockstep/nccl/libnccl-profiler-lockstep.so") << who;
    EXPECT_EQ(read_file(r.host("/out/plugin-rank-" + std::to_string(rank))), "loaded\n")
        << who << ": " << read_file(r.host("/out/plugin-rank-" + std::to_string(rank) + ".err"));
  }
  // The library was loaded (and taken as an audit module) into the workers' processes, never
  // into the agent.
  int loaded = 0, audited = 0;
  static const std::regex record(R"(^pid=(\d+) exe=(\S*) as=(loaded|audit)$)");
  std::istringstream in(read_file(loads));
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, record)) << l;
    EXPECT_NE(std::stoi(m[1]), a.proc.pid()) << "loaded into the agent: " << l;
    EXPECT_NE(m[2].str().rfind("/lockstep/", 0), 0u) << "loaded into the bundle: " << l;
    (m[3] == "loaded" ? loaded : audited)++;
  }
  EXPECT_GE(loaded, 2) << "each worker's shell loads LD_PRELOAD's library\n" << read_file(loads);
  EXPECT_GE(audited, 2) << "each worker's shell loads LD_AUDIT's library\n" << read_file(loads);

  // Unset stays unset, and empty stays empty (set).
  fs::remove(loads);
  env.erase("LD_PRELOAD");
  env.erase("LD_AUDIT");
  env["LD_LIBRARY_PATH"] = "";
  AgentRun b = start_in(r, env, agent_argv(lockstep::free_loopback_port(), 2, {"/bin/sh", "-c", "env > /out/unset-rank-$RANK.env"}),
                   "unset.log");
  st = b.proc.wait_for(60s);
  ASSERT_TRUE(st.has_value()) << b.output();
  EXPECT_EQ(st->shell_code(), 0) << b.output();
  for (int rank = 0; rank < 2; ++rank) {
    auto wenv = env_file(r.host("/out/unset-rank-" + std::to_string(rank) + ".env"));
    std::string who = "rank " + std::to_string(rank);
    EXPECT_EQ(wenv["RANK"], std::to_string(rank)) << who;
    EXPECT_EQ(wenv.count("LD_PRELOAD"), 0u) << who << ": LD_PRELOAD=" << wenv["LD_PRELOAD"];
    EXPECT_EQ(wenv.count("LD_AUDIT"), 0u) << who << ": LD_AUDIT=" << wenv["LD_AUDIT"];
    ASSERT_EQ(wenv.count("LD_LIBRARY_PATH"), 1u) << who << ": set but empty must stay set";
    EXPECT_EQ(wenv["LD_LIBRARY_PATH"], "") << who;
    expect_nothing_of_the_bundle(wenv, who);
  }
  EXPECT_FALSE(fs::exists(loads)) << read_file(loads);
  clean_up(r.dir);
}

// --- 3. NVML in the image's library directories -------------------------------------------------

struct NvmlRun {
  std::string metrics, output;
  std::map<int, std::map<std::string, std::string>> envs;
};

// The agent with two workers in `r`, scraped once the steps are in.
NvmlRun run_for_nvml(const Root& r, std::map<std::string, std::string> env, const std::string& name) {
  NvmlRun out;
  fs::remove(r.host("/release"));
  const int port = lockstep::free_loopback_port();
  AgentRun a = start_in(r, env, agent_argv(port, 2, {"/worker", "3", "/release"}), name + ".log");
  bool stepped = eventually([&] {
    out.metrics = scrape(port);
    return metric(out.metrics, "lockstep_steps_total", {{"rank", "1"}}) == 3;
  }, 60s);
  write_file(r.host("/release"), "");
  auto st = a.proc.wait_for(60s);
  out.output = a.output();
  EXPECT_TRUE(stepped) << name << ": no steps on /metrics\n" << out.metrics << out.output;
  EXPECT_TRUE(st && st->shell_code() == 0) << name << "\n" << out.output;
  out.envs = worker_envs(out.output);
  return out;
}

void expect_fake_gpus(const NvmlRun& run, const std::string& name) {
  for (int i = 0; i < 2; ++i) {
    std::map<std::string, std::string> gpu = {{"gpu", std::to_string(i)}, {"rank", std::to_string(i)}, {"trainingjob", "tj"}};
    EXPECT_DOUBLE_EQ(metric(run.metrics, "lockstep_gpu_utilization_ratio", gpu), (40 + 10 * i) / 100.0) << name << "\n" << run.metrics;
    EXPECT_DOUBLE_EQ(metric(run.metrics, "lockstep_gpu_memory_used_bytes", gpu), double(i + 1) * (1 << 30)) << name;
    EXPECT_DOUBLE_EQ(metric(run.metrics, "lockstep_gpu_power_watts", gpu), 150 + 25 * i) << name;
    EXPECT_DOUBLE_EQ(metric(run.metrics, "lockstep_gpu_temperature_celsius", gpu), 55 + 7 * i) << name;
  }
  EXPECT_NE(run.output.find("NVML: 2 GPU(s)"), std::string::npos) << name << "\n" << run.output;
}

TEST(Bundle, NvmlIsFoundWhereTheImageKeepsItsLibraries) {
  REQUIRE_ROOT();
  Root r = empty_root("nvml");
  install_bundle(r);
  copy_file(worker_bin(), r.host("/worker"));

  // Absent: no GPU series at all, and the log says where it looked.
  auto none = run_for_nvml(r, container_env(), "absent");
  EXPECT_EQ(none.metrics.find("lockstep_gpu_"), std::string::npos) << none.metrics;
  EXPECT_NE(none.output.find("no NVIDIA GPU here (libnvidia-ml.so.1 not loadable"), std::string::npos) << none.output;

  // Where the NVIDIA container toolkit mounts it in a Debian or Ubuntu image.
  std::string debian = r.host("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1");
  copy_file(fake_nvml(), debian, fs::perms(0644));
  auto in_debian = run_for_nvml(r, container_env(), "debian");
  expect_fake_gpus(in_debian, "/usr/lib/x86_64-linux-gnu");
  EXPECT_NE(in_debian.output.find("NVML: loaded /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"), std::string::npos)
      << in_debian.output;
  fs::remove(debian);

  // In a directory only the image's ld.so.conf names (the bundle's loader reads no ld.so.cache).
  copy_file(fake_nvml(), r.host("/opt/driver/lib64/libnvidia-ml.so.1"), fs::perms(0644));
  write_file(r.host("/etc/ld.so.conf"), "include /etc/ld.so.conf.d/*.conf\n");
  write_file(r.host("/etc/ld.so.conf.d/driver.conf"), "# the driver's libraries\n/opt/driver/lib64\n");
  auto in_conf = run_for_nvml(r, container_env(), "ld.so.conf");
  expect_fake_gpus(in_conf, "ld.so.conf");
  EXPECT_NE(in_conf.output.find("NVML: loaded /opt/driver/lib64/libnvidia-ml.so.1 (found by searching"), std::string::npos)
      << in_conf.output;
  fs::remove_all(r.host("/etc"));
  fs::remove_all(r.host("/opt/driver"));

  // In a directory only the image's LD_LIBRARY_PATH names, which the workers still get.
  copy_file(fake_nvml(), r.host("/opt/nvml/libnvidia-ml.so.1"), fs::perms(0644));
  auto env = container_env();
  env["LD_LIBRARY_PATH"] = "/opt/none:/opt/nvml";
  auto in_path = run_for_nvml(r, env, "LD_LIBRARY_PATH");
  expect_fake_gpus(in_path, "LD_LIBRARY_PATH");
  EXPECT_NE(in_path.output.find("NVML: loaded /opt/nvml/libnvidia-ml.so.1 (found by searching"), std::string::npos)
      << in_path.output;
  EXPECT_EQ(in_path.envs.size(), 2u) << in_path.output;
  for (auto& [rank, wenv] : in_path.envs) EXPECT_EQ(wenv["LD_LIBRARY_PATH"], "/opt/none:/opt/nvml") << "rank " << rank;
  clean_up(r.dir);
}

// --- 4. the master's name from the root's /etc/hosts ----------------------------------------------

TEST(Bundle, TheMastersNameResolvesFromTheRootsEtcHosts) {
  REQUIRE_ROOT();
  Root r = empty_root("hosts");
  install_bundle(r);
  copy_file(worker_bin(), r.host("/worker"));
  write_file(r.host("/release"), "");
  write_file(r.host("/etc/hosts"), "127.0.0.1 localhost\n127.0.0.1 lockstep-master.test master\n");
  // Modules the bundle does not carry come first; glibc's built-in files and dns serve.
  write_file(r.host("/etc/nsswitch.conf"), "hosts: mymachines resolve [!UNAVAIL=return] files myhostname dns\n");
  auto env = container_env();
  env["LOCKSTEP_MASTER_ADDR"] = "lockstep-master.test";
  AgentRun a = start_in(r, env, agent_argv(lockstep::free_loopback_port(), 2, {"/worker", "2", "/release"}), "agent.log");
  auto st = a.proc.wait_for(60s);
  ASSERT_TRUE(st.has_value()) << a.output();
  EXPECT_EQ(st->shell_code(), 0) << a.output();
  EXPECT_NE(a.output().find("master address 'lockstep-master.test' resolved to 127.0.0.1"), std::string::npos) << a.output();
  auto envs = worker_envs(a.output());
  ASSERT_EQ(envs.size(), 2u) << a.output();
  for (auto& [rank, wenv] : envs) EXPECT_EQ(wenv["MASTER_ADDR"], "lockstep-master.test") << "rank " << rank;

  // The control: a name the root's /etc/hosts lacks does not resolve.
  env["LOCKSTEP_MASTER_ADDR"] = "lockstep-absent.test";
  AgentRun b = start_in(r, env, agent_argv(lockstep::free_loopback_port(), 1, {"/worker", "1", "/release"}, {"--rendezvous-timeout", "2s"}),
                   "absent.log");
  st = b.proc.wait_for(60s);
  ASSERT_TRUE(st.has_value()) << b.output();
  EXPECT_EQ(st->shell_code(), lockstep::contract::kExitRendezvous) << b.output();
  EXPECT_NE(b.output().find("'lockstep-absent.test' (LOCKSTEP_MASTER_ADDR) did not resolve"), std::string::npos) << b.output();
  clean_up(r.dir);
}

// --- the launcher on its own ---------------------------------------------------------------------

TEST(BundleLauncher, InstallBundleCopiesFilesDirectoriesLinksAndModes) {
  std::string dir = temp_dir("install");
  std::string a = dir + "/a", b = dir + "/deep/b";
  auto first = lockstep::run_capture({bundle() + "/lockstep-agent", "--install-bundle", a}, {}, 60s);
  ASSERT_EQ(first.status.shell_code(), 0) << first.output;
  EXPECT_EQ(std::count(first.output.begin(), first.output.end(), '\n'), 1) << first.output;
  EXPECT_NE(first.output.find("installed the bundle from " + bundle() + " into " + a), std::string::npos) << first.output;
  EXPECT_EQ(tree(a), tree(bundle()));
  // What make-bundle.sh's python/ may hold: nested directories, links, modes of every kind.
  write_file(a + "/python/pkg/probe.py", "print('probe')\n", fs::perms(0640));
  write_file(a + "/python/pkg/run.sh", "#!/bin/sh\n", fs::perms(0750));
  fs::permissions(a + "/python/pkg", fs::perms(0710));
  fs::create_symlink("pkg/probe.py", a + "/python/probe.py");
  fs::create_symlink("/nowhere/at/all", a + "/python/dangling");
  // From the copy (the launcher finds its bundle wherever it is), into a new directory.
  auto second = lockstep::run_capture({a + "/lockstep-agent", "--install-bundle", b}, {}, 60s);
  ASSERT_EQ(second.status.shell_code(), 0) << second.output;
  EXPECT_EQ(tree(b), tree(a));
  // Again over the first copy, changed: replaced file by file, nothing left behind.
  write_file(b + "/python/pkg/probe.py", "stale\n", fs::perms(0600));
  auto third = lockstep::run_capture({a + "/lockstep-agent", "--install-bundle", b}, {}, 60s);
  ASSERT_EQ(third.status.shell_code(), 0) << third.output;
  EXPECT_EQ(tree(b), tree(a));
  auto copied = lockstep::run_capture({b + "/lockstep-agent", "--version"}, {}, 30s);
  EXPECT_EQ(copied.status.shell_code(), 0) << copied.output;
  EXPECT_NE(copied.output.find("lockstep-agent "), std::string::npos) << copied.output;
  clean_up(dir);
}

TEST(BundleLauncher, SaysWhatWentWrong) {
  std::string dir = temp_dir("errors");
  write_file(dir + "/file", "");
  auto r = lockstep::run_capture({bundle() + "/lockstep-agent", "--install-bundle", dir + "/file/sub"}, {}, 30s);
  EXPECT_EQ(r.status.shell_code(), 1) << r.output;
  EXPECT_NE(r.output.find("lockstep-agent: --install-bundle " + dir + "/file/sub: cannot"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Not a directory"), std::string::npos) << r.output;

  r = lockstep::run_capture({bundle() + "/lockstep-agent", "--install-bundle"}, {}, 30s);
  EXPECT_EQ(r.status.shell_code(), lockstep::contract::kExitUsage) << r.output;
  EXPECT_NE(r.output.find("usage: lockstep-agent --install-bundle DIR"), std::string::npos) << r.output;

  std::string copy = dir + "/copy";
  ASSERT_EQ(lockstep::run_capture({bundle() + "/lockstep-agent", "--install-bundle", copy}, {}, 60s).status.shell_code(), 0);
  r = lockstep::run_capture({copy + "/lockstep-agent", "--install-bundle", copy + "/python/inside"}, {}, 30s);
  EXPECT_EQ(r.status.shell_code(), lockstep::contract::kExitUsage) << r.output;
  EXPECT_NE(r.output.find("inside the bundle"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(copy + "/python/inside"));
  r = lockstep::run_capture({copy + "/lockstep-agent", "--install-bundle", copy}, {}, 30s);
  EXPECT_EQ(r.status.shell_code(), lockstep::contract::kExitUsage) << r.output;
  EXPECT_NE(r.output.find("that is the bundle itself"), std::string::npos) << r.output;

  // A bundle without its loader names what is missing.
  fs::remove(copy + "/lib/ld-linux-x86-64.so.2");
  r = lockstep::run_capture({copy + "/lockstep-agent", "--version"}, {}, 30s);
  EXPECT_EQ(r.status.shell_code(), 127) << r.output;
  EXPECT_NE(r.output.find("cannot run the bundle's loader " + copy + "/lib/ld-linux-x86-64.so.2: No such file or directory"),
            std::string::npos)
      << r.output;
  clean_up(dir);
}

// --- the pieces, in process ---------------------------------------------------------------------

// Puts the test process's own loader variables back however the test ends: the other tests'
// host-side helpers must not inherit an LD_PRELOAD meant for this one.
struct LoaderVariablesKept {
  std::map<std::string, std::optional<std::string>> before;
  LoaderVariablesKept() {
    for (const char* n : {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LOCKSTEP_BUNDLE_SAVED_LD_PRELOAD",
                          "LOCKSTEP_BUNDLE_SAVED_LD_LIBRARY_PATH", "LOCKSTEP_BUNDLE_SAVED_LD_AUDIT",
                          "LOCKSTEP_BUNDLE_SAVED_LD_FUTURE"}) {
      const char* v = std::getenv(n);
      before[n] = v ? std::optional<std::string>(v) : std::nullopt;
    }
  }
  ~LoaderVariablesKept() {
    for (const auto& [n, v] : before) {
      if (v) ::setenv(n.c_str(), v->c_str(), 1);
      else ::unsetenv(n.c_str());
    }
  }
};

TEST(BundleEnv, PutsBackWhatTheLauncherSetAsideExactly) {
  LoaderVariablesKept kept;
  ::setenv("LOCKSTEP_BUNDLE_SAVED_LD_PRELOAD", "set:/opt/a.so /opt/b.so", 1);
  ::setenv("LOCKSTEP_BUNDLE_SAVED_LD_LIBRARY_PATH", "set:", 1);
  ::setenv("LOCKSTEP_BUNDLE_SAVED_LD_AUDIT", "unset", 1);
  ::setenv("LOCKSTEP_BUNDLE_SAVED_LD_FUTURE", "set:x", 1);  // one a newer launcher might add
  ::setenv("LD_AUDIT", "/stale.so", 1);
  auto got = lockstep::agent::restore_bundle_environment();
  EXPECT_TRUE(got.from_bundle);
  EXPECT_TRUE(got.problems.empty());
  auto value = [](const char* n) { const char* v = std::getenv(n); return v ? std::string("=") + v : std::string("unset"); };
  EXPECT_EQ(value("LD_PRELOAD"), "=/opt/a.so /opt/b.so");
  EXPECT_EQ(value("LD_LIBRARY_PATH"), "=");
  EXPECT_EQ(value("LD_AUDIT"), "unset");
  for (const char* n : {"LOCKSTEP_BUNDLE_SAVED_LD_PRELOAD", "LOCKSTEP_BUNDLE_SAVED_LD_LIBRARY_PATH",
                        "LOCKSTEP_BUNDLE_SAVED_LD_AUDIT", "LOCKSTEP_BUNDLE_SAVED_LD_FUTURE"})
    EXPECT_EQ(std::getenv(n), nullptr) << n;

  // A value the launcher never writes leaves the variable alone and says so.
  ::setenv("LOCKSTEP_BUNDLE_SAVED_LD_PRELOAD", "garbage", 1);
  got = lockstep::agent::restore_bundle_environment();
  ASSERT_EQ(got.problems.size(), 1u);
  EXPECT_NE(got.problems[0].find("LOCKSTEP_BUNDLE_SAVED_LD_PRELOAD='garbage'"), std::string::npos) << got.problems[0];
  EXPECT_EQ(value("LD_PRELOAD"), "=/opt/a.so /opt/b.so");
  EXPECT_EQ(std::getenv("LOCKSTEP_BUNDLE_SAVED_LD_PRELOAD"), nullptr);

  // Started any other way: nothing changes.
  got = lockstep::agent::restore_bundle_environment();
  EXPECT_FALSE(got.from_bundle);
  EXPECT_EQ(value("LD_PRELOAD"), "=/opt/a.so /opt/b.so");
}

TEST(NvmlSearch, LdSoConfIncludesAreFollowedAndBounded) {
  std::string dir = temp_dir("ldsoconf");
  write_file(dir + "/ld.so.conf",
             "# comment\n"
             "/opt/a\n"
             "include conf.d/*.conf\n"
             "  /opt/b/   # trailing comment and slash\n"
             "hwcap 0 nosegneg\n"
             "relative/dir\n"
             "/opt/\x01" "control\n"
             "include /nonexistent/*.conf\n"
             "include ld.so.conf\n"  // itself: read once
             "/opt/c=libc6\n");
  write_file(dir + "/conf.d/1.conf", "/opt/d\ninclude\t../ld.so.conf\n");
  write_file(dir + "/conf.d/2.conf", "/opt/e\n");
  EXPECT_EQ(lockstep::agent::ld_so_conf_dirs(dir + "/ld.so.conf"),
            (std::vector<std::string>{"/opt/a", "/opt/d", "/opt/e", "/opt/b", "/opt/c"}));
  // Huge: bounded by the directory count, and by the bytes read.
  std::string big;
  for (int i = 0; i < 100000; ++i) big += "/opt/many/" + std::to_string(i) + "\n";
  write_file(dir + "/big.conf", big);
  auto dirs = lockstep::agent::ld_so_conf_dirs(dir + "/big.conf");
  EXPECT_EQ(dirs.size(), 256u);
  EXPECT_EQ(dirs.front(), "/opt/many/0");
  std::string head = big.substr(0, 64 * 1024);  // what is read of it
  size_t lines = std::count(head.begin(), head.end(), '\n') + (head.back() == '\n' ? 0 : 1);
  EXPECT_EQ(lockstep::agent::ld_so_conf_dirs(dir + "/big.conf", 1000000).size(), lines);
  // Includes that include each other without end stop.
  for (int i = 0; i < 100; ++i)
    write_file(dir + "/loop/" + std::to_string(i) + ".conf", "/opt/loop/" + std::to_string(i) + "\ninclude " +
               std::to_string(i + 1) + ".conf\n");
  EXPECT_EQ(lockstep::agent::ld_so_conf_dirs(dir + "/loop/0.conf").size(), 9u) << "8 includes deep at most";
  EXPECT_TRUE(lockstep::agent::ld_so_conf_dirs(dir + "/absent.conf").empty());
  clean_up(dir);
}

TEST(NvmlSearch, LdLibraryPathFirstThenTheUsualDirectoriesThenLdSoConfWithoutRepeats) {
  std::string dir = temp_dir("searchdirs");
  write_file(dir + "/ld.so.conf", "/usr/lib64\n/opt/conf\n");
  auto dirs = lockstep::agent::nvml_search_dirs("/opt/x::/opt/y/;relative:/usr/lib/x86_64-linux-gnu", dir + "/ld.so.conf");
  EXPECT_EQ(dirs, (std::vector<std::string>{"/opt/x", "/opt/y", "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu",
                                            "/usr/lib64", "/lib64", "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib",
                                            "/usr/lib", "/opt/conf"}));
  clean_up(dir);
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int result = RUN_ALL_TESTS();
  if (result == 0 && skipped_for_root) {
    std::cout << "SKIPPED: " << kNeedsRoot << "; the cases that need none passed; exit "
              << lockstep::test::kSkippedExitCode << " so ctest reports Skipped, not Passed\n";
    return lockstep::test::kSkippedExitCode;
  }
  return lockstep::test::suite_exit_code(result);
}
