// abx::UniqueFd: the one owner type of a file descriptor, in every module.
//
// Every descriptor abx opens is O_CLOEXEC and held by a UniqueFd, so a descriptor reaches a child
// process only when passed on purpose. Moving transfers ownership; destruction closes. close(2) is
// never retried on EINTR (Linux releases the descriptor even when close reports EINTR).
#pragma once

#include <unistd.h>

#include <utility>

namespace abx {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }

  // Gives up ownership without closing.
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace abx
