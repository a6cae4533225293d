#include "checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>

#include "checksum.hpp"

namespace fs = std::filesystem;

namespace lockstep::trainer {
namespace {

constexpr const char* kToken = ".lockstep-token-";  // + the nonce: Note [Shared checkpoint directory]

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string temp_name(const std::string& path) { return path + ".tmp-" + std::to_string(::getpid()); }

// Writes with `write(tmp)`, then fsync, rename over `path`, fsync the directory.
template <typename W>
void write_atomically(const std::string& path, W write) {
  std::string tmp = temp_name(path);
  write(tmp);
  fsync_path(tmp);
  fs::rename(tmp, path);
  fsync_path(fs::path(path).parent_path().string());
}

void write_text_atomically(const std::string& path, const std::string& text) {
  write_atomically(path, [&](const std::string& tmp) {
    std::ofstream out(tmp);
    out << text;
    out.close();
    if (!out) throw std::runtime_error("checkpoint: cannot write " + tmp);
  });
}

std::string file_name(int rank) { return "rank-" + std::to_string(rank) + ".pt"; }
std::string step_name(int64_t step) { return "step-" + std::to_string(step); }

// Every rank's `mine` side by side: rank r's values at [r * n, (r + 1) * n). An all-reduce of a
// tensor on the training device (Note [Collective device]), as a sum of disjoint slots.
std::vector<int64_t> all_gather_ints(const Dist& d, const std::vector<int64_t>& mine) {
  const size_t n = mine.size();
  if (!d.pg) return mine;
  auto host = torch::zeros({static_cast<int64_t>(n) * d.world}, torch::kInt64);
  for (size_t i = 0; i < n; ++i) host[static_cast<int64_t>(d.rank * n + i)] = mine[i];
  std::vector<at::Tensor> t{host.to(d.device)};
  d.pg->allreduce(t)->wait();
  auto back = t[0].cpu();
  return std::vector<int64_t>(back.data_ptr<int64_t>(), back.data_ptr<int64_t>() + back.numel());
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

std::string shared_storage_hint(const std::string& dir) {
  return "spec.checkpoint.path (--checkpoint-dir, LOCKSTEP_CHECKPOINT_PATH) " + dir +
         " must be the same storage for every pod: mount a ReadWriteMany PersistentVolumeClaim (NFS, CephFS, a CSI "
         "file share) there; an emptyDir or hostPath is one directory per pod";
}

// Complete checkpoints (a MANIFEST is there), newest first.
std::vector<int64_t> complete_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    char* rest = nullptr;
    long long s = std::strtoll(name.c_str() + 5, &rest, 10);
    if (*rest || rest == name.c_str() + 5 || s < 0) continue;
    if (fs::exists(it->path() / "MANIFEST")) steps.push_back(s);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

struct Manifest {
  int64_t step = -1;
  int world = 0;
  std::string strategy, checksum = checksum::kFnv1a64;  // checkpoints before lanes64 name none
  std::map<std::string, std::pair<uint64_t, uint64_t>> files;  // name -> size, checksum
};

Manifest read_manifest(const std::string& path) {
  std::ifstream in(path);
  Manifest m;
  for (std::string key; in >> key;) {
    if (key == "step") in >> m.step;
    else if (key == "world") in >> m.world;
    else if (key == "strategy") in >> m.strategy;
    else if (key == "checksum") in >> m.checksum;
    else if (key == "file") {
      std::string f;
      uint64_t size = 0, hash = 0;
      if (in >> f >> size >> hash) m.files[f] = {size, hash};
    }
  }
  return m;
}

// Why this rank cannot use `step_dir`'s file, or "" when it verifies (Note [Checkpoint fallback]).
// A checkpoint that does not fit the run (strategy, world size) is not damage: that throws.
std::string verify(const CheckpointTarget& t, const std::string& step_dir) {
  Manifest m = read_manifest(step_dir + "/MANIFEST");
  if (t.sharded && (m.world != t.world || m.strategy != t.strategy))
    throw std::invalid_argument("checkpoint: " + step_dir + " holds " + m.strategy + " shards for " +
                                std::to_string(m.world) + " ranks; this run is " + t.strategy + " on " +
                                std::to_string(t.world) +
                                " ranks. Resume with the same strategy and world size, or use a new --checkpoint-dir");
  if (!t.sharded && m.strategy == "FSDP")
    throw std::invalid_argument("checkpoint: " + step_dir + " holds FSDP shards; resume it with --strategy FSDP on " +
                                std::to_string(m.world) + " ranks");
  const std::string file = file_name(t.sharded ? t.rank : 0), path = step_dir + "/" + file;
  auto it = m.files.find(file);
  if (it == m.files.end()) return step_dir + "/MANIFEST does not list " + file;
  if (!fs::exists(path)) return path + " is missing";
  if (fs::file_size(path) != it->second.first)
    return path + " is " + std::to_string(fs::file_size(path)) + " bytes, MANIFEST says " +
           std::to_string(it->second.first) + " (truncated)";
  uint64_t sum = 0;
  if (m.checksum == checksum::kLanes64) sum = checksum::lanes64_file(path);
  else if (m.checksum == checksum::kFnv1a64) sum = checksum::fnv1a64_file(path);
  else return step_dir + "/MANIFEST names an unknown checksum '" + m.checksum + "'";
  if (sum != it->second.second) return path + " does not match its checksum in MANIFEST (corrupt)";
  return "";
}

void load_file(const std::string& path, std::vector<torch::Tensor>& tensors, torch::optim::Optimizer& optimizer) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) {
    torch::Tensor v;
    if (!archive.try_read("tensor." + std::to_string(i), v) || v.sizes() != tensors[i].sizes())
      throw std::invalid_argument("checkpoint: " + path + " does not fit this model (tensor " + std::to_string(i) +
                                  "); check --model and its size flags, or use a new --checkpoint-dir");
    tensors[i].copy_(v);
  }
  torch::serialize::InputArchive opt_archive;
  archive.read("optimizer", opt_archive);
  optimizer.load(opt_archive);
}

// Rank 0, after a complete save: all but the newest `keep` complete checkpoints go, and any
// step directory older than the oldest kept (an incomplete one a crash left).
void prune(const CheckpointTarget& t) {
  if (t.keep <= 0) return;
  auto steps = complete_steps(t.dir);
  if (static_cast<int64_t>(steps.size()) <= t.keep) return;
  const int64_t oldest_kept = steps[static_cast<size_t>(t.keep - 1)];
  std::error_code ec;
  for (fs::directory_iterator it(t.dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    char* rest = nullptr;
    long long s = std::strtoll(name.c_str() + 5, &rest, 10);
    if (*rest || rest == name.c_str() + 5 || s >= oldest_kept) continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);
    if (rm) std::cerr << "lockstep-trainer: warning: cannot remove old checkpoint " << it->path().string() << ": "
                      << rm.message() << std::endl;
  }
}

}  // namespace

