// pgbench as the reference on the benches' server: its arguments from a postgresql:// URL, its
// runs (through subprocess::run), its figures, and the script files it reads.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>
#include <system_error>

#include "bench/bench_support.h"
#include "subprocess/subprocess.h"

namespace runledger::bench {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex_value(text[i + 1]) >= 0 &&
        hex_value(text[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// Splits `text` at the first `separator`: (before, after), or (text, "") without one.
std::pair<std::string_view, std::string_view> split_first(std::string_view text, char separator) {
  const auto at = text.find(separator);
  if (at == std::string_view::npos) return {text, {}};
  return {text.substr(0, at), text.substr(at + 1)};
}

// "tps = 1234.5 (without initial connection time)": pgbench's figure that, like ours, leaves
// out connecting.
double parse_tps(const std::string& output) {
  constexpr std::string_view kPrefix = "tps = ";
  constexpr std::string_view kSuffix = "(without initial connection time)";
  std::size_t start = 0;
  while (start < output.size()) {
    const std::size_t end = std::min(output.find('\n', start), output.size());
    const std::string line = output.substr(start, end - start);
    if (line.starts_with(kPrefix) && line.find(kSuffix) != std::string::npos) {
      return std::strtod(line.c_str() + kPrefix.size(), nullptr);
    }
    start = end + 1;
  }
  throw std::runtime_error("no tps line in pgbench's output:\n" + output);
}

}  // namespace

ConnInfo parse_url(std::string_view url) {
  std::string_view rest = url;
  if (rest.starts_with("postgresql://")) {
    rest.remove_prefix(13);
  } else if (rest.starts_with("postgres://")) {
    rest.remove_prefix(11);
  } else {
    throw std::invalid_argument("not a postgresql:// URL (needed to run pgbench against it)");
  }
  rest = split_first(rest, '?').first;
  ConnInfo info;
  auto [authority, database] = split_first(rest, '/');
  info.database = percent_decode(database);
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) {
    const auto [user, password] = split_first(authority.substr(0, at), ':');
    info.user = percent_decode(user);
    info.password = percent_decode(password);
    authority.remove_prefix(at + 1);
  }
  // An IPv6 host is bracketed: [::1]:5432.
  const auto colon = authority.rfind(':');
  const bool has_port =
      colon != std::string_view::npos && authority.find(']', colon) == std::string_view::npos;
  std::string_view host = has_port ? authority.substr(0, colon) : authority;
  if (has_port) info.port = std::string(authority.substr(colon + 1));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  info.host = percent_decode(host);
  return info;
}

std::string url_without_password(std::string_view url) {
  const ConnInfo info = parse_url(url);
  return info.user + "@" + info.host + ":" + info.port + "/" + info.database;
}

Pgbench::Pgbench(std::filesystem::path bin_dir, ConnInfo target)
    : program_((bin_dir / "pgbench").string()), target_(std::move(target)) {}

void Pgbench::initialize() const {
  run({"-i", "-s", "1", "-q"});
}

double Pgbench::simple_update_tps(int clients, int seconds) const {
  const std::string c = std::to_string(clients);
  return parse_tps(run({"-N", "-c", c, "-j", c, "-T", std::to_string(seconds), "-n"}));
}

double Pgbench::script_tps(const std::filesystem::path& script_file, int clients,
                           int seconds) const {
  return script_tps(script_file, clients, seconds, {});
}

double Pgbench::script_tps(const std::filesystem::path& script_file, int clients, int seconds,
                           const std::vector<std::string>& options) const {
  const std::string c = std::to_string(clients);
  std::vector<std::string> argv{"-n", "-f", script_file.string(),   "-c", c, "-j",
                                c,    "-T", std::to_string(seconds)};
  argv.insert(argv.end(), options.begin(), options.end());
  return parse_tps(run(argv));
}

double Pgbench::first_statement_ms(const std::filesystem::path& script_file, int seconds) const {
  const std::string output =
      run({"-n", "-r", "-f", script_file.string(), "-T", std::to_string(seconds)});
  // After "statement latencies in milliseconds...": one line per command, its latency first.
  const auto header = output.find("statement latencies");
  if (header != std::string::npos) {
    const auto line = output.find('\n', header);
    if (line != std::string::npos) return std::stod(output.substr(line + 1));
  }
  throw std::runtime_error("no statement latencies in pgbench's output:\n" + output);
}

std::string Pgbench::run(const std::vector<std::string>& options) const {
  std::vector<std::string> argv{program_};
  argv.insert(argv.end(), options.begin(), options.end());
  if (!target_.host.empty()) argv.insert(argv.end(), {"-h", target_.host});
  if (!target_.port.empty()) argv.insert(argv.end(), {"-p", target_.port});
  if (!target_.user.empty()) argv.insert(argv.end(), {"-U", target_.user});
  argv.push_back(target_.database);
  subprocess::Spawn pgbench(argv);
  // The password travels in the environment: an argument would show in ps.
  if (!target_.password.empty()) pgbench.env = {{"PGPASSWORD", target_.password}};
  pgbench.output = subprocess::Output::capture;
  auto result = subprocess::run(pgbench);
  check_interrupted();
  if (!result.exit.success()) {
    throw std::runtime_error("pgbench ended with " + result.exit.to_string() + ":\n" +
                             result.output);
  }
  return std::move(result.output);
}

TempFile::TempFile(std::string_view name_prefix, std::string_view suffix,
                   std::string_view content) {
  std::string name = "/tmp/" + std::string(name_prefix) + "XXXXXX" + std::string(suffix);
  const int fd = mkstemps(name.data(), static_cast<int>(suffix.size()));
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "mkstemps " + name);
  path_ = name;
  std::size_t written = 0;
  while (written < content.size()) {
    const ssize_t n = write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      std::filesystem::remove(path_);
      throw std::system_error(error, std::generic_category(), "writing " + name);
    }
    written += static_cast<std::size_t>(n);
  }
  close(fd);
}

TempFile::~TempFile() {
  std::error_code ignored;
  std::filesystem::remove(path_, ignored);
}

}  // namespace runledger::bench
