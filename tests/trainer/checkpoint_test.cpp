// Checkpoints across ranks and pods, the trainer's exit codes, and FSDP's communication figures:
// the checksum and save/prune/clean-up in process, everything else as real trainer processes
// (Gloo on the CPU), under the agent where pods matter.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent_support.hpp"
#include "checkpoint.hpp"
#include "checksum.hpp"
#include "durable_file.hpp"
#include "dist.hpp"
#include "lockstep/contract.hpp"
#include "lockstep/process.hpp"
#include "test_util.hpp"
#include "trainer_test_util.hpp"

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace ck = lockstep::trainer::checksum;

namespace {

using lockstep::test::agent_bin;
using lockstep::test::trainer_bin;


std::string temp_dir(const std::string& name) { return lockstep::test::fresh_temp_dir("ckpt-" + name); }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::set<std::string> step_dirs(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("step-", 0) == 0) out.insert(e.path().filename().string());
  return out;
}

// `nproc` ranks on one node under the agent; returns the agent's output and sets `code`.
std::string train(int nproc, std::vector<std::string> args, int* code, std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {agent_bin(), "--nproc-per-node", std::to_string(nproc), "--master-port",
                                   std::to_string(lockstep::free_loopback_port()), "--no-metrics", "--",
                                   trainer_bin(), "--device", "cpu", "--batch-size", "4"};
  argv.insert(argv.end(), args.begin(), args.end());
  env.insert({{"GLOO_SOCKET_IFNAME", "lo"}, {"MASTER_ADDR", "127.0.0.1"}});
  auto r = lockstep::run_capture(argv, env, 300s);
  *code = r.status.shell_code();
  return r.output;
}

// Trainer ranks started directly (no agent), rank r with args[r]; waits for all.
struct RankRun {
  std::vector<int> codes;
  std::vector<std::string> outputs;
};
RankRun run_ranks(const std::vector<std::vector<std::string>>& args, const std::string& dir,
                  std::map<std::string, std::string> env = {}) {
  const int world = static_cast<int>(args.size());
  env.insert({{"WORLD_SIZE", std::to_string(world)}, {"MASTER_ADDR", "127.0.0.1"}, {"GLOO_SOCKET_IFNAME", "lo"},
              {"MASTER_PORT", std::to_string(lockstep::free_loopback_port())}, {"LOCAL_RANK", "0"}});
  std::vector<lockstep::Process> ps;
  RankRun run;
  for (int r = 0; r < world; ++r) {
    lockstep::SpawnOptions o;
    o.argv = {trainer_bin(), "--device", "cpu", "--batch-size", "4"};
    o.argv.insert(o.argv.end(), args[r].begin(), args[r].end());
    o.env = env;
    o.env["RANK"] = std::to_string(r);
    o.output_path = dir + "/rank-" + std::to_string(r) + ".out";
    fs::remove(o.output_path);
    ps.push_back(lockstep::Process::spawn(o));
  }
  for (int r = 0; r < world; ++r) {
    auto st = ps[r].wait_for(300s);
    run.codes.push_back(st ? st->shell_code() : -1);
    run.outputs.push_back(slurp(dir + "/rank-" + std::to_string(r) + ".out"));
  }
  return run;
}

void damage(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(100);
  char c = 0;
  f.read(&c, 1);
  f.seekp(100);
  f.put(static_cast<char>(c ^ 0x42));
}

}  // namespace

// See Note [Checkpoint checksum]: blocks of any size give the one-shot value; one flipped bit, and
// two flipped top bits (which cancel in word-wise FNV), change it.
TEST(Checksum, StreamingEqualsOneShotAndEveryFlipShows) {
  std::vector<unsigned char> data(100003);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  const uint64_t whole = ck::lanes64(data.data(), data.size());
  for (size_t block : {1, 7, 31, 32, 33, 4096, 65537}) {
    ck::Lanes64 h;
    for (size_t off = 0; off < data.size(); off += block) h.update(data.data() + off, std::min(block, data.size() - off));
    EXPECT_EQ(h.digest(), whole) << "block " << block;
  }
  auto flipped = data;
  flipped[5000] ^= 1;
  EXPECT_NE(ck::lanes64(flipped.data(), flipped.size()), whole);
  auto two = data;
  two[7] ^= 0x80;   // the top bit of two words in the same lane
  two[39] ^= 0x80;
  EXPECT_NE(ck::lanes64(two.data(), two.size()), whole);
  EXPECT_NE(ck::lanes64(data.data(), data.size() - 1), whole) << "length must count";

  std::string path = temp_dir("sum") + "/f";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  EXPECT_EQ(ck::lanes64_file(path), whole);
}

// XXH3-64 (Note [Checkpoint checksum]) is xxHash's own: its published value for no input,
// the same for blocks of any size as at once, every flip shows, and the text form reads back.
TEST(Checksum, Xxh3IsXxHashsOwnInBlocksOfAnySize) {
  EXPECT_EQ(ck::xxh3(nullptr, 0), 0x2D06800538D394C2ULL) << "XXH3_64bits of no input, as xxHash publishes it";
  std::vector<unsigned char> data(300007);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  const uint64_t whole = ck::xxh3(data.data(), data.size());
  for (size_t block : {1, 7, 63, 64, 65, 240, 241, 4096, 65537}) {
    ck::Xxh3 h;
    for (size_t off = 0; off < data.size(); off += block) h.update(data.data() + off, std::min(block, data.size() - off));
    EXPECT_EQ(h.digest(), whole) << "block " << block;
  }
  auto flipped = data;
  flipped[5000] ^= 1;
  EXPECT_NE(ck::xxh3(flipped.data(), flipped.size()), whole);
  EXPECT_NE(ck::xxh3(data.data(), data.size() - 1), whole) << "length must count";
  const std::string text = ck::to_text(whole, ck::kXxh3);
  EXPECT_EQ(text.size(), 16u);
  uint64_t back = 0;
  EXPECT_TRUE(ck::from_text(text, ck::kXxh3, back));
  EXPECT_EQ(back, whole);
  for (const char* bad : {"", "12345678901234567", "xyz", "-1", "12 3"}) EXPECT_FALSE(ck::from_text(bad, ck::kXxh3, back)) << bad;
  EXPECT_TRUE(ck::from_text("18446744073709551615", ck::kLanes64, back));
  EXPECT_EQ(back, ~0ULL);
  EXPECT_FALSE(ck::from_text("ff", ck::kLanes64, back)) << "the older kinds are decimal";
}

