#include "cluster/cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "cluster/owner_lock.h"
#include "cluster/process.h"
#include "ids/ids.h"
#include "pg/pg.h"

namespace runledger::cluster {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kUser = "runledger";
constexpr std::string_view kSettingsFile = "runledger.conf";
constexpr std::string_view kIncludeLine = "include 'runledger.conf'";

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// FNV-1a (64 bit): unlike std::hash it is the same in every build, so a directory keeps
// mapping to the same root across upgrades.
std::uint64_t stable_hash(std::string_view text) {
  std::uint64_t hash = 14695981039346656037ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ULL;
  }
  return hash;
}

std::string hex(std::uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016" PRIx64, value);
  return buffer;
}

std::optional<int> major_version(const std::string& name) {
  int version = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), version);
  if (ec != std::errc{} || end != name.data() + name.size()) return std::nullopt;
  return version;
}

// The kernel's pick of a free port. Another process may take it before the server binds it;
// pg_ctl start then fails loudly rather than sharing a port.
int pick_free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw_errno("socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int error = errno;
  close(fd);
  if (!ok) {
    errno = error;
    throw_errno("picking a free port on 127.0.0.1");
  }
  return ntohs(address.sin_port);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

// Written to a temporary name and renamed, so a crash never leaves a half-written file.
void write_private_file(const fs::path& path, const std::string& content) {
  const fs::path temporary = path.string() + ".tmp";
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw_errno("creating " + temporary.string());
  const bool ok =
      write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
      fsync(fd) == 0;
  const int error = errno;
  close(fd);
  if (!ok) {
    errno = error;
    throw_errno("writing " + temporary.string());
  }
  fs::rename(temporary, path);
}

std::string settings_text(const Options& options, int port) {
  const std::string durable = options.durable ? "on" : "off";
  std::ostringstream out;
  out << "# Rewritten by runledger at each start: edits here are lost.\n"
      << "listen_addresses = '127.0.0.1'\n"
      << "port = " << port << "\n"
      << "unix_socket_directories = ''\n"
      << "max_connections = " << options.max_connections << "\n"
      << "fsync = " << durable << "\n"
      << "synchronous_commit = " << durable << "\n"
      << "full_page_writes = " << durable << "\n";
  return out.str();
}

}  // namespace

fs::path default_root(const fs::path& dir) {
  const fs::path absolute = fs::weakly_canonical(fs::absolute(dir));
  if (geteuid() != 0) return absolute / ".runledger" / "pg";
  return fs::path("/var/lib/runledger") / hex(stable_hash(absolute.string()));
}

fs::path find_bin_dir() {
  const fs::path installs = "/usr/lib/postgresql";
  std::optional<int> best;
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(installs, ignored)) {
    const auto version = major_version(entry.path().filename().string());
    const fs::path bin = entry.path() / "bin";
    if (version && *version >= 15 && (!best || *version > *best) && fs::exists(bin / "initdb") &&
        fs::exists(bin / "pg_ctl")) {
      best = version;
    }
  }
  if (!best) {
    throw std::runtime_error("no PostgreSQL 15 or newer found: searched " + installs.string() +
                             "/*/bin for initdb and pg_ctl");
  }
  return installs / std::to_string(*best) / "bin";
}

struct EmbeddedCluster::State {
  Options options;
  fs::path bin_dir;
  std::optional<detail::OsUser> server_user;
  std::string password;
  int port = 0;
  // Engaged exactly while this object runs the server.
  std::optional<detail::OwnerLock> lock;

  fs::path pgdata() const { return options.root / "pgdata"; }
  std::string tool(std::string_view name) const { return (bin_dir / name).string(); }
  std::string timeout() const { return std::to_string(options.timeout.count()); }

  std::string url(std::string_view database) const {
    return "postgresql://" + std::string(kUser) + ":" + pg::percent_encode(password) +
           "@127.0.0.1:" + std::to_string(port) + "/" + pg::percent_encode(database);
  }

  std::string run(const std::vector<std::string>& argv) const {
    return detail::run_checked(argv, options.root, server_user);
  }

  void prepare_root() const;
  void load_password();
  void init_pgdata() const;
  void include_settings() const;
  bool postmaster_alive() const;
  void stop_leftover_postmaster() const;
  void write_settings() const;
  void start_server() const;
  std::vector<std::string> stop_command() const;
  void stop_server() const;
  void ensure_database() const;
};

// The server user must be able to create pgdata/ and server.log here; nobody else needs in.
void EmbeddedCluster::State::prepare_root() const {
  detail::give_to(server_user, options.root);
  fs::permissions(options.root, fs::perms::owner_all);
}

void EmbeddedCluster::State::load_password() {
  const fs::path path = options.root / "password";
  if (!fs::exists(path)) write_private_file(path, random_uuid() + "\n");
  // initdb reads it as --pwfile, running as the server user.
  detail::give_to(server_user, path);
  password = first_line(read_text(path));
}

void EmbeddedCluster::State::init_pgdata() const {
  if (fs::exists(pgdata() / "PG_VERSION")) return;
  spdlog::info("initdb {}", pgdata().string());
  run({tool("initdb"), "-D", pgdata().string(), "-U", std::string(kUser), "--auth=scram-sha-256",
       "--pwfile=" + (options.root / "password").string(), "-E", "UTF8", "--locale=C.UTF-8"});
}

