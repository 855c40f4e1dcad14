// `runledger serve`: the HTTP/JSON API (server/server.h) on DATABASE_URL, or on the embedded
// cluster under --root. SIGTERM or SIGINT: stop accepting, finish requests in flight within the
// grace period, exit 0.
#include <signal.h>
#include <spdlog/spdlog.h>

#include "cli/cli.h"
#include "migrations/migrations.h"
#include "server/server.h"

namespace runledger::cli {
namespace {

// "127.0.0.1:8080" -> address and port.
std::pair<std::string, std::uint16_t> listen_address(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw InvalidArgument("--listen: expected ADDRESS:PORT, e.g. 127.0.0.1:8080",
                          {{"field", "--listen"}});
  }
  std::string address = text.substr(0, colon);
  if (address.size() > 2 && address.front() == '[' && address.back() == ']') {
    address = address.substr(1, address.size() - 2);  // [::1]:8080
  }
  const int port = parse_integer(text.substr(colon + 1), "--listen's port", {0, 65535});
  return {address, static_cast<std::uint16_t>(port)};
}

int serve(const Arguments& args) {
  // Taken synchronously by sigwait below, in every thread the server starts.
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);

  server::Options options;
  std::tie(options.address, options.port) = listen_address(args.value("--listen"));
  options.json_log = args.value("--log-format") == "json";
  if (args.value("--log-format") != "json" && args.value("--log-format") != "text") {
    throw InvalidArgument("--log-format: text or json", {{"field", "--log-format"}});
  }
  if (const auto cert = args.text("--tls-cert")) options.tls_cert = *cert;
  if (const auto key = args.text("--tls-key")) options.tls_key = *key;
  if (const auto ms = args.integer("--lease-ms")) {
    options.ledger.lease_ttl = std::chrono::milliseconds(*ms);
  }
  options.settlement.max_takeovers_without_progress = args.integer("--max-takeovers").value();
  options.grace = std::chrono::milliseconds(args.integer("--grace-ms").value());
  options.database_threads = args.integer("--database-threads").value();
  if (options.database_threads > 256) {
    throw InvalidArgument("--database-threads: at most 256", {{"field", "--database-threads"}});
  }
  if (const auto file = args.text("--effect-classes")) {
    options.effect_classes = settlement::EffectClasses::load(*file);
  }

  const std::filesystem::path root = command_root(args.text("--root"));
  AttachedDatabase database(root);
  migrations::apply(database.url());
  pg::Pool::Options pool;
  pool.url = database.url();
  pool.size = options.database_threads + 2;  // the threads', and the health checks' spare
  pg::Pool connections(pool);
  server::Server http(connections, database.url(), options);
  http.start();
  const std::string scheme = options.tls_cert ? "https" : "http";
  const std::string api_url = scheme + "://" + options.address + ":" + std::to_string(http.port());
  spdlog::info("serving the API on {}", api_url);
  // Where clients of this root find it (the port may have been picked at start).
  std::filesystem::create_directories(root);
  write_private_file(root / "api_url", api_url);

  int sig = 0;
  sigwait(&handled, &sig);
  spdlog::info("signal {}: stopping (grace {} ms)", sig, options.grace.count());
  http.stop();
  std::error_code ignored;
  std::filesystem::remove(root / "api_url", ignored);
  spdlog::info("stopped");
  return 0;
}

}  // namespace

Command serve_command() {
  const server::Options defaults;
  return {
      .name = "serve",
      .summary = "serve the HTTP/JSON API for bots (README: The HTTP API)",
      .description =
          "On DATABASE_URL, else on the embedded cluster under --root (started here, like "
          "`up`; its URL is written to <root>/database_url for other commands). It migrates "
          "first, and writes the API's URL to <root>/api_url. SIGTERM or SIGINT stops accepting, "
          "lets requests in flight finish within "
          "--grace-ms and exits 0. A log line per request goes to stderr.",
      .options =
          {
              {.name = "--listen",
               .value = "ADDRESS:PORT",
               .help = "where to listen (port 0: any free port, logged)",
               .fallback = "127.0.0.1:8080"},
              {.name = "--root",
               .value = "DIR",
               .help = "the embedded cluster's directory when DATABASE_URL is not set (default "
                       "as `up`)"},
              {.name = "--tls-cert",
               .value = "FILE",
               .help = "serve HTTPS with this PEM certificate chain",
               .needs = {"--tls-key"}},
              {.name = "--tls-key",
               .value = "FILE",
               .help = "the PEM private key of --tls-cert",
               .needs = {"--tls-cert"}},
              {.name = "--log-format",
               .value = "FORMAT",
               .help = "text or json (JSON lines)",
               .fallback = "text"},
              {.name = "--effect-classes",
               .value = "FILE",
               .help = "tool effect classes, a class and its glob patterns per line, e.g. "
                       "`pure: read_file grep_*`; unlisted tools are unsafe"},
              {.name = "--lease-ms",
               .value = "N",
               .help = "the lease claims and heartbeats grant, in milliseconds (default " +
                       std::to_string(ledger::Options{}.lease_ttl.count()) + ")",
               .integer = kPositive},
              {.name = "--max-takeovers",
               .value = "N",
               .help = "claims of a run without a completed step after which settle interrupts it",
               .integer = kPositive,
               .fallback = std::to_string(defaults.settlement.max_takeovers_without_progress)},
              {.name = "--grace-ms",
               .value = "N",
               .help = "how long requests in flight may take to finish after SIGTERM",
               .integer = kPositive,
               .fallback = std::to_string(defaults.grace.count())},
              {.name = "--database-threads",
               .value = "N",
               .help = "threads (and pooled connections) for database work, at most 256",
               .integer = kPositive,
               .fallback = std::to_string(defaults.database_threads)},
          },
      .run = serve,
  };
}

}  // namespace runledger::cli