void prepare_checkpoint_dir(const CheckpointTarget& t, const Dist& dist, std::chrono::seconds stale_after) {
  std::error_code ec;
  fs::create_directories(t.dir, ec);  // every rank: a per-pod directory shows as a token mismatch, not ENOENT
  if (ec) throw std::invalid_argument("spec.checkpoint.path (--checkpoint-dir) " + t.dir + ": cannot create it: " + ec.message());
  int64_t nonce = 0;
  if (t.rank == 0) {
    // Temporaries a killed writer left (write_atomically's *.tmp-<pid>, a token), old enough
    // that no writer of an attempt still shutting down can own them.
    const auto cutoff = fs::file_time_type::clock::now() - stale_after;
    for (fs::recursive_directory_iterator it(t.dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it.depth() > 1 || !it->is_regular_file()) continue;
      const std::string name = it->path().filename().string();
      std::error_code mt;
      const bool temporary = name.find(".tmp-") != std::string::npos || name.rfind(kToken, 0) == 0;
      if (!temporary || fs::last_write_time(it->path(), mt) > cutoff || mt) continue;
      std::error_code rm;
      if (fs::remove(it->path(), rm))
        std::cout << "lockstep-trainer: removed " << it->path().string() << ", left by an interrupted checkpoint"
                  << std::endl;
    }
  }
  if (!dist.pg) return;
  // The token's name is new every time, so a network file system's client looks it up on the
  // server instead of answering from a cache of the directory.
  const auto token = [&](int64_t n) { return t.dir + "/" + kToken + std::to_string(n); };
  if (t.rank == 0) {
    std::random_device rd;
    nonce = static_cast<int64_t>((static_cast<uint64_t>(rd()) << 32 | rd()) & 0x7fffffffffffffffULL) | 1;
    write_text_atomically(token(nonce), std::to_string(nonce) + "\n");
  }
  // Rank 0's nonce to everyone (a sum in which only rank 0's slot is set), then each rank's
  // verdict to everyone, so all ranks stop together with one message.
  nonce = all_gather_ints(dist, {nonce})[0];
  int64_t seen = 0;
  std::ifstream(token(nonce)) >> seen;
  auto verdicts = all_gather_ints(dist, {seen == nonce ? 1 : 0});
  if (t.rank == 0) fs::remove(token(nonce), ec);  // every rank has read it
  std::vector<int> blind;
  for (int r = 0; r < dist.world; ++r)
    if (verdicts[static_cast<size_t>(r)] == 0) blind.push_back(r);
  if (!blind.empty())
    throw std::invalid_argument("checkpoint directory not shared: rank(s) " + rank_list(blind) +
                                " do not see the token rank 0 wrote into " + t.dir + "; " + shared_storage_hint(t.dir));
}