// Checked at every start rather than once after initdb, so a crash in between cannot leave a
// server that ignores our settings (and listens on the default socket and port).
void EmbeddedCluster::State::include_settings() const {
  const fs::path conf = pgdata() / "postgresql.conf";
  std::istringstream lines(read_text(conf));
  for (std::string line; std::getline(lines, line);) {
    if (line == kIncludeLine) return;
  }
  std::ofstream out(conf, std::ios::app);
  out << "\n# runledger's server settings, rewritten at each start\n" << kIncludeLine << "\n";
  if (!out.flush()) throw std::runtime_error("cannot append to " + conf.string());
}

bool EmbeddedCluster::State::postmaster_alive() const {
  const auto status =
      detail::run({tool("pg_ctl"), "status", "-D", pgdata().string()}, options.root, server_user);
  constexpr int kNotRunning = 3;  // also for a stale pid file, which pg_ctl start copes with
  const int code = status.exit.shell_status();
  if (code != 0 && code != kNotRunning) {
    throw std::runtime_error("pg_ctl status failed (" + status.exit.to_string() +
                             "): " + status.output);
  }
  return code == 0;
}

// A server left by a killed owner is stopped, never adopted: its port and settings are the dead
// owner's.
void EmbeddedCluster::State::stop_leftover_postmaster() const {
  const fs::path pid_file = pgdata() / "postmaster.pid";
  if (!fs::exists(pid_file) || !postmaster_alive()) return;
  spdlog::info("stopping leftover postmaster pid {}", first_line(read_text(pid_file)));
  const auto stopped = detail::run(stop_command(), options.root, server_user);
  // pg_ctl stop fails when the postmaster dies without removing its pid file (it was killed
  // too, just before or meanwhile); all that matters here is that it is gone.
  if (!stopped.exit.success() && postmaster_alive()) {
    throw std::runtime_error("cannot stop the leftover postmaster: " + stopped.output);
  }
}

void EmbeddedCluster::State::write_settings() const {
  const fs::path path = pgdata() / kSettingsFile;
  std::ofstream out(path, std::ios::trunc);
  out << settings_text(options, port);
  if (!out.flush()) throw std::runtime_error("cannot write " + path.string());
  detail::give_to(server_user, path);
}

void EmbeddedCluster::State::start_server() const {
  run({tool("pg_ctl"), "start", "-D", pgdata().string(), "-l",
       (options.root / "server.log").string(), "-w", "-t", timeout()});
  spdlog::info("started on port {}", port);
}

std::vector<std::string> EmbeddedCluster::State::stop_command() const {
  return {tool("pg_ctl"), "stop", "-D", pgdata().string(), "-m", "fast", "-w", "-t", timeout()};
}

void EmbeddedCluster::State::stop_server() const {
  run(stop_command());
}

void EmbeddedCluster::State::ensure_database() const {
  pqxx::connection connection{url("postgres")};
  // CREATE DATABASE cannot run inside a transaction block.
  pqxx::nontransaction tx{connection};
  const auto found =
      tx.exec_params("SELECT 1 FROM pg_database WHERE datname = $1", options.database);
  if (found.empty()) tx.exec0("CREATE DATABASE " + connection.quote_name(options.database));
}

EmbeddedCluster::EmbeddedCluster(Options options) : state_(std::make_unique<State>()) {
  if (options.root.empty()) options.root = default_root(fs::current_path());
  options.root = fs::absolute(options.root).lexically_normal();
  state_->options = std::move(options);
  state_->bin_dir = find_bin_dir();
  state_->server_user = detail::server_user();
}

EmbeddedCluster::~EmbeddedCluster() {
  try {
    stop();
  } catch (const std::exception& e) {
    spdlog::error("stopping the cluster at {} failed: {}", root().string(), e.what());
  }
}

void EmbeddedCluster::start() {
  if (running()) return;
  State& s = *state_;
  fs::create_directories(s.options.root);
  auto lock = detail::OwnerLock::acquire(s.options.root);
  s.prepare_root();
  s.load_password();
  s.init_pgdata();
  s.include_settings();
  s.stop_leftover_postmaster();
  s.port = s.options.port != 0 ? s.options.port : pick_free_port();
  s.write_settings();
  s.start_server();
  s.lock = std::move(lock);
  try {
    s.ensure_database();
  } catch (...) {
    stop();  // start() either succeeds or leaves nothing running
    throw;
  }
}

void EmbeddedCluster::stop() {
  if (!running()) return;
  State& s = *state_;
  // Released when this returns or throws; held until the root is gone so that no new owner
  // can start in a root being deleted.
  const auto lock = std::exchange(s.lock, std::nullopt);
  s.stop_server();
  if (s.options.remove_on_stop) fs::remove_all(s.options.root);
}

bool EmbeddedCluster::running() const {
  return state_->lock.has_value();
}

std::string EmbeddedCluster::url() const {
  return url(state_->options.database);
}

std::string EmbeddedCluster::url(std::string_view database) const {
  if (state_->port == 0) throw std::logic_error("EmbeddedCluster::url() before start()");
  return state_->url(database);
}

int EmbeddedCluster::port() const {
  return state_->port;
}

const fs::path& EmbeddedCluster::root() const {
  return state_->options.root;
}

fs::path EmbeddedCluster::bin_dir() const {
  return state_->bin_dir;
}

}  // namespace runledger::cluster
