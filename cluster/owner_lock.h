// Private to the cluster module: the exclusive ownership of a cluster root.
//
// An flock on <root>/owner.lock, held through an open descriptor: the kernel drops it when the
// holder exits however it exits, so a `kill -9`'d owner never blocks the next one. The holder's
// pid is written into the file only so that a refused process can name it.
#pragma once

#include <filesystem>

namespace runledger::cluster::detail {

class OwnerLock {
 public:
  // Throws runledger::Conflict naming the holder's pid when another open lock holds the root.
  static OwnerLock acquire(const std::filesystem::path& root);

  OwnerLock(OwnerLock&& other) noexcept;
  OwnerLock& operator=(OwnerLock&& other) noexcept;
  ~OwnerLock();

 private:
  explicit OwnerLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace runledger::cluster::detail
