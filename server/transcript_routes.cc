// The transcript over HTTP: appends (JSON with base64, or raw bytes), pages of entries or their
// live tail (Server-Sent Events), one entry's bytes, and the chain check.
#include <algorithm>
#include <cctype>

#include "digest/digest.h"
#include "errors/errors.h"
#include "server/context.h"
#include "server/routes.h"
#include "timestamps/timestamps.h"
#include "wire/wire.h"

namespace runledger::server {
namespace {

// A page of entries stops growing past this many body bytes (it always holds one entry).
constexpr std::size_t kPageBytes = 8 * kMiB;

struct AppendCall {
  Generation generation;
  transcript::EntryKind kind;
  std::optional<std::int64_t> expected_seq;
  std::optional<StepNo> step;
  std::string body;
};

// Raw: the body is the entry; its fields travel in the query.
AppendCall read_raw_append(const Call& call) {
  only_parameters(call, {"generation", "kind", "step_no", "expected_seq"});
  const auto generation = integer_parameter(call, "generation", 1, INT64_MAX);
  const auto kind = call.request.parameter("kind");
  if (!generation) throw InvalidArgument("generation: required", {{"field", "generation"}});
  if (!kind) throw InvalidArgument("kind: required", {{"field", "kind"}});
  AppendCall out{Generation(*generation), transcript::parse_entry_kind(*kind),
                 integer_parameter(call, "expected_seq", 1, INT64_MAX), std::nullopt,
                 call.request.body};
  if (auto step = integer_parameter(call, "step_no", 1, INT64_MAX)) out.step = StepNo(*step);
  return out;
}

AppendCall read_append(const Call& call) {
  run_parameter(call, 0);
  AppendCall out{Generation(1), transcript::EntryKind::user, std::nullopt, std::nullopt, {}};
  if (call.request.content_type == "application/octet-stream") {
    out = read_raw_append(call);
  } else {
    only_parameters(call, {});
    const auto json = json_body(call);
    wire::Object body(json);
    out.generation = Generation(body.int64("generation", 1));
    const std::string kind = body.string("kind");
    try {
      out.kind = transcript::parse_entry_kind(kind);
    } catch (const InvalidArgument&) {
      wire::refuse("kind", "system, user, assistant, tool_result or synthetic");
    }
    out.expected_seq = body.optional_int64("expected_seq", 1);
    if (auto step = body.optional_int64("step_no", 1)) out.step = StepNo(*step);
    out.body = body.base64("body_base64");
    body.finish();
  }
  if (out.body.size() > kMaxEntryBytes) {
    throw TooLarge("the entry is larger than 64 MiB", {{"limit", kMaxEntryBytes}});
  }
  if (out.step && out.kind != transcript::EntryKind::tool_result) {
    throw InvalidArgument("step_no: only a tool_result entry names a step", {{"field", "step_no"}});
  }
  return out;
}

void check_append(const Call& call) {
  read_append(call);
}

// The entry at `seq`, if the transcript has it.
std::optional<transcript::Entry> entry_at(Context& context, const RunId& run, std::int64_t seq) {
  std::optional<transcript::Entry> found;
  context.store.read_while(run, seq, [&](const transcript::Entry& e) {
    if (e.seq == seq) found = e;
    return false;
  });
  return found;
}

Response appended(const transcript::Head& head) {
  return Response::json(200, {{"seq", head.seq}, {"sha256", digest::hex(head.sha256)}});
}

Response serve_append(Context& context, const Call& call) {
  const AppendCall a = read_append(call);
  const RunId run = run_parameter(call, 0);
  if (!a.step) {
    return appended(context.store.append_at(run, a.generation, a.kind, a.body, a.expected_seq));
  }
  try {
    const auto seq = context.store.append_tool_result(run, a.generation, *a.step, a.body);
    const auto entry = entry_at(context, run, seq);
    return appended({seq, entry ? entry->sha256 : digest::Sha256Digest{}});
  } catch (const Conflict&) {
    // A repeat: the step's one tool_result entry is already this one.
    for (const auto& s : context.store.steps(run)) {
      if (s.step_no != *a.step || !s.result_seq) continue;
      const auto entry = entry_at(context, run, *s.result_seq);
      if (entry && entry->body == a.body && entry->generation == a.generation) {
        return appended({entry->seq, entry->sha256});
      }
    }
    throw;
  }
}

nlohmann::json entry_json(const transcript::Entry& e) {
  return {{"seq", e.seq},
          {"kind", transcript::to_string(e.kind)},
          {"generation", e.generation.value()},
          {"sha256", digest::hex(e.sha256)},
          {"body_base64", wire::base64_encode(e.body)},
          {"created_at", timestamps::rfc3339(e.created_at)}};
}

// The tail: the entries from `from` (or after Last-Event-ID) as Server-Sent Events, then each
// new one as it comes, and an `end` event once the run is terminal and all of it is sent.
class TranscriptTail : public EventStream {
 public:
  TranscriptTail(Context& context, RunId run, std::int64_t from)
      : context_(context), run_(std::move(run)), next_seq_(from) {}

  Piece next() override {
    // The status before the entries: a run seen terminal has all the entries it will have.
    const ledger::Run run = context_.ledger.get(run_);  // gone: the stream just ends
    Piece piece;
    std::size_t bytes = 0;
    int events = 0;
    bool more = false;
    context_.store.read_while(run_, next_seq_, [&](const transcript::Entry& e) {
      piece.text += "id: " + std::to_string(e.seq) +
                    "\nevent: " + std::string(transcript::to_string(e.kind)) +
                    "\ndata: " + entry_json(e).dump() + "\n\n";
      next_seq_ = e.seq + 1;
      bytes += e.body.size();
      more = bytes >= kTailPieceBytes || ++events >= kTailPieceEvents;
      return !more;
    });
    if (ledger::is_terminal(run.status) && !more) {
      piece.text +=
          "event: end\ndata: " +
          nlohmann::json{{"run_id", run_.value()}, {"status", to_string(run.status)}}.dump() +
          "\n\n";
      piece.last = true;
    }
    return piece;
  }

