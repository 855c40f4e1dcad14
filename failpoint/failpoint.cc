#include "failpoint/failpoint.h"

#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

#include "errors/errors.h"

namespace runledger::failpoint {
namespace detail {
std::atomic<int> armed_count{0};
}

namespace {

struct Point {
  Action action;
  std::uint64_t nth;
  std::uint64_t hits = 0;
  int paused = 0;
  bool released = false;
};

struct Registry {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Point, std::less<>> points;
};

Registry& registry() {
  static Registry r;
  return r;
}

void recount(Registry& r) {
  detail::armed_count.store(static_cast<int>(r.points.size()));
}

}  // namespace

void arm(const std::string& name, Action action, std::uint64_t nth) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.points[name] = Point{action, nth == 0 ? 1 : nth};
  recount(r);
}

void disarm(const std::string& name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.points.erase(name);
  recount(r);
  r.cv.notify_all();
}

void disarm_all() {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.points.clear();
  recount(r);
  r.cv.notify_all();
}

void arm_from_environment() {
  const char* spec = std::getenv("RUNLEDGER_FAILPOINTS");
  if (spec == nullptr) return;
  std::string_view rest(spec);
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      throw InvalidArgument(
          "RUNLEDGER_FAILPOINTS: expected name=kill[@n] or name=pause[@n], got '" +
          std::string(item) + "'");
    }
    std::string_view action = item.substr(eq + 1);
    std::uint64_t nth = 1;
    if (const auto at = action.find('@'); at != std::string_view::npos) {
      const std::string_view count = action.substr(at + 1);
      const auto [end, ec] = std::from_chars(count.data(), count.data() + count.size(), nth);
      if (ec != std::errc() || end != count.data() + count.size() || nth == 0) {
        throw InvalidArgument("RUNLEDGER_FAILPOINTS: expected a positive count after '@', got '" +
                              std::string(item) + "'");
      }
      action = action.substr(0, at);
    }
    if (action != "kill" && action != "pause") {
      throw InvalidArgument("RUNLEDGER_FAILPOINTS: expected kill or pause, got '" +
                            std::string(action) + "'");
    }
    arm(std::string(item.substr(0, eq)), action == "kill" ? Action::kill : Action::pause, nth);
  }
}

int paused_at(const std::string& name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.points.find(name);
  return it == r.points.end() ? 0 : it->second.paused;
}

bool wait_until_paused(const std::string& name, std::chrono::milliseconds timeout) {
  auto& r = registry();
  std::unique_lock lock(r.mu);
  return r.cv.wait_for(lock, timeout, [&] {
    auto it = r.points.find(name);
    return it != r.points.end() && it->second.paused > 0;
  });
}

void release(const std::string& name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  if (auto it = r.points.find(name); it != r.points.end()) {
    it->second.released = true;
    // Keep the entry while threads are still paused on it; they erase nothing, so disarm here
    // only when no one waits, else the last one to leave does.
    if (it->second.paused == 0) r.points.erase(it);
  }
  recount(r);
  r.cv.notify_all();
}

std::uint64_t hits(const std::string& name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.points.find(name);
  return it == r.points.end() ? 0 : it->second.hits;
}

namespace detail {

void hit_slow(std::string_view name) {
  auto& r = registry();
  std::unique_lock lock(r.mu);
  auto it = r.points.find(name);
  if (it == r.points.end() || it->second.released) return;
  Point& p = it->second;
  if (++p.hits < p.nth) return;
  if (p.action == Action::kill) {
    // A real crash: nothing below this line may run, not even buffered log flushes.
    ::kill(::getpid(), SIGKILL);
    ::_exit(137);
  }
  ++p.paused;
  r.cv.notify_all();
  const std::string key(name);
  r.cv.wait(lock, [&] {
    auto again = r.points.find(key);
    return again == r.points.end() || again->second.released;
  });
  auto again = r.points.find(key);
  if (again != r.points.end() && --again->second.paused == 0 && again->second.released) {
    r.points.erase(again);
    recount(r);
  }
}

}  // namespace detail
}  // namespace runledger::failpoint
