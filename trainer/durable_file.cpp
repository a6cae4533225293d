#include "durable_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace lockstep::trainer {
namespace {

int sys_open(const char* path, int flags, mode_t mode) { return ::open(path, flags, mode); }

const char* errno_name(int err) {
  switch (err) {
    case ENOSPC: return "ENOSPC";
    case EDQUOT: return "EDQUOT";
    case EIO: return "EIO";
    case EROFS: return "EROFS";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOENT: return "ENOENT";
    case ESTALE: return "ESTALE";
    case EFBIG: return "EFBIG";
    default: return nullptr;
  }
}

// What a file of mode `mode` is, in the words of an error.
std::string what_is(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "a file that is not a regular file";
}

std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

FileIo default_file_io() { return {sys_open, ::write, ::fsync, ::close}; }

FileIo& file_io() {
  static FileIo io = default_file_io();
  return io;
}

std::string storage_error_text(int err) {
  std::string text = std::strerror(err);
  if (const char* name = errno_name(err)) text += std::string(" (") + name + ")";
  if (err == ENOSPC || err == EDQUOT)
    text += ": the checkpoint volume is full or over its quota; free space on it, give spec.checkpoint.path a larger "
            "volume, or lower spec.checkpoint.keep";
  else if (err == EIO || err == ESTALE)
    text += ": the storage failed to keep the data (on NFS, the server refused or lost a write)";
  return text;
}

namespace {

// See Note [Temporaries on a shared volume]: `tmp` made anew for this write, never opened through
// whatever is at its name; a regular file there (a temporary a killed writer of the same pid
// left) is removed first, once.
int open_temporary(const std::string& tmp) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = file_io().open(tmp.c_str(), kFlags, 0644);
  if (fd < 0 && errno == EEXIST) {
    struct stat st {};
    if (::lstat(tmp.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      throw std::runtime_error("checkpoint: cannot create " + tmp + ": " + what_is(st.st_mode) +
                               " is in its place (put there by another pod that shares the checkpoint volume?); it is "
                               "not followed, and this checkpoint is not written: remove it, and give "
                               "spec.checkpoint.path a volume only this job's pods can write");
    if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) {
      const int err = errno;
      throw std::runtime_error("checkpoint: cannot remove " + tmp + ", a temporary an interrupted write left: " +
                               storage_error_text(err));
    }
    fd = file_io().open(tmp.c_str(), kFlags, 0644);
  }
  if (fd < 0) {
    const int err = errno;
    throw std::runtime_error("checkpoint: cannot create " + tmp + ": " + storage_error_text(err) +
                             (err == EEXIST || err == ELOOP
                                  ? "; something was put in its place as it was made (another pod that shares the "
                                    "checkpoint volume?): it is not followed, and this checkpoint is not written"
                                  : ""));
  }
  return fd;
}

}  // namespace

DurableFile::DurableFile(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp-" + std::to_string(::getpid())), fd_(open_temporary(tmp_)) {}

DurableFile::~DurableFile() {
  if (committed_) return;
  if (fd_ >= 0) file_io().close(fd_);
  ::unlink(tmp_.c_str());
}

void DurableFile::write(const void* data, size_t size) noexcept {
  if (error_ != 0) return;
  sum_.update(static_cast<const unsigned char*>(data), size);
  size_ += size;
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = file_io().write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = n < 0 ? errno : ENOSPC;  // write(2) returns 0 only when nothing more fits
      failed_at_ = "write";
      return;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void DurableFile::fail(const std::string& what, int err) {
  throw std::runtime_error("checkpoint: " + what + " " + path_ + " failed: " + storage_error_text(err) +
                           "; it is not used, and the previous checkpoints are kept");
}

uint64_t DurableFile::commit() {
  if (error_ != 0) fail(failed_at_ + " of", error_);
  if (file_io().fsync(fd_) != 0) fail("fsync of", errno);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);  // the verifying re-read goes to the storage
  const int fd = fd_;
  fd_ = -1;
  if (file_io().close(fd) != 0) fail("close of", errno);  // NFS reports a deferred write error here too
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename into", errno);
  committed_ = true;
  // The rename itself must survive a crash. A directory that cannot be fsynced (EINVAL: some
  // file systems have no such operation) is taken as is.
  const std::string dir = parent_of(path_);
  const int dfd = file_io().open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (dfd < 0) fail("opening the directory of", errno);
  const int synced = file_io().fsync(dfd), sync_err = errno;
  const int closed = file_io().close(dfd), close_err = errno;
  if (synced != 0 && sync_err != EINVAL) fail("fsync of the directory of", sync_err);
  if (closed != 0) fail("close of the directory of", close_err);
  return size_;
}

void write_text_durably(const std::string& path, const std::string& text) {
  DurableFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace lockstep::trainer
