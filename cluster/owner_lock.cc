#include "cluster/owner_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string>
#include <system_error>
#include <utility>

#include "errors/errors.h"

namespace runledger::cluster::detail {
namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// The pid the holder recorded, or null when it has not written it yet.
nlohmann::json recorded_pid(int fd) {
  char buffer[32] = {};
  const ssize_t n = pread(fd, buffer, sizeof buffer - 1, 0);
  long pid = 0;
  if (n <= 0 || std::from_chars(buffer, buffer + n, pid).ec != std::errc{}) return nullptr;
  return pid;
}

void record_own_pid(int fd, const std::filesystem::path& path) {
  const std::string text = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    throw_errno("writing " + path.string());
  }
}

}  // namespace

OwnerLock OwnerLock::acquire(const std::filesystem::path& root) {
  const auto path = root / "owner.lock";
  // O_CLOEXEC: a postmaster started from this process must not inherit (and so keep) the lock.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("opening " + path.string());
  OwnerLock lock(fd);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) throw_errno("locking " + path.string());
    const nlohmann::json pid = recorded_pid(fd);
    throw Conflict("the cluster root " + root.string() + " is owned by another live process" +
                       (pid.is_null() ? std::string() : " (pid " + pid.dump() + ")"),
                   {{"root", root.string()}, {"pid", pid}});
  }
  record_own_pid(fd, path);
  return lock;
}

OwnerLock::OwnerLock(OwnerLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

OwnerLock& OwnerLock::operator=(OwnerLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

OwnerLock::~OwnerLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace runledger::cluster::detail
