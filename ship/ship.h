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
//    ThreadOutbox::messages() reads a thread's messages newest first (created_at, then id), a
//    page at a time (paging/paging.h).
//  - Policy: a requester may do what it was granted (requester_capabilities); nothing else.
//  - Failures of git are std::runtime_error with git's output; bad arguments InvalidArgument.
//
// Thread-safety: all classes are thread-safe (each call borrows its own pooled connection; git
// runs as child processes, and the ref update is atomic).
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/coordinator.h"
#include "ledger/ledger.h"
#include "paging/paging.h"
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
  // Records a review's approval (idempotent). Conflict when the change is no longer open.
  virtual void approve(std::int64_t id) = 0;
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
  void approve(std::int64_t id) override;
  // Open change requests approved at least `delay` ago: what the merge actor merges.
  std::vector<ChangeRequest> approved_open(std::chrono::milliseconds delay);

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
  // InvalidArgument for a cursor another listing made (or none made), or a limit outside 1-1000.
  paging::Page<ThreadMessage> messages(const std::string& thread_key,
                                       const paging::PageRequest& page);

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

// ---------------------------------------------------------------------------------------------
// The ship workflow: from a chat request to a deployed change.
//
// Stages, each a step and each safe to retry: authorize (before every spawn: the requester needs
// agent:run:coding, or agent:run:review for a review; a refusal is posted and the pipeline
// ends), code (a coding child run pushes branch ship-<hash of the instance>), pr-check (the one
// open change request of that branch, edited if present), review rounds (a review child returns
// {"verdict": "approve" | "changes"}; on changes a fix child pushes again, up to review_rounds),
// approve, merge wait (a "merged" event {"change_request": id}, else a poll of the forge every
// merge_poll, at most merge_timeout and max_merge_polls polls), deploy, and a message to the thread
// at every stage (each posted once). A child that ended other than finished, or that outlived its
// budget plus child_wait_margin, ends the pipeline with a message naming its status.
//
// Children are ordinary ledger runs (depth 1) with profile {"kind", "script"}, scripts for the
// reference bot (bot/bot.h): the coding script sets up the branch, writes SHIP.md, commits and
// pushes, and re-checks the remote (pushing only if its commit is absent) when its push comes back
// synthetic; the review script returns the verdict the input scripted for its round. Their budgets
// are clipped to what remains of the pipeline's declared budget; their thread key is the chat
// thread's plus the instance and step, so the person can keep chatting meanwhile.
//
// Input: {"thread", "message", "requester", "request", optional "review_verdicts": ["changes",
// "approve", ...] (default all approve), optional "budget": {"wall_s", "max_steps"}}.
// Output: {"status": "deployed" | "refused" | "changes_requested" | "child_<status>" |
// "merge_timeout" | "closed", ...}.

struct ShipOptions {
  std::filesystem::path repository;  // the bare repository children push to
  std::string main_branch = "main";
  int review_rounds = 2;
  std::chrono::milliseconds merge_poll{10 * 60 * 1000};
  std::chrono::milliseconds merge_timeout{7LL * 24 * 3600 * 1000};
  // Each poll is two steps of an execution capped at 10,000 (coordinator::Options::max_steps):
  // the merge wait ends after min(merge_timeout / merge_poll, max_merge_polls) polls.
  int max_merge_polls = 4000;
  ledger::Budget pipeline_budget{4 * 3600, 400};  // when the input declares none
  ledger::Budget child_budget{1800, 100};         // before clipping
  std::chrono::seconds child_wait_margin{60};
};

class ShipWorkflow final : public coordinator::Workflow {
 public:
  ShipWorkflow(ShipOptions options, Forge& forge, Deployer& deployer, ThreadOutbox& outbox,
               Policy& policy, ledger::Ledger& ledger);
  coordinator::json run(const coordinator::json& input, coordinator::Step& step) override;

 private:
  ShipOptions options_;
  Forge& forge_;
  Deployer& deployer_;
  ThreadOutbox& outbox_;
  Policy& policy_;
  ledger::Ledger& ledger_;
};

// The instance id of the pipeline a chat message starts: the same message never starts two.
InstanceId ship_instance_id(const std::string& thread, const std::string& message);

}  // namespace runledger::ship