namespace {
// A process group of two in which this process is rank 0 and every collective completes at
// once: save_checkpoint's barriers pass, and rank 1 never writes anything.
class LoneBackend : public c10d::Backend {
 public:
  LoneBackend() : c10d::Backend(0, 2) {}
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>&, const c10d::AllreduceOptions&) override {
    return c10::make_intrusive<Done>();
  }

 private:
  struct Done : c10d::Work {
    bool isCompleted() override { return true; }
    bool wait(std::chrono::milliseconds) override { return true; }
  };
};
}  // namespace

// A rank whose checksum file is missing must not be recorded as "0 0": the checkpoint stays
// incomplete (no MANIFEST), naming the file and shared storage.
TEST(Checkpoint, AMissingChecksumLeavesTheCheckpointIncomplete) {
  using namespace lockstep::trainer;
  std::string dir = temp_dir("nosum");
  Dist d;
  d.world = 2;
  d.pg = c10::make_intrusive<LoneBackend>();
  CheckpointTarget t{dir, 0, 2, "FSDP", true};
  std::vector<torch::Tensor> tensors{torch::ones({4}).requires_grad_(true)};
  torch::optim::SGD opt(tensors, torch::optim::SGDOptions(0.1));
  try {
    save_checkpoint(t, 2, tensors, opt, d);
    FAIL() << "save_checkpoint accepted a missing rank-1.pt.sum";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank-1.pt.sum is missing"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ReadWriteMany"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir + "/step-2")) << "the unfinished checkpoint is removed, freeing its space";
  for (const auto& e : fs::recursive_directory_iterator(dir))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << "left behind: " << e.path();
}

namespace {
// Storage that fails (Note [Durable checkpoint writes]): the file_io() seam's calls, failing
// with kFailErrno while armed.
int kFailErrno = 0;
int failing_fsync(int fd) {
  if (!kFailErrno) return ::fsync(fd);
  errno = kFailErrno;
  return -1;
}
int failing_close(int fd) {
  ::close(fd);  // closed, as a failing close(2) on NFS still closes
  if (!kFailErrno) return 0;
  errno = kFailErrno;
  return -1;
}
ssize_t failing_write(int fd, const void* p, size_t n) {
  if (!kFailErrno) return ::write(fd, p, n);
  errno = kFailErrno;
  return -1;
}

struct SmallModel {
  std::vector<torch::Tensor> tensors{torch::randn({16384}).requires_grad_(true)};  // 64 KiB
  torch::optim::SGD opt{tensors, torch::optim::SGDOptions(0.1)};
  torch::Tensor saved = tensors[0].detach().clone();
};

void expect_no_temporaries(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << "left behind: " << e.path();
}
}  // namespace

// A deferred write error, as NFS reports it (at fsync, or only at close), or a write refused at
// once: the save fails on every path with the errno named, nothing of it is left, the previous
// checkpoint is not pruned even with keep 1, and resume finds it.
TEST(Checkpoint, FailingStorageKeepsThePreviousCheckpoint) {
  using namespace lockstep::trainer;
  struct Case {
    const char* name;
    int err;
    void (*arm)(FileIo&);
    const char* says;
  };
  const Case cases[] = {
      {"fsync", EIO, [](FileIo& io) { io.fsync = failing_fsync; }, "fsync of"},
      {"close", EIO, [](FileIo& io) { io.close = failing_close; }, "close of"},
      {"write", ENOSPC, [](FileIo& io) { io.write = failing_write; }, "write of"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string dir = temp_dir(std::string("failing-") + c.name);
    CheckpointTarget t{dir, 0, 1, "DDP", false, 1, "uid-a"};
    SmallModel m;
    save_checkpoint(t, 2, m.tensors, m.opt, Dist{});
    ASSERT_TRUE(fs::exists(dir + "/step-2/MANIFEST"));
    { torch::NoGradGuard g; m.tensors[0].add_(1); }
    c.arm(file_io());
    kFailErrno = c.err;
    try {
      save_checkpoint(t, 4, m.tensors, m.opt, Dist{});
      ADD_FAILURE() << "a save whose " << c.name << " failed was accepted";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(c.says), std::string::npos) << what;
      EXPECT_NE(what.find(c.err == EIO ? "(EIO)" : "(ENOSPC)"), std::string::npos) << what;
      EXPECT_NE(what.find("previous checkpoints are kept"), std::string::npos) << what;
    }
    kFailErrno = 0;
    file_io() = default_file_io();
    EXPECT_FALSE(fs::exists(dir + "/step-4")) << "a failed checkpoint is removed";
    EXPECT_EQ(slurp(dir + "/LATEST"), "step-2\n");
    expect_no_temporaries(dir);
    SmallModel fresh;
    auto step = load_checkpoint(t, fresh.tensors, fresh.opt, Dist{});
    ASSERT_TRUE(step.has_value());
    EXPECT_EQ(*step, 2);
    EXPECT_TRUE(torch::equal(fresh.tensors[0], m.saved));
    // Storage working again: the next save verifies, and only then does keep 1 prune step-2.
    save_checkpoint(t, 6, m.tensors, m.opt, Dist{});
    EXPECT_EQ(step_dirs(dir), (std::set<std::string>{"step-6"}));
  }
}

