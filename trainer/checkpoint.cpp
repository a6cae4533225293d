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
#include "durable_file.hpp"

namespace fs = std::filesystem;

namespace lockstep::trainer {
namespace {

constexpr const char* kToken = ".lockstep-token-";  // + the nonce: Note [Shared checkpoint directory]

std::string file_name(int rank) { return "rank-" + std::to_string(rank) + ".pt"; }
std::string step_name(int64_t step) { return "step-" + std::to_string(step); }

// Every rank's `mine` side by side: rank r's values at [r * n, (r + 1) * n). An all-reduce of a
// tensor on the training device (Note [Collective device]), as a sum of disjoint slots.
std::vector<int64_t> all_gather_ints(const Dist& d, const std::vector<int64_t>& mine) {
  const size_t n = mine.size();
  if (!d.pg || d.world <= 1) return mine;  // one rank: its own values are every rank's
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
  std::string job;  // the writer's job UID; empty when it recorded none (Note [Checkpoint owner])
  std::map<std::string, std::pair<uint64_t, std::string>> files;  // name -> size, checksum as written
};

Manifest read_manifest(const std::string& path) {
  std::ifstream in(path);
  Manifest m;
  for (std::string key; in >> key;) {
    if (key == "step") in >> m.step;
    else if (key == "world") in >> m.world;
    else if (key == "strategy") in >> m.strategy;
    else if (key == "checksum") in >> m.checksum;
    else if (key == "job") in >> m.job;
    else if (key == "file") {
      std::string f, hash;
      uint64_t size = 0;
      if (in >> f >> size >> hash) m.files[f] = {size, hash};
    }
  }
  return m;
}

// See Note [Checkpoint owner]: a MANIFEST that names no job is no job's own.
bool owned_by(const Manifest& m, const std::string& job_uid) { return job_uid.empty() || m.job == job_uid; }

// The complete checkpoints in `dir` that `job_uid` owns (any, for ""), newest first, and the
// newest one that is not its own (foreign_step -1: none), with its writer ("" when it names none).
struct Found {
  std::vector<int64_t> own;
  int64_t foreign_step = -1;
  std::string foreign_job;
};
Found find_checkpoints(const std::string& dir, const std::string& job_uid) {
  Found f;
  for (int64_t step : complete_steps(dir)) {
    Manifest m = read_manifest(dir + "/" + step_name(step) + "/MANIFEST");
    if (owned_by(m, job_uid)) f.own.push_back(step);
    else if (f.foreign_step < 0) f.foreign_step = step, f.foreign_job = m.job;
  }
  return f;
}

// Whose the checkpoints `f` found beside a job's are, for a message.
std::string foreign_owner(const Found& f) {
  const std::string newest = "newest at step " + std::to_string(f.foreign_step);
  if (f.foreign_job.empty())
    return "that name no owner (" + newest + "; a MANIFEST without a job line: written by a trainer that did not "
           "record owners, or run without LOCKSTEP_JOB_UID)";
  return "of another job (UID " + f.foreign_job + ", " + newest + ")";
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
  uint64_t sum = 0, recorded = 0;
  if (!checksum::from_text(it->second.second, m.checksum, recorded))
    return step_dir + "/MANIFEST's checksum of " + file + " is not a " + m.checksum + " value";
  if (m.checksum == checksum::kXxh3) sum = checksum::xxh3_file(path);
  else if (m.checksum == checksum::kLanes64) sum = checksum::lanes64_file(path);
  else if (m.checksum == checksum::kFnv1a64) sum = checksum::fnv1a64_file(path);
  else return step_dir + "/MANIFEST names an unknown checksum '" + m.checksum + "'";
  if (sum != recorded) return path + " does not match its checksum in MANIFEST (corrupt)";
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

// Rank 0, after a verified save: all but the newest `keep` of this job's complete checkpoints
// go, and any incomplete step directory older than the oldest kept (one a crash left); another
// job's are never removed (Note [Checkpoint owner]).
void prune(const CheckpointTarget& t) {
  if (t.keep <= 0) return;
  auto steps = find_checkpoints(t.dir, t.job_uid).own;
  if (static_cast<int64_t>(steps.size()) <= t.keep) return;
  const int64_t oldest_kept = steps[static_cast<size_t>(t.keep - 1)];
  std::error_code ec;
  for (fs::directory_iterator it(t.dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    char* rest = nullptr;
    long long s = std::strtoll(name.c_str() + 5, &rest, 10);
    if (*rest || rest == name.c_str() + 5 || s >= oldest_kept) continue;
    const fs::path manifest = it->path() / "MANIFEST";
    if (fs::exists(manifest) && !owned_by(read_manifest(manifest.string()), t.job_uid)) continue;
    std::error_code rm;
    fs::remove_all(it->path(), rm);
    if (rm) std::cerr << "lockstep-trainer: warning: cannot remove old checkpoint " << it->path().string() << ": "
                      << rm.message() << std::endl;
  }
}

// Every rank learns whether any rank has a problem with this save; if one has, rank 0 removes
// the unfinished step directory (it frees the space a full volume needs) and every rank throws,
// the failing one its own message. Older checkpoints are untouched.
void agree_or_throw(const CheckpointTarget& t, const Dist& dist, const std::string& step_dir, const std::string& problem) {
  const auto verdicts = all_gather_ints(dist, {problem.empty() ? 0 : 1});
  std::vector<int> bad;
  for (size_t r = 0; r < verdicts.size(); ++r)
    if (verdicts[r]) bad.push_back(static_cast<int>(r));
  if (bad.empty()) return;
  if (t.rank == 0) {
    std::error_code ec;
    fs::remove_all(step_dir, ec);
  }
  if (!problem.empty()) throw std::runtime_error(problem);
  throw std::runtime_error("checkpoint: rank(s) " + rank_list(bad) + " could not save their part of " + step_dir +
                           " (their log says why); it is not used, and the previous checkpoints are kept");
}

// This rank's file of the checkpoint and its checksum file, or what went wrong.
std::string write_rank_file(const CheckpointTarget& t, int64_t step, const std::string& step_dir,
                            const std::vector<torch::Tensor>& tensors, torch::optim::Optimizer& optimizer) {
  if (!fs::is_directory(step_dir))
    return "checkpoint: rank " + std::to_string(t.rank) + " does not see " + step_dir + ", which rank 0 created; " +
           shared_storage_hint(t.dir);
  const std::string path = step_dir + "/" + file_name(t.rank);
  try {
    DurableFile file(path);
    torch::serialize::OutputArchive archive;
    for (size_t i = 0; i < tensors.size(); ++i) archive.write("tensor." + std::to_string(i), tensors[i].detach());
    torch::serialize::OutputArchive opt_archive;
    optimizer.save(opt_archive);
    archive.write("optimizer", opt_archive);
    archive.write("step", torch::tensor(step));
    archive.save_to([&](const void* data, size_t n) {
      file.write(data, n);
      return n;
    });
    const uint64_t size = file.commit();
    write_text_durably(path + ".sum", std::to_string(size) + " " + checksum::to_text(file.checksum(), checksum::kXxh3) +
                                          " " + checksum::kXxh3 + "\n");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// See Note [Checkpoint fencing]: the attempt that fenced the directory last, when it is a later
// attempt of this job than `t`'s; nullopt otherwise (no FENCE, another job's, no attempt).
std::optional<int64_t> later_fence(const CheckpointTarget& t) {
  if (t.attempt < 0) return std::nullopt;
  std::ifstream in(t.dir + "/FENCE");
  std::string key, job;
  int64_t attempt = -1;
  for (std::string value; in >> key >> value;) {
    if (key == "job") job = value;
    else if (key == "attempt") attempt = std::strtoll(value.c_str(), nullptr, 10);
  }
  // Another job's FENCE, or one that names no job, fences nothing of this one (Note [Checkpoint
  // owner]): it is replaced.
  if (!t.job_uid.empty() && job != t.job_uid) return std::nullopt;
  if (attempt > t.attempt) return attempt;
  return std::nullopt;
}

std::string fenced_message(const CheckpointTarget& t, int64_t later, const std::string& doing) {
  return "checkpoint: gang attempt " + std::to_string(t.attempt) + " was replaced by attempt " + std::to_string(later) +
         " (" + t.dir + "/FENCE); this rank belongs to the old gang and stops " + doing +
         " (Note [Checkpoint fencing]: a node that was lost and woke up again)";
}

// Rank 0: the MANIFEST, once every rank's checksum file is there; or what went wrong.
std::string write_manifest(const CheckpointTarget& t, int64_t step, const std::string& step_dir) {
  std::ostringstream m;
  m << "step " << step << "\nworld " << t.world << "\nstrategy " << t.strategy << "\nchecksum " << checksum::kXxh3
    << "\n";
  if (!t.job_uid.empty()) m << "job " << t.job_uid << "\n";
  for (int r = 0; r < (t.sharded ? t.world : 1); ++r) {
    const std::string sum_path = step_dir + "/" + file_name(r) + ".sum";
    std::ifstream sum(sum_path);
    uint64_t size = 0, hash = 0;
    std::string hash_text, kind;
    // Never a made-up entry: without its checksum this checkpoint stays incomplete (no
    // MANIFEST) and the previous one remains the newest.
    if (!(sum >> size >> hash_text >> kind) || kind != checksum::kXxh3 || !checksum::from_text(hash_text, kind, hash))
      return "checkpoint: " + sum_path + " is missing or incomplete after rank " + std::to_string(r) +
             " finished writing; " + shared_storage_hint(t.dir);
    m << "file " << file_name(r) << " " << size << " " << checksum::to_text(hash, checksum::kXxh3) << "\n";
  }
  try {
    write_text_durably(step_dir + "/MANIFEST", m.str());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
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
  // See Note [Checkpoint fencing]: rank 0 fences the directory for this attempt, or finds that a
  // later one did; every rank learns which below.
  std::string fenced;
  if (t.rank == 0 && t.attempt >= 0) {
    if (auto later = later_fence(t)) {
      fenced = fenced_message(t, *later, "before touching the checkpoints");
    } else {
      std::ostringstream f;
      f << "job " << (t.job_uid.empty() ? "-" : t.job_uid) << "\nattempt " << t.attempt << "\n";
      write_text_durably(t.dir + "/FENCE", f.str());
    }
  }
  if (!dist.pg) {
    if (!fenced.empty()) throw CheckpointFenced(fenced);
    return;
  }
  if (all_gather_ints(dist, {fenced.empty() ? 0 : 1})[0] != 0)
    throw CheckpointFenced(fenced.empty() ? "checkpoint: rank 0 found that a later gang attempt fenced " + t.dir +
                                                 "; this rank belongs to the old gang and stops (Note [Checkpoint fencing])"
                                          : fenced);
  // The token's name is new every time, so a network file system's client looks it up on the
  // server instead of answering from a cache of the directory.
  const auto token = [&](int64_t n) { return t.dir + "/" + kToken + std::to_string(n); };
  if (t.rank == 0) {
    std::random_device rd;
    nonce = static_cast<int64_t>((static_cast<uint64_t>(rd()) << 32 | rd()) & 0x7fffffffffffffffULL) | 1;
    write_text_durably(token(nonce), std::to_string(nonce) + "\n");
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
  const std::string step_dir = t.dir + "/" + step_name(step);
  const bool writer = t.sharded || t.rank == 0;
  std::string problem;
  if (t.rank == 0) {
    std::error_code ec;
    fs::create_directories(step_dir, ec);
    if (ec) problem = "checkpoint: cannot create " + step_dir + ": " + storage_error_text(ec.value());
  }
  agree_or_throw(t, dist, step_dir, problem);
  // 1. Each writer's file and its checksum file (Note [Durable checkpoint writes]).
  if (writer) problem = write_rank_file(t, step, step_dir, tensors, optimizer);
  agree_or_throw(t, dist, step_dir, problem);
  // 2. Rank 0: the MANIFEST, from every rank's checksum file, unless a later attempt fenced the
  // directory meanwhile (Note [Checkpoint fencing]).
  std::string fenced;
  if (t.rank == 0) {
    if (auto later = later_fence(t)) fenced = fenced_message(t, *later, "without committing step " + std::to_string(step));
    else problem = write_manifest(t, step, step_dir);
  }
  if (!dist.pg) {
    if (!fenced.empty()) throw CheckpointFenced(fenced);
  } else if (all_gather_ints(dist, {fenced.empty() ? 0 : 1})[0] != 0) {
    throw CheckpointFenced(fenced.empty() ? "checkpoint: a later gang attempt fenced " + t.dir +
                                                 " before step " + std::to_string(step) + " was committed; this rank "
                                                 "belongs to the old gang and stops (Note [Checkpoint fencing])"
                                          : fenced);
  }
  agree_or_throw(t, dist, step_dir, problem);
  // 3. Every writer re-reads its file from the storage and checks it as resume would.
  if (writer) {
    try {
      problem = verify(t, step_dir);
    } catch (const std::exception& e) {
      problem = e.what();
    }
    if (!problem.empty()) problem = "checkpoint: " + step_dir + " does not verify after it was written: " + problem;
  }
  agree_or_throw(t, dist, step_dir, problem);
  // 4. Only now may older ones go. LATEST is for people: failing to update it only warns.
  if (t.rank == 0) {
    try {
      write_text_durably(t.dir + "/LATEST", step_name(step) + "\n");
    } catch (const std::exception& e) {
      std::cerr << "lockstep-trainer: warning: " << e.what() << std::endl;
    }
    prune(t);
  }
  barrier(dist);
}

namespace {

// Resumes from the newest of `steps` (in `dir`) that every rank can verify.
std::optional<int64_t> resume_in(const CheckpointTarget& t, const std::string& dir, const std::vector<int64_t>& steps,
                                 std::vector<torch::Tensor>& tensors, torch::optim::Optimizer& optimizer,
                                 const Dist& dist) {
  // Every rank must see the same checkpoints (Note [Shared checkpoint directory]).
  const auto listed = all_gather_ints(dist, {static_cast<int64_t>(steps.size()), steps.empty() ? -1 : steps.front()});
  for (int r = 1; r < dist.world && dist.pg; ++r)
    if (listed[2 * r] != listed[0] || listed[2 * r + 1] != listed[1])
      throw std::invalid_argument("checkpoint: the ranks see different checkpoints in " + dir + " (rank 0: " +
                                  std::to_string(listed[0]) + ", newest step " + std::to_string(listed[1]) + "; rank " +
                                  std::to_string(r) + ": " + std::to_string(listed[2 * r]) + ", newest step " +
                                  std::to_string(listed[2 * r + 1]) + "), so they would resume from different steps; " +
                                  shared_storage_hint(dir));
  // See Note [Checkpoint fallback]: the newest checkpoint every rank can verify.
  std::vector<std::string> skipped;
  for (int64_t step : steps) {
    const std::string step_dir = dir + "/" + step_name(step);
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
  throw std::runtime_error("checkpoint: no usable checkpoint in " + dir + ", every one is damaged or incomplete:" + all +
                           "\nMove the damaged step-* directories away to start from scratch, or restore them");
}

}  // namespace

std::optional<int64_t> load_checkpoint(const CheckpointTarget& t, std::vector<torch::Tensor>& tensors,
                                       torch::optim::Optimizer& optimizer, const Dist& dist) {
  // See Note [Checkpoint owner]: this job's own checkpoints first.
  const Found here = find_checkpoints(t.dir, t.job_uid);
  if (!here.own.empty() || t.resume_from.empty()) {
    if (here.own.empty() && here.foreign_step >= 0)
      throw std::invalid_argument(
          "checkpoint: " + t.dir + " holds checkpoints " + foreign_owner(here) + " and none of this one (UID " +
          t.job_uid + "); " +
          (here.foreign_job.empty() ? "checkpoints that name no owner are no job's own"
                                    : "a TrainingJob deleted and applied again is a new job") +
          ". Not resuming from them, and not training over them: set spec.checkpoint.resumeFrom: " + t.dir +
          " (--resume-from) to start from them, or give spec.checkpoint.path an empty directory (or remove the step-* "
          "directories there) to start afresh");
    return resume_in(t, t.dir, here.own, tensors, optimizer, dist);
  }
  // None of its own yet: the newest verifiable one in spec.checkpoint.resumeFrom, whoever wrote it.
  const Found from = find_checkpoints(t.resume_from, "");
  if (from.own.empty())
    throw std::invalid_argument("checkpoint: spec.checkpoint.resumeFrom (--resume-from) " + t.resume_from +
                                " holds no complete checkpoint (no step-*/MANIFEST) to start from; name the directory "
                                "the other job's checkpoints are in (as its pods saw it), or remove resumeFrom to start "
                                "afresh");
  auto step = resume_in(t, t.resume_from, from.own, tensors, optimizer, dist);
  if (step && t.rank == 0) {
    const std::string writer = read_manifest(t.resume_from + "/" + step_name(*step) + "/MANIFEST").job;
    std::cout << "lockstep-trainer: no checkpoint of this job in " << t.dir << "; starting from " << t.resume_from
              << "/" << step_name(*step) << " (spec.checkpoint.resumeFrom), written by "
              << (writer.empty() ? "a job that recorded no UID (its MANIFEST names no owner)" : "job UID " + writer)
              << std::endl;
  }
  return step;
}

}  // namespace lockstep::trainer
