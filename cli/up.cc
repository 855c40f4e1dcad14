// `runledger up`: the foreground supervisor. It owns the embedded cluster (unless DATABASE_URL
// points elsewhere) and every process it starts; those die with it (PR_SET_PDEATHSIG), and
// Ctrl-C or SIGTERM stops them all, then the cluster.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/cli.h"
#include "cluster/cluster.h"
#include "migrations/migrations.h"

namespace runledger::cli {
namespace {

pid_t start_child(const std::vector<std::string>& argv, const std::string& url,
                  const sigset_t& original_mask) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // In the child: die with the supervisor, even after a kill -9 of it.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);
  sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  setenv("DATABASE_URL", url.c_str(), 1);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv("/proc/self/exe", args.data());
  _exit(127);
}

void write_private_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text << "\n";
  out.close();
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

}  // namespace

int up(const Args& args) {
  const auto root_flag = flag(args, "--root");
  const std::filesystem::path root = root_flag
                                         ? std::filesystem::path(*root_flag)
                                         : cluster::default_root(std::filesystem::current_path());

  // Signals are taken synchronously by sigtimedwait below; children get the original mask back.
  sigset_t handled, original;
  sigemptyset(&handled);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGCHLD);
  sigprocmask(SIG_BLOCK, &handled, &original);

  std::unique_ptr<cluster::EmbeddedCluster> db;
  std::string url;
  if (const char* external = std::getenv("DATABASE_URL"); external && *external) {
    url = external;
    spdlog::info("using DATABASE_URL; no embedded cluster");
  } else {
    cluster::Options options;
    options.root = root;
    db = std::make_unique<cluster::EmbeddedCluster>(options);
    db->start();
    url = db->url();
    write_private_file(root / "database_url", url);
    spdlog::info("embedded PostgreSQL on 127.0.0.1:{}, data in {}", db->port(), root.string());
  }
  migrations::apply(url);  // logs what it applies

  // Each child is restarted when it exits, with a backoff of its own.
  struct Child {
    std::vector<std::string> argv;
    pid_t pid = -1;
    std::chrono::seconds backoff{1};
  };
  std::vector<Child> children = {{{"runledger", "service"}}, {{"runledger", "coordinator"}}};
  for (auto& c : children) {
    c.pid = start_child(c.argv, url, original);
    spdlog::info("supervising {} (pid {})", c.argv[1], c.pid);
  }
  spdlog::info("Ctrl-C stops everything");

  for (;;) {
    siginfo_t info;
    const int sig = sigwaitinfo(&handled, &info);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (sig != SIGCHLD) continue;
    int status = 0;
    while (const pid_t done = waitpid(-1, &status, WNOHANG)) {
      if (done < 0) break;
      for (auto& c : children) {
        if (c.pid != done) continue;
        spdlog::warn("{} exited ({}); restarting in {} s", c.argv[1],
                     WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                                       : "signal " + std::to_string(WTERMSIG(status)),
                     c.backoff.count());
        std::this_thread::sleep_for(c.backoff);
        c.backoff = std::min(c.backoff * 2, std::chrono::seconds(30));
        c.pid = start_child(c.argv, url, original);
      }
    }
  }

  spdlog::info("stopping");
  for (const auto& c : children) kill(c.pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  for (const auto& c : children) {
    int status = 0;
    while (waitpid(c.pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (db) {
    std::filesystem::remove(root / "database_url");
    db->stop();
  }
  spdlog::info("stopped");
  return 0;
}

}  // namespace runledger::cli