// A real full volume: a 1 MiB tmpfs with room for one checkpoint of this model. The second save
// fails with ENOSPC and takes nothing with it; space freed, the next save succeeds.
TEST(Checkpoint, AFullVolumeFailsTheSaveAndKeepsTheOlderCheckpoint) {
  using namespace lockstep::trainer;
  std::string dir = temp_dir("full");
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs at " << dir << " (" << std::strerror(errno) << "): needs root";
  struct Unmount {
    std::string dir;
    ~Unmount() { ::umount2(dir.c_str(), MNT_DETACH); }
  } unmount{dir};
  CheckpointTarget t{dir, 0, 1, "DDP", false, 1, "uid-a"};
  SmallModel m;
  save_checkpoint(t, 2, m.tensors, m.opt, Dist{});
  ASSERT_TRUE(fs::exists(dir + "/step-2/MANIFEST"));
  // Fill what is left but about 20 KiB: less than the next checkpoint's 64 KiB.
  {
    std::ofstream filler(dir + "/filler", std::ios::binary);
    std::vector<char> block(4096, 'x');
    while (filler.write(block.data(), static_cast<std::streamsize>(block.size())) && filler.flush()) {}
  }
  fs::resize_file(dir + "/filler", fs::file_size(dir + "/filler") - 20 * 1024);
  try {
    save_checkpoint(t, 4, m.tensors, m.opt, Dist{});
    ADD_FAILURE() << "a save into a full volume was accepted";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("(ENOSPC)"), std::string::npos) << what;
    EXPECT_NE(what.find("the checkpoint volume is full"), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(dir + "/step-4"));
  expect_no_temporaries(dir);
  SmallModel fresh;
  auto step = load_checkpoint(t, fresh.tensors, fresh.opt, Dist{});
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(*step, 2);
  fs::remove(dir + "/filler");
  save_checkpoint(t, 6, m.tensors, m.opt, Dist{});
  EXPECT_EQ(step_dirs(dir), (std::set<std::string>{"step-6"}));
}

// See Note [Checkpoint owner]: a job applied again (a new UID) at the same path stops at start
// naming the other job's UID and step instead of "resuming" at its end; with --resume-from
// (spec.checkpoint.resumeFrom) it starts from them, writes its own beside them, prunes only its
// own, and later resumes from its own.
TEST(Checkpoint, AnotherJobsCheckpointsAreUsedOnlyWhenResumeFromNamesThem) {
  std::string dir = temp_dir("owner");
  int code;
  auto args = [&](int steps, bool resume_from) {
    std::vector<std::string> a = {"--steps", std::to_string(steps), "--checkpoint-every", "2", "--checkpoint-keep", "1",
                                  "--log-every", "1", "--checkpoint-dir", dir};
    if (resume_from) a.insert(a.end(), {"--resume-from", dir});
    return a;
  };
  std::string out = train(1, args(4, false), &code, {{"LOCKSTEP_JOB_UID", "uid-a"}});
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(slurp(dir + "/step-4/MANIFEST").find("job uid-a\n"), std::string::npos);

  out = train(1, args(8, false), &code, {{"LOCKSTEP_JOB_UID", "uid-b"}});
  EXPECT_EQ(code, lockstep::contract::kExitUsage) << out;
  EXPECT_NE(out.find("holds checkpoints of another job (UID uid-a, newest at step 4) and none of this one (UID uid-b)"),
            std::string::npos) << out;
  EXPECT_NE(out.find("set spec.checkpoint.resumeFrom: " + dir), std::string::npos) << out;
  EXPECT_EQ(out.find("step     5/8"), std::string::npos) << "trained:\n" << out;
  EXPECT_EQ(step_dirs(dir), (std::set<std::string>{"step-4"}));

  out = train(1, args(6, true), &code, {{"LOCKSTEP_JOB_UID", "uid-b"}});
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("starting from " + dir + "/step-4 (spec.checkpoint.resumeFrom), written by job UID uid-a"),
            std::string::npos) << out;
  EXPECT_NE(out.find("step     5/6"), std::string::npos) << out;
  EXPECT_NE(slurp(dir + "/step-6/MANIFEST").find("job uid-b\n"), std::string::npos);
  EXPECT_EQ(step_dirs(dir), (std::set<std::string>{"step-4", "step-6"})) << "keep 1 prunes only this job's";

  out = train(1, args(8, true), &code, {{"LOCKSTEP_JOB_UID", "uid-b"}});
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("resumed from " + dir + " at step 6"), std::string::npos) << out;
  EXPECT_EQ(out.find("spec.checkpoint.resumeFrom"), std::string::npos) << "its own come first:\n" << out;
  EXPECT_EQ(step_dirs(dir), (std::set<std::string>{"step-4", "step-8"}));
}