void save_checkpoint(const CheckpointTarget& t, int64_t step, const std::vector<torch::Tensor>& tensors,
                     torch::optim::Optimizer& optimizer, const Dist& dist) {
  std::string step_dir = t.dir + "/" + step_name(step);
  if (t.rank == 0) fs::create_directories(step_dir);
  barrier(dist);
  if (t.sharded || t.rank == 0) {
    std::string path = step_dir + "/" + file_name(t.rank);
    if (!fs::is_directory(step_dir))
      throw std::runtime_error("checkpoint: rank " + std::to_string(t.rank) + " does not see " + step_dir +
                               ", which rank 0 created; " + shared_storage_hint(t.dir));
    write_atomically(path, [&](const std::string& tmp) {
      torch::serialize::OutputArchive archive;
      for (size_t i = 0; i < tensors.size(); ++i) archive.write("tensor." + std::to_string(i), tensors[i].detach());
      torch::serialize::OutputArchive opt_archive;
      optimizer.save(opt_archive);
      archive.write("optimizer", opt_archive);
      archive.write("step", torch::tensor(step));
      archive.save_to(tmp);
    });
    write_text_atomically(path + ".sum", std::to_string(fs::file_size(path)) + " " +
                                             std::to_string(checksum::lanes64_file(path)) + " " + checksum::kLanes64 + "\n");
  }
  barrier(dist);  // every rank's file and checksum are complete
  if (t.rank == 0) {
    std::ostringstream m;
    m << "step " << step << "\nworld " << t.world << "\nstrategy " << t.strategy << "\nchecksum " << checksum::kLanes64
      << "\n";
    for (int r = 0; r < (t.sharded ? t.world : 1); ++r) {
      const std::string sum_path = step_dir + "/" + file_name(r) + ".sum";
      std::ifstream sum(sum_path);
      uint64_t size = 0, hash = 0;
      std::string kind;
      // Never a made-up entry: without its checksum this checkpoint stays incomplete (no
      // MANIFEST) and the previous one remains the newest.
      if (!(sum >> size >> hash >> kind) || kind != checksum::kLanes64)
        throw std::runtime_error("checkpoint: " + sum_path + " is missing or incomplete after rank " + std::to_string(r) +
                                 " finished writing; " + shared_storage_hint(t.dir));
      m << "file " << file_name(r) << " " << size << " " << hash << "\n";
    }
    write_text_atomically(step_dir + "/MANIFEST", m.str());
    write_text_atomically(t.dir + "/LATEST", step_name(step) + "\n");
    prune(t);
  }
  barrier(dist);
}

std::optional<int64_t> load_checkpoint(const CheckpointTarget& t, std::vector<torch::Tensor>& tensors,
                                       torch::optim::Optimizer& optimizer, const Dist& dist) {
  // Every rank must see the same checkpoints (Note [Shared checkpoint directory]).
  const auto steps = complete_steps(t.dir);
  const auto listed = all_gather_ints(dist, {static_cast<int64_t>(steps.size()), steps.empty() ? -1 : steps.front()});
  for (int r = 1; r < dist.world && dist.pg; ++r)
    if (listed[2 * r] != listed[0] || listed[2 * r + 1] != listed[1])
      throw std::invalid_argument("checkpoint: the ranks see different checkpoints in " + t.dir + " (rank 0: " +
                                  std::to_string(listed[0]) + ", newest step " + std::to_string(listed[1]) + "; rank " +
                                  std::to_string(r) + ": " + std::to_string(listed[2 * r]) + ", newest step " +
                                  std::to_string(listed[2 * r + 1]) + "), so they would resume from different steps; " +
                                  shared_storage_hint(t.dir));
  // Note [Checkpoint fallback]: the newest checkpoint every rank can verify.
  std::vector<std::string> skipped;
  for (int64_t step : steps) {
    const std::string step_dir = t.dir + "/" + step_name(step);
    const std::string problem = verify(t, step_dir);
    auto verdicts = all_gather_ints(dist, {problem.empty() ? 0 : 1});
    std::vector<int> bad;
    for (size_t r = 0; r < verdicts.size(); ++r)
      if (verdicts[r]) bad.push_back(static_cast<int>(r));
    if (!problem.empty())
      std::cerr << "lockstep-trainer: warning: rank " << t.rank << ": checkpoint " << step_dir
                << " cannot be used: " << problem << std::endl;
    if (!bad.empty()) {
      skipped.push_back(step_dir + (problem.empty() ? " (damaged on rank(s) " + rank_list(bad) + ")" : ": " + problem));
      continue;
    }
    load_file(step_dir + "/" + file_name(t.sharded ? t.rank : 0), tensors, optimizer);
    if (!skipped.empty() && t.rank == 0)
      std::cerr << "lockstep-trainer: warning: falling back to " << step_dir << ", the newest checkpoint every rank can "
                << "verify; skipped " << skipped.size() << " newer damaged or incomplete one(s); training repeats the "
                << "steps after " << step << std::endl;
    return step;
  }
  if (skipped.empty()) return std::nullopt;
  std::string all;
  for (const auto& s : skipped) all += "\n  " + s;
  throw std::runtime_error("checkpoint: no usable checkpoint in " + t.dir + ", every one is damaged or incomplete:" + all +
                           "\nMove the damaged step-* directories away to start from scratch, or restore them");
}

}  // namespace lockstep::trainer