  Watched watched() const override { return {run_, next_seq_ - 1}; }

 private:
  // A piece stops growing past these (it always holds one entry): what a slow reader holds.
  static constexpr std::size_t kTailPieceBytes = kMiB;
  static constexpr int kTailPieceEvents = 100;

  Context& context_;
  RunId run_;
  std::int64_t next_seq_;
};

bool wants_events(const Request& request) {
  std::string accept = request.accept;
  std::transform(accept.begin(), accept.end(), accept.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return accept.find("text/event-stream") != std::string::npos;
}

// The first seq a tail sends: after Last-Event-ID when it reconnects, else `from`.
std::int64_t read_tail_start(const Call& call) {
  run_parameter(call, 0);
  only_parameters(call, {"from"});
  const std::int64_t from = integer_parameter(call, "from", 1, INT64_MAX).value_or(1);
  const std::string& last = call.request.last_event_id;
  if (last.empty()) return from;
  if (last.size() > 18 || last.find_first_not_of("0123456789") != std::string::npos) {
    throw InvalidArgument("Last-Event-ID: the seq of the last event received",
                          {{"field", "Last-Event-ID"}});
  }
  return std::stoll(last) + 1;
}

struct ReadCall {
  std::int64_t from;
  int limit;
};

ReadCall read_read(const Call& call) {
  run_parameter(call, 0);
  only_parameters(call, {"from", "limit"});
  return {integer_parameter(call, "from", 1, INT64_MAX).value_or(1),
          static_cast<int>(integer_parameter(call, "limit", 1, 1000).value_or(100))};
}

void check_read(const Call& call) {
  if (wants_events(call.request)) {
    read_tail_start(call);
  } else {
    read_read(call);
  }
}

Response serve_tail(Context& context, const Call& call) {
  const std::int64_t from = read_tail_start(call);
  const RunId run = run_parameter(call, 0);
  context.store.head(run);  // NotFound for an unknown run, before the stream begins
  Response response;
  response.content_type = "text/event-stream";
  response.events = std::make_shared<TranscriptTail>(context, run, from);
  return response;
}

Response serve_read(Context& context, const Call& call) {
  if (wants_events(call.request)) return serve_tail(context, call);
  const ReadCall r = read_read(call);
  const RunId run = run_parameter(call, 0);
  const auto head = context.store.head(run);  // NotFound for an unknown run
  nlohmann::json entries = nlohmann::json::array();
  std::size_t bytes = 0;
  std::int64_t last = r.from - 1;
  context.store.read_while(run, r.from, [&](const transcript::Entry& e) {
    entries.push_back(entry_json(e));
    last = e.seq;
    bytes += e.body.size();
    return static_cast<int>(entries.size()) < r.limit && bytes < kPageBytes && e.seq < head.seq;
  });
  return Response::json(
      200, {{"entries", entries},
            {"next",
             last < head.seq && !entries.empty() ? nlohmann::json(last + 1) : nlohmann::json()}});
}

std::int64_t seq_parameter(const Call& call) {
  return number_parameter(call, 1, "seq");
}

void check_entry(const Call& call) {
  run_parameter(call, 0);
  seq_parameter(call);
  only_parameters(call, {});
}

Response serve_entry(Context& context, const Call& call) {
  check_entry(call);
  const RunId run = run_parameter(call, 0);
  const std::int64_t seq = seq_parameter(call);
  context.store.head(run);  // NotFound for an unknown run
  auto entry = entry_at(context, run, seq);
  if (!entry) {
    throw NotFound("run " + run.value() + " has no entry " + std::to_string(seq), {{"seq", seq}});
  }
  Response response;
  response.content_type = "application/octet-stream";
  response.body = std::move(entry->body);
  response.headers.emplace_back("X-Entry-Kind", std::string(transcript::to_string(entry->kind)));
  response.headers.emplace_back("X-Entry-Sha256", digest::hex(entry->sha256));
  response.headers.emplace_back("X-Entry-Generation", std::to_string(entry->generation.value()));
  return response;
}

void check_verify(const Call& call) {
  run_parameter(call, 0);
  only_parameters(call, {});
}

Response serve_verify(Context& context, const Call& call) {
  check_verify(call);
  const auto v = context.store.verify(run_parameter(call, 0));
  nlohmann::json out{{"ok", v.ok}, {"entries", v.entries}};
  if (!v.ok) {
    out["first_bad_seq"] = v.first_bad_seq ? nlohmann::json(*v.first_bad_seq) : nlohmann::json();
    out["problem"] = v.problem;
  }
  return Response::json(200, out);
}

}  // namespace

const std::vector<Route> kTranscriptRoutes = {
    {"POST", "/v1/runs/{}/transcript", "transcript.append", tokens::Scope::bot,
     BodyKind::json_or_bytes, kMaxBase64EntryRequest, check_append, serve_append},
    {"GET", "/v1/runs/{}/transcript", "transcript.read", tokens::Scope::bot, BodyKind::none, 0,
     check_read, serve_read},
    {"GET", "/v1/runs/{}/transcript/{}", "transcript.entry", tokens::Scope::bot, BodyKind::none, 0,
     check_entry, serve_entry},
    {"GET", "/v1/runs/{}/verify", "runs.verify", tokens::Scope::bot, BodyKind::none, 0,
     check_verify, serve_verify},
};

}  // namespace runledger::server