// Rank 0 removes temporaries an interrupted writer left, but not one a writer may still own.
TEST(Checkpoint, StaleTemporariesAreRemovedAtStart) {
  using namespace lockstep::trainer;
  std::string dir = temp_dir("stale");
  fs::create_directories(dir + "/step-4");
  const std::string stale = dir + "/step-4/rank-0.pt.tmp-4242", fresh = dir + "/step-4/rank-1.pt.tmp-4243",
                    kept = dir + "/step-4/rank-0.pt";
  for (const auto& p : {stale, fresh, kept}) std::ofstream(p) << "x";
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(1));
  CheckpointTarget t{dir, 0, 1, "DDP", false};
  prepare_checkpoint_dir(t, Dist{}, std::chrono::minutes(5));
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh)) << "modified within the last 5 minutes: a writer may still own it";
  EXPECT_TRUE(fs::exists(kept));
}

// checkpoint.keep: after each save only the newest N complete checkpoints remain; 0 keeps all.
TEST(Checkpoint, KeepPrunesOldCheckpoints) {
  std::string dir = temp_dir("keep");
  int code;
  std::string out = train(2, {"--strategy", "FSDP", "--steps", "10", "--checkpoint-every", "2", "--checkpoint-keep", "2",
                              "--checkpoint-dir", dir + "/two"},
                          &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(step_dirs(dir + "/two"), (std::set<std::string>{"step-8", "step-10"}));
  out = train(1, {"--steps", "6", "--checkpoint-every", "2", "--checkpoint-keep", "0", "--checkpoint-dir", dir + "/all"},
              &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(step_dirs(dir + "/all"), (std::set<std::string>{"step-2", "step-4", "step-6"}));
  // The MANIFEST records each file's real size (never "0 0").
  std::ifstream m(dir + "/all/step-6/MANIFEST");
  std::string line;
  bool listed = false;
  while (std::getline(m, line))
    if (line.rfind("file rank-0.pt ", 0) == 0) {
      listed = true;
      EXPECT_EQ(line.substr(15, line.find(' ', 15) - 15), std::to_string(fs::file_size(dir + "/all/step-6/rank-0.pt")));
    }
  EXPECT_TRUE(listed);
}

// The last step is saved even when it is not a multiple of --checkpoint-every, so a gang
// rerun after the end (the operator's Note [Partly succeeded]) resumes there and trains nothing.
TEST(Checkpoint, TheLastStepIsSavedSoARerunAfterTheEndRepeatsNothing) {
  std::string dir = temp_dir("last");
  int code;
  std::vector<std::string> args = {"--steps", "5", "--checkpoint-every", "2", "--checkpoint-keep", "0", "--log-every",
                                   "1", "--checkpoint-dir", dir};
  std::string out = train(1, args, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(step_dirs(dir), (std::set<std::string>{"step-2", "step-4", "step-5"}));
  EXPECT_TRUE(fs::exists(dir + "/step-5/MANIFEST"));
  out = train(1, args, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("resumed from " + dir + " at step 5"), std::string::npos) << out;
  EXPECT_EQ(out.find("step     5/5"), std::string::npos) << "a step ran again:\n" << out;
}

// docs/trainer.md, "Checkpoints": a checkpoint verifies with xxhsum alone, from its MANIFEST, as
// the docs say; and one whose MANIFEST names lanes64 (written before xxh3) still resumes, and
// still falls back when damaged.
TEST(Checkpoint, AManifestVerifiesWithXxhsumAndALanes64OneStillResumes) {
  std::string dir = temp_dir("xxh3");
  int code;
  std::vector<std::string> args = {"--steps", "4", "--checkpoint-every", "2", "--checkpoint-keep", "0",
                                   "--checkpoint-dir", dir};
  std::string out = train(1, args, &code);
  ASSERT_EQ(code, 0) << out;
  const std::string manifest = slurp(dir + "/step-4/MANIFEST");
  EXPECT_NE(manifest.find("checksum xxh3\n"), std::string::npos) << manifest;
  auto xxhsum = lockstep::run_capture({"xxhsum", "--version"}, {}, 30s);
  if (!xxhsum.status.success()) {
    const char* all = std::getenv("LOCKSTEP_REQUIRE_ALL");
    if (all && std::string(all) == "1") FAIL() << "xxhsum is not installed (scripts/setup.sh installs Debian's xxhash)";
    std::cout << "SKIPPED: the xxhsum part (xxhsum is not installed: apt-get install xxhash)\n";
  } else {
    // The docs' command, as written there.
    auto r = lockstep::run_capture(
        {"sh", "-c", "cd '" + dir + "/step-4' && awk '$1 == \"file\" { print \"XXH3 (\" $2 \") = \" $4 }' MANIFEST | xxhsum -c -"},
        {}, 60s);
    EXPECT_TRUE(r.status.success()) << r.output;
    EXPECT_NE(r.output.find("rank-0.pt: OK"), std::string::npos) << r.output;
    damage(dir + "/step-4/rank-0.pt");
    r = lockstep::run_capture(
        {"sh", "-c", "cd '" + dir + "/step-4' && awk '$1 == \"file\" { print \"XXH3 (\" $2 \") = \" $4 }' MANIFEST | xxhsum -c -"},
        {}, 60s);
    EXPECT_FALSE(r.status.success()) << "xxhsum must see the damage:\n" << r.output;
    out = train(1, {"--steps", "4", "--checkpoint-every", "2", "--checkpoint-keep", "0", "--checkpoint-dir", dir}, &code);
    EXPECT_NE(out.find("falling back to " + dir + "/step-2"), std::string::npos) << out;
  }

  // step-2 as an older trainer wrote it: lanes64, in decimal.
  const std::string step2 = dir + "/step-2";
  std::string old = slurp(step2 + "/MANIFEST");
  const auto at = old.find("checksum xxh3\n");
  ASSERT_NE(at, std::string::npos) << old;
  old.replace(at, std::string("checksum xxh3\n").size(), "checksum lanes64\n");
  const auto file_at = old.find("file rank-0.pt ");
  ASSERT_NE(file_at, std::string::npos) << old;
  const auto hash_at = old.find(' ', file_at + 15) + 1;
  old.replace(hash_at, old.find('\n', hash_at) - hash_at, std::to_string(ck::lanes64_file(step2 + "/rank-0.pt")));
  for (const auto& s : step_dirs(dir))
    if (s != "step-2") fs::remove_all(dir + "/" + s);
  std::ofstream(step2 + "/MANIFEST", std::ios::trunc) << old;
  out = train(1, {"--steps", "3", "--checkpoint-every", "100", "--checkpoint-dir", dir}, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("resumed from " + dir + " at step 2"), std::string::npos) << old << out;
  fs::remove_all(dir + "/step-3");  // the run's own last step, so the next resume looks at step-2 again
  damage(step2 + "/rank-0.pt");
  out = train(1, {"--steps", "3", "--checkpoint-every", "100", "--checkpoint-dir", dir}, &code);
  EXPECT_NE(out.find("step-2/rank-0.pt does not match its checksum"), std::string::npos) << out;
}

// A MANIFEST whose checksum is not a number of its kind (edited by hand, damaged) is refused by
// name, not read as 0, and the run falls back to the previous checkpoint.
TEST(Checkpoint, AManifestChecksumThatIsNotHexIsRefusedByName) {
  std::string dir = temp_dir("badhex");
  int code;
  std::vector<std::string> args = {"--steps", "4", "--checkpoint-every", "2", "--checkpoint-keep", "0",
                                   "--checkpoint-dir", dir};
  std::string out = train(1, args, &code);
  ASSERT_EQ(code, 0) << out;
  std::string m = slurp(dir + "/step-4/MANIFEST");
  const auto at = m.find("file rank-0.pt ");
  ASSERT_NE(at, std::string::npos) << m;
  const auto hash_at = m.find(' ', at + 15) + 1;
  m.replace(hash_at, m.find('\n', hash_at) - hash_at, "not-a-checksum");
  std::ofstream(dir + "/step-4/MANIFEST", std::ios::trunc) << m;
  args[1] = "6";
  out = train(1, args, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("step-4/MANIFEST's checksum of rank-0.pt is not a xxh3 value"), std::string::npos) << out;
  EXPECT_NE(out.find("resumed from " + dir + " at step 2"), std::string::npos) << out;
}

// See Note [Checkpoint fallback]: with the newest checkpoint's data damaged (one FSDP rank's shard),
// every rank resumes from the older one with a warning; with every checkpoint damaged the run
// stops naming the files.
TEST(Checkpoint, ADamagedNewestCheckpointFallsBackToTheOlderOne) {
  std::string dir = temp_dir("fallback");
  int code;
  std::vector<std::string> args = {"--strategy", "FSDP", "--steps", "4", "--checkpoint-every", "2",
                                   "--checkpoint-dir", dir};
  std::string out = train(2, args, &code);
  ASSERT_EQ(code, 0) << out;
  damage(dir + "/step-4/rank-1.pt");
  args[3] = "6";
  out = train(2, args, &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_NE(out.find("step-4/rank-1.pt does not match its checksum"), std::string::npos) << out;
  EXPECT_NE(out.find("falling back to " + dir + "/step-2"), std::string::npos) << out;
  EXPECT_NE(out.find("resumed from " + dir + " at step 2"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(dir + "/step-6/MANIFEST"));

  // Training again from step 2 rewrote step-4; now damage every checkpoint that is left.
  for (const auto& s : step_dirs(dir)) damage(dir + "/" + s + "/rank-0.pt");
  args[3] = "8";
  out = train(2, args, &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("no usable checkpoint in " + dir), std::string::npos) << out;
  EXPECT_NE(out.find("step-6/rank-0.pt does not match its checksum"), std::string::npos) << out;
}

// See Note [Shared checkpoint directory]: two pods (agents) of one rank each, as on a cluster with
// a per-pod emptyDir: each sees its own directory, and both stop at start with exit 64 naming
// spec.checkpoint.path. With one shared directory the same job trains and checkpoints.
TEST(Checkpoint, PodsMustShareTheCheckpointDirectory) {
  std::string dir = temp_dir("shared");
  auto two_pods = [&](const std::string& dir0, const std::string& dir1, int codes[2], std::string outs[2]) {
    const std::string port = std::to_string(lockstep::free_loopback_port());
    std::vector<lockstep::Process> pods;
    for (int node = 0; node < 2; ++node) {
      lockstep::SpawnOptions o;
      o.argv = {agent_bin(), "--nnodes", "2", "--node-rank", std::to_string(node), "--nproc-per-node", "1",
                "--master-addr", "127.0.0.1", "--master-port", port, "--no-metrics", "--", trainer_bin(),
                "--device", "cpu", "--batch-size", "4", "--steps", "4", "--checkpoint-every", "2",
                "--checkpoint-dir", node == 0 ? dir0 : dir1};
      o.env = {{"GLOO_SOCKET_IFNAME", "lo"}};
      o.output_path = dir + "/pod-" + std::to_string(node) + ".out";
      fs::remove(o.output_path);
      pods.push_back(lockstep::Process::spawn(o));
    }
    for (int node = 0; node < 2; ++node) {
      auto st = pods[node].wait_for(300s);
      codes[node] = st ? st->shell_code() : -1;
      outs[node] = slurp(dir + "/pod-" + std::to_string(node) + ".out");
    }
  };
  int codes[2];
  std::string outs[2];
  two_pods(dir + "/node-0", dir + "/node-1", codes, outs);
  for (int node = 0; node < 2; ++node) {
    EXPECT_EQ(codes[node], lockstep::contract::kExitUsage) << outs[node];
    EXPECT_NE(outs[node].find("checkpoint directory not shared: rank(s) 1 do not see the token"), std::string::npos)
        << outs[node];
    EXPECT_NE(outs[node].find("spec.checkpoint.path"), std::string::npos) << outs[node];
  }
  EXPECT_FALSE(fs::exists(dir + "/node-0/step-2")) << "stopped before training";
  two_pods(dir + "/one", dir + "/one", codes, outs);
  for (int node = 0; node < 2; ++node) EXPECT_EQ(codes[node], 0) << outs[node];
  EXPECT_TRUE(fs::exists(dir + "/one/step-4/MANIFEST"));
  for (const auto& e : fs::directory_iterator(dir + "/one"))
    EXPECT_NE(e.path().filename().string().rfind(".lockstep-token", 0), 0u) << "token left behind: " << e.path();
}

// docs/exit-codes.md: a rank whose peer died mid-training exits 77 (a consequence, retryable),
// for DDP's and FSDP's collectives; a rank that finds no rendezvous exits 76.
TEST(ExitCodes, APeerThatDiesMakesTheOthersExit77) {
  for (std::string strategy : {"DDP", "FSDP"}) {
    SCOPED_TRACE(strategy);
    std::string dir = temp_dir("peer-" + strategy);
    std::vector<std::string> common = {"--strategy", strategy, "--steps", "50"};
    auto dying = common;
    dying.insert(dying.end(), {"--exit-after-step", "3"});  // rank 1 dies as if killed (137)
    auto run = run_ranks({common, dying}, dir);
    EXPECT_EQ(run.codes[1], 137) << run.outputs[1];
    EXPECT_EQ(run.codes[0], lockstep::contract::kExitCollective) << run.outputs[0];
    EXPECT_NE(run.outputs[0].find("a collective failed because a peer rank is gone"), std::string::npos)
        << run.outputs[0];
    EXPECT_EQ(run.outputs[0].find("frame #"), std::string::npos) << "no C++ backtrace in the message";
  }
}

TEST(ExitCodes, NoMasterIsARendezvousFailure) {
  std::string dir = temp_dir("rdzv");
  auto one = lockstep::run_capture({trainer_bin(), "--device", "cpu"},
                                   {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                                    {"MASTER_PORT", std::to_string(lockstep::free_loopback_port())},
                                    {"LOCKSTEP_RENDEZVOUS_TIMEOUT_S", "2"}},
                                   60s);
  EXPECT_EQ(one.status.shell_code(), lockstep::contract::kExitRendezvous) << one.output;
  EXPECT_NE(one.output.find("LOCKSTEP_RENDEZVOUS_TIMEOUT_S=2s"), std::string::npos) << one.output;
}

// See Note [Communication figures]: FSDP reports its own collectives (allgather, reduce_scatter),
// each with time, bytes and exposed time; DDP its allreduce; exposed never exceeds the step or
// the op's own time.
TEST(Metrics, FsdpReportsAllGatherAndReduceScatter) {
  for (std::string strategy : {"FSDP", "DDP"}) {
    SCOPED_TRACE(strategy);
    std::string dir = temp_dir("metrics-" + strategy);
    lockstep::test::DatagramSink sink(dir + "/metrics.sock");
    auto run = run_ranks({{"--strategy", strategy, "--steps", "6"}, {"--strategy", strategy, "--steps", "6"}}, dir,
                         {{"LOCKSTEP_METRICS_SOCKET", dir + "/metrics.sock"}});
    ASSERT_EQ(run.codes, (std::vector<int>{0, 0})) << run.outputs[0] << run.outputs[1];
    auto steps = sink.drain();
    // Not necessarily all 12: nobody reads while they train, and a Unix socket queues only
    // net.unix.max_dgram_qlen (10) datagrams; the trainer drops, never blocks.
    ASSERT_GE(steps.size(), 6u);
    const std::vector<std::string> want =
        strategy == "FSDP" ? std::vector<std::string>{"allgather", "reduce_scatter"} : std::vector<std::string>{"allreduce"};
    const std::vector<std::string> absent =
        strategy == "FSDP" ? std::vector<std::string>{"allreduce"} : std::vector<std::string>{"allgather", "reduce_scatter"};
    for (const auto& s : steps) {
      const double step_s = std::stod(s.at("step_s")), exposed = std::stod(s.at("exposed_comm_s"));
      double op_sum = 0, exposed_sum = 0;
      for (const auto& op : want) {
        ASSERT_TRUE(s.count("comm_s." + op)) << op;
        const double comm = std::stod(s.at("comm_s." + op)), op_exposed = std::stod(s.at("exposed_comm_s." + op));
        EXPECT_GT(comm, 0) << op;
        EXPECT_GT(std::stod(s.at("comm_bytes." + op)), 0) << op;
        EXPECT_GE(op_exposed, 0) << op;
        // FSDP waits only for collectives; DDP's wait after backward also averages the buckets.
        if (strategy == "FSDP") {
          EXPECT_LE(op_exposed, comm + 1e-3) << op;
        }
        op_sum += comm;
        exposed_sum += op_exposed;
      }
      for (const auto& op : absent) EXPECT_FALSE(s.count("comm_s." + op)) << op;
      EXPECT_NEAR(exposed, exposed_sum, 1e-4 * exposed) << "the datagram prints 6 significant digits";
      EXPECT_GT(exposed, 0) << "blocking collectives: the step waited for some";
      EXPECT_LE(exposed, step_s);
      EXPECT_NEAR(std::stod(s.at("compute_s")) + exposed, step_s, 1e-4 * step_s);
      if (strategy == "FSDP") {
        EXPECT_NEAR(std::stod(s.at("comm_s")), op_sum, 1e-4 * op_sum);
      }
    }
  }
}

// See Note [Checkpoint fencing]: a rank of a replaced gang attempt (a lost node that woke up) never
// commits a checkpoint the new attempt reads, nor starts over it.
TEST(Checkpoint, ALaterAttemptFencesTheDirectoryAndTheOldOneNeitherStartsNorCommits) {
  using namespace lockstep::trainer;
  std::string dir = temp_dir("fence");
  CheckpointTarget old_gang{dir, 0, 1, "DDP", false, 3, "uid-a", "", 0};
  prepare_checkpoint_dir(old_gang, Dist{});
  EXPECT_EQ(slurp(dir + "/FENCE"), "job uid-a\nattempt 0\n");
  SmallModel m;
  save_checkpoint(old_gang, 5, m.tensors, m.opt, Dist{});
  ASSERT_TRUE(fs::exists(dir + "/step-5/MANIFEST"));

  // The gang restarts as attempt 1 while a rank of attempt 0 is frozen on its lost node.
  CheckpointTarget new_gang = old_gang;
  new_gang.attempt = 1;
  prepare_checkpoint_dir(new_gang, Dist{});
  EXPECT_EQ(slurp(dir + "/FENCE"), "job uid-a\nattempt 1\n");

  // The old rank thaws and reaches its next checkpoint: it gives up before the MANIFEST.
  { torch::NoGradGuard g; m.tensors[0].add_(1); }
  try {
    save_checkpoint(old_gang, 10, m.tensors, m.opt, Dist{});
    ADD_FAILURE() << "a rank of the replaced attempt committed a checkpoint";
  } catch (const CheckpointFenced& e) {
    EXPECT_NE(std::string(e.what()).find("attempt 0 was replaced by attempt 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("without committing step 10"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir + "/step-10/MANIFEST"));
  SmallModel fresh;
  auto step = load_checkpoint(new_gang, fresh.tensors, fresh.opt, Dist{});
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(*step, 5) << "the new attempt resumes from what the old one committed before it was replaced";
  // Nor does a replaced attempt start over the directory (a pod of it restarted late).
  EXPECT_THROW(prepare_checkpoint_dir(old_gang, Dist{}), CheckpointFenced);
  EXPECT_EQ(slurp(dir + "/FENCE"), "job uid-a\nattempt 1\n");
  // The new attempt's own save of that step commits over the old one's leftovers.
  save_checkpoint(new_gang, 10, fresh.tensors, fresh.opt, Dist{});
  EXPECT_TRUE(fs::exists(dir + "/step-10/MANIFEST"));

  // Another job's fence (a job deleted and applied again: a new UID) does not hold this one,
  // and without an attempt (lockstep run, a bare trainer) nothing is fenced.
  CheckpointTarget other_job{dir, 0, 1, "DDP", false, 3, "uid-b", "", 0};
  EXPECT_NO_THROW(prepare_checkpoint_dir(other_job, Dist{}));
  EXPECT_EQ(slurp(dir + "/FENCE"), "job uid-b\nattempt 0\n");
  CheckpointTarget unfenced{dir, 0, 1, "DDP", false, 3, "uid-b"};
  EXPECT_NO_THROW(prepare_checkpoint_dir(unfenced, Dist{}));
  EXPECT_EQ(slurp(dir + "/FENCE"), "job uid-b\nattempt 0\n") << "left as it was";
}

// See Note [Checkpoint owner]: a MANIFEST that names no job (a trainer run without LOCKSTEP_JOB_UID
// wrote it, or anyone who can write the volume) is not a job's own: the job stops at start
// saying so, as for another job's, and starts from it only when resumeFrom names the directory;
// it is never pruned by the job. A FENCE that names no job fences nothing of it either.
TEST(Checkpoint, AManifestThatNamesNoOwnerIsUsedOnlyWhenResumeFromNamesIt) {
  using namespace lockstep::trainer;
  std::string dir = temp_dir("ownerless");
  SmallModel written;
  CheckpointTarget anyone{dir, 0, 1, "DDP", false, 0};  // no LOCKSTEP_JOB_UID
  save_checkpoint(anyone, 4, written.tensors, written.opt, Dist{});
  ASSERT_EQ(slurp(dir + "/step-4/MANIFEST").find("job "), std::string::npos) << "it names no owner";

  CheckpointTarget job{dir, 0, 1, "DDP", false, 1, "uid-b"};
  SmallModel fresh;
  try {
    load_checkpoint(job, fresh.tensors, fresh.opt, Dist{});
    ADD_FAILURE() << "a job resumed from a checkpoint that names no owner without being asked to";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("holds checkpoints that name no owner (newest at step 4; a MANIFEST without a job line"),
              std::string::npos) << what;
    EXPECT_NE(what.find("and none of this one (UID uid-b)"), std::string::npos) << what;
    EXPECT_NE(what.find("set spec.checkpoint.resumeFrom: " + dir), std::string::npos) << what;
  }
  EXPECT_FALSE(torch::equal(fresh.tensors[0], written.saved)) << "nothing was loaded";

  // Named by resumeFrom, it is the start; the job's own then come first, and keep 1 prunes only those.
  job.resume_from = dir;
  auto step = load_checkpoint(job, fresh.tensors, fresh.opt, Dist{});
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(*step, 4);
  EXPECT_TRUE(torch::equal(fresh.tensors[0], written.saved));
  save_checkpoint(job, 6, fresh.tensors, fresh.opt, Dist{});
  save_checkpoint(job, 8, fresh.tensors, fresh.opt, Dist{});
  EXPECT_EQ(step_dirs(dir), (std::set<std::string>{"step-4", "step-8"})) << "step-6 pruned, the ownerless step-4 kept";
  EXPECT_NE(slurp(dir + "/step-8/MANIFEST").find("job uid-b\n"), std::string::npos);
  SmallModel again;
  step = load_checkpoint(job, again.tensors, again.opt, Dist{});
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(*step, 8);
  // A trainer with no UID (lockstep run) checks no owner: every checkpoint is its own.
  step = load_checkpoint(anyone, again.tensors, again.opt, Dist{});
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(*step, 8);

  // A FENCE that names no job, of a later attempt, does not stop the job: it is replaced.
  write_text_durably(dir + "/FENCE", "attempt 99\n");
  CheckpointTarget attempt{dir, 0, 1, "DDP", false, 1, "uid-b", "", 2};
  EXPECT_NO_THROW(prepare_checkpoint_dir(attempt, Dist{}));
  EXPECT_EQ(slurp(dir + "/FENCE"), "job uid-b\nattempt 2\n");
  // Its own later attempt's still does.
  write_text_durably(dir + "/FENCE", "job uid-b\nattempt 99\n");
  EXPECT_THROW(prepare_checkpoint_dir(attempt, Dist{}), CheckpointFenced);
}

namespace {
// A file outside the checkpoint directory that a planted link names: what must never be written.
std::string victim_file(const std::string& name) {
  const std::string victim = temp_dir(name + "-victim") + "/precious";
  std::ofstream(victim) << "precious\n";
  return victim;
}
}  // namespace

// See Note [Temporaries on a shared volume]: a symbolic link planted at a temporary's name (by a pod
// of another job that shares the volume) makes the write fail naming it; the link is not
// followed, so the file it names is untouched, whether it exists or not.
TEST(DurableFile, ASymlinkPlantedAtTheTemporaryIsNeverFollowed) {
  using namespace lockstep::trainer;
  const std::string dir = temp_dir("planted");
  const std::string victim = victim_file("planted");
  const std::string path = dir + "/MANIFEST", tmp = path + ".tmp-" + std::to_string(::getpid());
  fs::create_symlink(victim, tmp);
  try {
    write_text_durably(path, "step 2\n");
    ADD_FAILURE() << "the write went through a planted link";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot create " + tmp + ": a symbolic link is in its place"), std::string::npos) << what;
    EXPECT_NE(what.find("it is not followed"), std::string::npos) << what;
  }
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_symlink(tmp)) << "left for whoever looks into it";
  // A link to a file that does not exist yet is not followed into making it.
  fs::remove(tmp);
  const std::string made = fs::path(victim).parent_path().string() + "/made-through-the-link";
  fs::create_symlink(made, tmp);
  EXPECT_THROW(write_text_durably(path, "step 2\n"), std::runtime_error);
  EXPECT_FALSE(fs::exists(made));
  // A directory there fails the same way.
  fs::remove(tmp);
  fs::create_directory(tmp);
  try {
    write_text_durably(path, "step 2\n");
    ADD_FAILURE() << "a directory at the temporary's name was written over";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("a directory is in its place"), std::string::npos) << e.what();
  }
}

// A regular file at the temporary's name is one an interrupted writer of the same pid left: it is
// removed and the write goes on. A hard link planted there loses its name only: its target keeps
// its contents.
TEST(DurableFile, AStaleTemporaryOfItsOwnNameIsReplacedAndAHardLinkTargetIsUntouched) {
  using namespace lockstep::trainer;
  const std::string dir = temp_dir("stale-own");
  const std::string path = dir + "/LATEST", tmp = path + ".tmp-" + std::to_string(::getpid());
  std::ofstream(tmp) << "left by a killed writer";
  write_text_durably(path, "step-4\n");
  EXPECT_EQ(slurp(path), "step-4\n");
  EXPECT_FALSE(fs::exists(tmp));
  const std::string victim = dir + "/precious";  // a hard link needs the same file system
  std::ofstream(victim) << "precious\n";
  fs::create_hard_link(victim, tmp);
  write_text_durably(path, "step-6\n");
  EXPECT_EQ(slurp(path), "step-6\n");
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_FALSE(fs::exists(tmp));
}

// The same at a save: a link planted at a rank file's temporary fails the save on every path,
// names the link, writes nothing through it, and the previous checkpoint is kept and resumed.
TEST(Checkpoint, ASymlinkAtARankFilesTemporaryFailsTheSaveAndKeepsThePreviousCheckpoint) {
  using namespace lockstep::trainer;
  const std::string dir = temp_dir("planted-save");
  const std::string victim = victim_file("planted-save");
  CheckpointTarget t{dir, 0, 1, "DDP", false, 1, "uid-a"};
  SmallModel m;
  save_checkpoint(t, 2, m.tensors, m.opt, Dist{});
  fs::create_directories(dir + "/step-4");
  fs::create_symlink(victim, dir + "/step-4/rank-0.pt.tmp-" + std::to_string(::getpid()));
  try {
    save_checkpoint(t, 4, m.tensors, m.opt, Dist{});
    ADD_FAILURE() << "a save through a planted link was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("a symbolic link is in its place"), std::string::npos) << e.what();
  }
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_FALSE(fs::exists(dir + "/step-4")) << "the unfinished checkpoint is removed (the link with it, not its target)";
  EXPECT_EQ(slurp(dir + "/LATEST"), "step-2\n");
  SmallModel fresh;
  auto step = load_checkpoint(t, fresh.tensors, fresh.opt, Dist{});
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(*step, 2);
}
