#include "checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace lockstep::trainer {
namespace {

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Writes with `write(tmp)`, then fsync, rename over `path`, fsync the directory.
template <typename W>
void write_atomically(const std::string& path, W write) {
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  write(tmp);
  fsync_path(tmp);
  fs::rename(tmp, path);
  fsync_path(fs::path(path).parent_path().string());
}

std::string file_name(int rank) { return "rank-" + std::to_string(rank) + ".pt"; }

}  // namespace

uint64_t fnv1a_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("checkpoint: cannot read " + path);
  uint64_t h = 1469598103934665603ULL;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      h ^= static_cast<unsigned char>(buf[i]);
      h *= 1099511628211ULL;
    }
  }
  return h;
}

void save_checkpoint(const CheckpointTarget& t, int64_t step, const std::vector<torch::Tensor>& tensors,
                     torch::optim::Optimizer& optimizer, const Dist& dist) {
  std::string step_dir = t.dir + "/step-" + std::to_string(step);
  if (t.rank == 0) fs::create_directories(step_dir);
  barrier(dist);
  if (t.sharded || t.rank == 0) {
    std::string path = step_dir + "/" + file_name(t.rank);
    write_atomically(path, [&](const std::string& tmp) {
      torch::serialize::OutputArchive archive;
      for (size_t i = 0; i < tensors.size(); ++i) archive.write("tensor." + std::to_string(i), tensors[i].detach());
      torch::serialize::OutputArchive opt_archive;
      optimizer.save(opt_archive);
      archive.write("optimizer", opt_archive);
      archive.write("step", torch::tensor(step));
      archive.save_to(tmp);
    });
    std::ofstream(path + ".sum") << fs::file_size(path) << " " << fnv1a_file(path) << "\n";
  }
  barrier(dist);  // every rank's file is complete
  if (t.rank == 0) {
    write_atomically(step_dir + "/MANIFEST", [&](const std::string& tmp) {
      std::ofstream m(tmp);
      m << "step " << step << "\nworld " << t.world << "\nstrategy " << t.strategy << "\n";
      for (int r = 0; r < (t.sharded ? t.world : 1); ++r) {
        std::ifstream sum(step_dir + "/" + file_name(r) + ".sum");
        uint64_t size = 0, hash = 0;
        sum >> size >> hash;
        m << "file " << file_name(r) << " " << size << " " << hash << "\n";
      }
    });
    write_atomically(t.dir + "/LATEST", [&](const std::string& tmp) { std::ofstream(tmp) << "step-" << step << "\n"; });
  }
  barrier(dist);
}

std::optional<int64_t> load_checkpoint(const CheckpointTarget& t, std::vector<torch::Tensor>& tensors,
                                       torch::optim::Optimizer& optimizer) {
  std::ifstream latest(t.dir + "/LATEST");
  std::string name;
  if (!(latest >> name)) return std::nullopt;
  std::string step_dir = t.dir + "/" + name;
  std::ifstream manifest(step_dir + "/MANIFEST");
  if (!manifest) throw std::runtime_error("checkpoint: " + step_dir + "/MANIFEST is missing; LATEST names an incomplete checkpoint");
  std::map<std::string, std::pair<uint64_t, uint64_t>> files;
  int64_t step = -1;
  int world = 0;
  std::string strategy;
  for (std::string key; manifest >> key;) {
    if (key == "step") manifest >> step;
    else if (key == "world") manifest >> world;
    else if (key == "strategy") manifest >> strategy;
    else if (key == "file") {
      std::string f;
      uint64_t size, hash;
      manifest >> f >> size >> hash;
      files[f] = {size, hash};
    }
  }
  if (t.sharded && (world != t.world || strategy != t.strategy))
    throw std::runtime_error("checkpoint: " + step_dir + " holds " + strategy + " shards for " + std::to_string(world) +
                             " ranks; this run is " + t.strategy + " on " + std::to_string(t.world) +
                             " ranks. Resume with the same strategy and world size, or use a new --checkpoint-dir");
  if (!t.sharded && strategy == "FSDP")
    throw std::runtime_error("checkpoint: " + step_dir + " holds FSDP shards; resume it with --strategy FSDP on " +
                             std::to_string(world) + " ranks");
  std::string file = file_name(t.sharded ? t.rank : 0);
  std::string path = step_dir + "/" + file;
  auto it = files.find(file);
  if (it == files.end()) throw std::runtime_error("checkpoint: " + step_dir + "/MANIFEST does not list " + file);
  if (!fs::exists(path) || fs::file_size(path) != it->second.first || fnv1a_file(path) != it->second.second)
    throw std::runtime_error("checkpoint: " + path + " does not match its checksum in MANIFEST (corrupt or truncated)");
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) {
    torch::Tensor v;
    if (!archive.try_read("tensor." + std::to_string(i), v) || v.sizes() != tensors[i].sizes())
      throw std::runtime_error("checkpoint: " + path + " does not fit this model (tensor " + std::to_string(i) +
                               "); check --model and its size flags");
    tensors[i].copy_(v);
  }
  torch::serialize::InputArchive opt_archive;
  archive.read("optimizer", opt_archive);
  optimizer.load(opt_archive);
  return step;
}

}  // namespace lockstep::trainer
