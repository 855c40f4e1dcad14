// The ship pipeline's ports and their local implementations: the forge (branches, change
// requests, merges), the deployer, the chat thread outbox, and the requester policy.
//
// Contract:
//  - LocalForge works on a real bare git repository: branch heads are read from it, a change
//    request is a row pointing at one of its branches (at most one open per branch:
//    open_or_update() edits the open one, never opens a second), and merge() makes a real merge
//    commit on the main branch (compare-and-swap on the ref). merge() is idempotent: a change
//    request already merged, or whose branch is already in main, is recorded and not merged again.
//  - LocalDeployer deploys a commit by extracting its tree into <root>/<sha> and pointing
//    <root>/current at it; deploy() is idempotent on its key (the same key returns the first
//    deploy, whatever sha it is asked for later).
//  - ThreadOutbox::post() posts a message once per (thread, dedupe key): a repeat returns false
//    and changes nothing.
//  - Policy: a requester may do what it was granted (requester_capabilities); nothing else.
//  - Failures of git are std::runtime_error with git's output; bad arguments InvalidArgument.
//
// Thread-safety: all classes are thread-safe (each call borrows its own pooled connection; git
// runs as child processes, and the ref update is atomic).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "pg/pg.h"

namespace runledger::ship {

enum class ChangeState { open, merged, closed };
std::string_view to_string(ChangeState state);

struct ChangeRequest {
  std::int64_t id = 0;
  std::string repository;
  std::string branch;
  std::string title;
  std::string body;
  ChangeState state = ChangeState::open;
  std::optional<std::string> merge_sha;
};

class Forge {
 public:
  virtual ~Forge() = default;
  // The branch's head commit; nullopt when the branch does not exist.
  virtual std::optional<std::string> branch_head(const std::string& branch) = 0;
  // The open change request for `branch`, edited to `title`/`body`, or a new one; `created`
  // says which. InvalidArgument when the branch does not exist.
  struct Opened {
    ChangeRequest change;
    bool created;
  };
  virtual Opened open_or_update(const std::string& branch, const std::string& title,
                                const std::string& body) = 0;
  virtual std::optional<ChangeRequest> find_open(const std::string& branch) = 0;
  virtual ChangeRequest get(std::int64_t id) = 0;  // NotFound
  // Merges the change request's branch into main; returns the recorded change (merged).
  virtual ChangeRequest merge(std::int64_t id) = 0;
};

class LocalForge final : public Forge {
 public:
  // `repository`: a bare git repository; `main_branch`: the branch merges go to.
  LocalForge(pg::Pool& pool, std::filesystem::path repository, std::string main_branch = "main");

  std::optional<std::string> branch_head(const std::string& branch) override;
  Opened open_or_update(const std::string& branch, const std::string& title,
                        const std::string& body) override;
  std::optional<ChangeRequest> find_open(const std::string& branch) override;
  ChangeRequest get(std::int64_t id) override;
  ChangeRequest merge(std::int64_t id) override;

  const std::filesystem::path& repository() const { return repository_; }

 private:
  pg::Pool& pool_;
  std::filesystem::path repository_;
  std::string main_branch_;
};

struct Deploy {
  std::string key;
  std::string sha;
  std::filesystem::path path;
  bool created;  // false: the key was deployed before; this is that deploy
};

class Deployer {
 public:
  virtual ~Deployer() = default;
  virtual Deploy deploy(const std::string& key, const std::string& sha) = 0;
};

class LocalDeployer final : public Deployer {
 public:
  // Deploys commits of the bare `repository` under `root`.
  LocalDeployer(pg::Pool& pool, std::filesystem::path repository, std::filesystem::path root);
  Deploy deploy(const std::string& key, const std::string& sha) override;

 private:
  pg::Pool& pool_;
  std::filesystem::path repository_;
  std::filesystem::path root_;
};

struct ThreadMessage {
  std::int64_t id = 0;
  std::string thread_key;
  std::string dedupe_key;
  std::string body;
  std::string created_at;
};

class ThreadOutbox {
 public:
  explicit ThreadOutbox(pg::Pool& pool);
  // True when posted now; false when (thread, dedupe_key) was posted before.
  bool post(const std::string& thread_key, const std::string& dedupe_key, const std::string& body);
  std::vector<ThreadMessage> messages(const std::string& thread_key);

 private:
  pg::Pool& pool_;
};

class Policy {
 public:
  explicit Policy(pg::Pool& pool);
  bool allows(const std::string& requester, const std::string& capability);
  void grant(const std::string& requester, const std::string& capability);
  void revoke(const std::string& requester, const std::string& capability);

 private:
  pg::Pool& pool_;
};

}  // namespace runledger::ship
