// Files that are on the storage when they say so: every open, write, fsync, close and rename
// is checked. Standard library and POSIX only.
//
// Note [Durable checkpoint writes]
// On a network file system a write can succeed into the page cache and fail later, when the
// client sends it to the server (a full volume, a quota, a server that went away); the error is
// reported only by fsync or close. A checkpoint writer that ignores them publishes a MANIFEST
// over bad data, and pruning then removes the older, good checkpoints. So: each file is written
// to a temporary name through one descriptor, whose fsync and close must both succeed before
// the rename; the directory is fsynced after it. The cached pages are then dropped
// (POSIX_FADV_DONTNEED), so the re-read that verifies a new checkpoint (Note [Checkpoint
// fallback]) reads the storage, not this process's page cache. A failed write leaves no
// temporary behind and the previous file under `path` untouched.
// Torch's archive writer keeps calling its writer after a short write and can terminate the
// process from its destructor when one fails, so write() never fails: it records the first
// error, drops the rest, and commit() throws it.
//
// Note [Temporaries on a shared volume]
// The checkpoint volume may be shared with pods this job does not trust: another job's, of
// another team, on the same ReadWriteMany claim or hostPath. One of them could plant a symbolic
// link at a temporary's name (`path`.tmp-<pid>: pids are small and repeat, so the name is easy
// to guess), and an open with O_CREAT|O_TRUNC would write the checkpoint through it into
// whatever file it names that this process may write. So a temporary is always made anew,
// O_CREAT|O_EXCL|O_NOFOLLOW: the open fails on anything already at the name, and follows
// nothing. A regular file there is taken for a temporary of this name that a killed writer left
// (a container's pids repeat across restarts) and removed first, once (unlink(2) removes the
// name, never the file a link names, so a hard link planted there costs its target nothing);
// anything else there, a symbolic link, a directory, or a second file put there as the
// temporary is made, fails the write with what was found, and follows nothing. The rename onto
// `path` replaces whatever entry is there, a link too, without following it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "checksum.hpp"

namespace lockstep::trainer {

// The system calls durable writes use: a seam for tests (storage that fails), ::open etc. by
// default. Not thread-safe to change while a checkpoint is being written.
struct FileIo {
  int (*open)(const char* path, int flags, mode_t mode);
  ssize_t (*write)(int fd, const void* data, size_t size);
  int (*fsync)(int fd);
  int (*close)(int fd);
};
FileIo& file_io();
FileIo default_file_io();

// What a storage error means for a checkpoint, and what to do: "No space left on device
// (ENOSPC): the checkpoint volume is full ..." (errno's text and name, then a hint).
std::string storage_error_text(int err);

class DurableFile {
 public:
  // Makes `path`.tmp-<pid> for writing (Note [Temporaries on a shared volume]); throws
  // std::runtime_error naming it when it cannot.
  explicit DurableFile(std::string path);
  ~DurableFile();  // not committed: the temporary is removed
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  // Appends; never throws (see the Note): the first error is kept for commit().
  void write(const void* data, size_t size) noexcept;
  // fsync, close, rename over `path`, fsync the directory; throws std::runtime_error with the
  // first error of any step. Returns the bytes written.
  uint64_t commit();
  // XXH3-64 of what was written (Note [Checkpoint checksum]).
  uint64_t checksum() const { return sum_.digest(); }

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  std::string path_, tmp_;
  int fd_ = -1;
  int error_ = 0;
  std::string failed_at_;
  uint64_t size_ = 0;
  checksum::Xxh3 sum_;
  bool committed_ = false;
};

// `text` as the whole of `path`, durably.
void write_text_durably(const std::string& path, const std::string& text);

}  // namespace lockstep::trainer
