// parse_json: nlohmann's SAX parser with a handler that builds the value itself, so that depth and
// content are checked as each token arrives. nlohmann/json 3.11.2 has no depth limit of its own,
// and a deeply nested value (which its parser builds without recursion) overflows the stack later
// when it is copied or compared; a parser callback only sees values after they are built.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "errors/errors.h"
#include "wire/wire.h"

namespace runledger::wire {
namespace {

using nlohmann::json;

constexpr auto kInt64Max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

// The first problem found in a document that is JSON; reported once the whole text has parsed,
// since a syntax error anywhere makes it Malformed instead.
struct Problem {
  std::string message;
  std::string field;  // a JSON pointer
};

// RFC 6901: '~' and '/' in a key are escaped as ~0 and ~1.
void append_pointer_token(std::string& pointer, std::string_view key) {
  pointer.push_back('/');
  for (const char c : key) {
    if (c == '~') {
      pointer += "~0";
    } else if (c == '/') {
      pointer += "~1";
    } else {
      pointer.push_back(c);
    }
  }
}

// The parse error's own text without the token it quotes ("last read: '...'"): the payload is
// never echoed. nlohmann's remaining text is fixed wording and token kinds ("syntax error while
// parsing array - unexpected end of input; expected ']'").
std::string describe(const nlohmann::detail::exception& ex, const std::string& last_token) {
  std::string what = ex.what();
  const std::string quoted = "; last read: '" + last_token + "'";
  if (const auto at = what.find(quoted); at != std::string::npos) what.erase(at, quoted.size());
  const auto start = what.find("syntax error");
  if (ex.id != 101 || start == std::string::npos) return "not valid JSON";
  return what.substr(start);
}

class Builder final : public nlohmann::json_sax<json> {
 public:
  explicit Builder(const Limits& limits) : limits_(limits) {}

  json take() {
    if (problem_) throw InvalidArgument(problem_->message, {{"field", problem_->field}});
    return std::move(root_);
  }

  bool null() override { return add(nullptr); }
  bool boolean(bool value) override { return add(value); }
  bool number_integer(std::int64_t value) override { return add(value); }
  bool number_unsigned(std::uint64_t value) override {
    if (value > kInt64Max) return refuse("an integer outside the range of int64", true);
    return add(static_cast<std::int64_t>(value));
  }
  bool number_float(double value, const std::string& literal) override {
    // nlohmann turns an integer literal that overflows 64 bits into a double; its literal tells.
    if (literal.find_first_of(".eE") == std::string::npos) {
      return refuse("an integer outside the range of int64", true);
    }
    if (!std::isfinite(value)) return refuse("a number outside the range of a double", true);
    return add(value);
  }
  bool string(std::string& value) override {
    if (value.find('\0') != std::string::npos) return refuse("a string with U+0000", true);
    if (value.size() > limits_.max_string_bytes) {
      return refuse("a string longer than " + std::to_string(limits_.max_string_bytes) + " bytes",
                    true);
    }
    return add(std::move(value));
  }
  bool binary(json::binary_t&) override { return false; }  // JSON text has none

  bool start_object(std::size_t) override { return open(json::object()); }
  bool key(std::string& key) override {
    // The offending key is named by its object (the key itself may be long or hold U+0000).
    if (key.find('\0') != std::string::npos) return refuse("an object key with U+0000", false);
    if (key.size() > limits_.max_key_bytes) {
      return refuse("an object key longer than " + std::to_string(limits_.max_key_bytes) + " bytes",
                    false);
    }
    Frame& top = frames_.back();
    top.key = std::move(key);
    if (top.container->contains(top.key)) return refuse("a key given twice in one object", true);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex) override {
    // `position` counts the bytes read, the offending one included.
    const std::size_t offset = position == 0 ? 0 : position - 1;
    if (ex.id == 406) {  // out_of_range.406: a number literal beyond a double ("1e400")
      refuse("a number outside the range of a double", true);
      take();
    }
    throw Malformed("request body is not valid JSON at byte " + std::to_string(offset) + ": " +
                        describe(ex, last_token),
                    {{"offset", offset}});
  }

 private:
  // An array or object being built, and where the next value goes in it.
  struct Frame {
    json* container;
    std::string key;  // objects: the key of the member being read
  };

  // The JSON pointer of the value about to be placed (member: true) or of its container.
  std::string pointer(bool member) const {
    std::string out;
    for (std::size_t i = 0; i < frames_.size(); ++i) {
      const Frame& frame = frames_[i];
      const bool top = i + 1 == frames_.size();
      if (top && !member) break;
      if (frame.container->is_array()) {
        // Below the top frame, the open child is already the array's last element.
        const std::size_t index = frame.container->size() - (top ? 0 : 1);
        append_pointer_token(out, std::to_string(index));
      } else {
        append_pointer_token(out, frame.key);
      }
    }
    return out;
  }

  // Records the document's first problem; `member`: the value about to be placed is the
  // offender, else its container.
  bool refuse(const std::string& what, bool member) {
    if (!problem_) {
      std::string field = pointer(member);
      problem_ = Problem{"request body has " + what + " at \"" + field + "\"", field};
    }
    return true;  // go on: a syntax error later in the text is reported instead
  }

  bool add(json value) {
    place(std::move(value));
    return true;
  }

  json* place(json value) {
    if (frames_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Frame& top = frames_.back();
    if (top.container->is_array()) {
      top.container->push_back(std::move(value));
      return &top.container->back();
    }
    json& slot = (*top.container)[top.key];
    slot = std::move(value);
    return &slot;
  }

  bool open(json empty) {
    if (frames_.size() >= limits_.max_depth) {
      throw Malformed("request body nests arrays and objects deeper than " +
                          std::to_string(limits_.max_depth) + " levels",
                      {{"max_depth", limits_.max_depth}});
    }
    json* container = place(std::move(empty));
    frames_.push_back({container, {}});
    return true;
  }

  bool close() {
    frames_.pop_back();
    return true;
  }

  const Limits& limits_;
  json root_;
  std::vector<Frame> frames_;
  std::optional<Problem> problem_;
};

}  // namespace

nlohmann::json parse_json(std::string_view text, const Limits& limits) {
  if (text.empty()) throw Malformed("request body is empty: expected a JSON document");
  Builder builder(limits);
  // strict: the document must end the text. parse_error throws, so false cannot come back.
  json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true);
  return builder.take();
}

}  // namespace runledger::wire
