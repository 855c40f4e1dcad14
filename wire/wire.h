// How the HTTP API reads untrusted input: a strict JSON parse, and a reader that takes a request
// body apart field by field. No database, no network.
//
// Contract:
//  - parse_json() accepts exactly one JSON document (RFC 8259) within Limits, or throws:
//    Malformed (HTTP 400) for what is not JSON: an empty text, a syntax error, invalid UTF-8 or a
//    lone surrogate escape, trailing garbage, a nesting deeper than max_depth (refused while
//    parsing, so no deep value is ever built); InvalidArgument (HTTP 422) for JSON the service
//    will not take, with details {"field": JSON pointer}: a string or key holding U+0000
//    (PostgreSQL refuses it), an integer literal outside int64, a number beyond a double, a key
//    over max_key_bytes, a string over max_string_bytes, a key given twice in one object.
//    A syntax error anywhere wins over such a problem. Every integer of the result is an int64
//    (is_number_integer(), never number_unsigned); floats are finite doubles.
//  - Object reads one JSON object by field; a field is named by its path from the body:
//    "budget.wall_s", "intents[0].step_no". A field that is missing or null is absent: required
//    readers refuse it, optional_* return nullopt. Every refusal is InvalidArgument with details
//    {"field": name} and a message naming the field and what was expected, never the value.
//    finish() refuses the first field that no reader asked for, in the object and in every
//    object read from it, so a misspelt field never passes silently.
//  - Messages and details never carry the payload (a key is named only as a field).
//
// Thread-safety: the functions are pure. An Object or Value refers into the JSON it reads, which
// must outlive it, and is used by one thread at a time (reading records what was read).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace runledger::wire {

struct Limits {
  // Arrays and objects nested in one another: a scalar is depth 0, [] 1, [[]] 2.
  std::size_t max_depth = 64;
  // Bytes of one object key (keys become field names, column names, JSON paths).
  std::size_t max_key_bytes = 255;
  // Bytes of one string value; by default none beyond the size of the text itself.
  std::size_t max_string_bytes = std::numeric_limits<std::size_t>::max();
};

nlohmann::json parse_json(std::string_view text, const Limits& limits = {});

// Throws InvalidArgument {"field": field} with the message "<field>: expected <expected>".
// For checks a route makes itself (two fields that exclude each other, a key's syntax).
[[noreturn]] void refuse(std::string_view field, std::string_view expected);

// Standard base64 (RFC 4648 section 4) with padding. The decoder is strict: a length that is a
// multiple of 4, only the alphabet, '=' only as the last one or two characters, zero bits after
// the last byte (so each byte string has one encoding); no whitespace. InvalidArgument naming
// `field` otherwise.
std::string base64_decode(std::string_view text, std::string_view field);
std::string base64_encode(std::string_view bytes);
// (base64url, for URLs, is digest/digest.h's.)

class Object;

// One present, non-null JSON value of the request, with its field name; the readers convert it
// or refuse it naming the field.
class Value {
 public:
  const std::string& name() const { return name_; }
  const nlohmann::json& json() const { return *json_; }

  std::string string() const;
  std::int64_t int64(std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                     std::int64_t max = std::numeric_limits<std::int64_t>::max()) const;
  bool boolean() const;
  std::string uuid() const;    // a canonical UUID, lower-cased (ids::canonical_uuid)
  std::string base64() const;  // the decoded bytes of a base64 string (base64_decode)
  Object object() const;
  std::vector<Value> array() const;  // its elements, named "<name>[i]"

 private:
  friend class Object;
  struct Node;
  Value(const nlohmann::json* json, std::string name, std::shared_ptr<Node> owner)
      : json_(json), name_(std::move(name)), owner_(std::move(owner)) {}

  const nlohmann::json* json_;
  std::string name_;
  std::shared_ptr<Node> owner_;  // the object it was read from, whose finish() covers its objects
};

class Object {
 public:
  // The request body: InvalidArgument {"field": ""} unless `body` is an object.
  explicit Object(const nlohmann::json& body);
  explicit Object(nlohmann::json&&) = delete;  // it would refer into a temporary

  const std::string& name() const;
  // The name of this object's field `key`: "key" in the body, "budget.key" in budget.
  std::string name_of(std::string_view key) const;

  // The field, marked as read; required() refuses an absent one.
  Value required(std::string_view key);
  std::optional<Value> optional(std::string_view key);

  std::string string(std::string_view key) { return required(key).string(); }
  std::int64_t int64(std::string_view key,
                     std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                     std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
    return required(key).int64(min, max);
  }
  bool boolean(std::string_view key) { return required(key).boolean(); }
  std::string uuid(std::string_view key) { return required(key).uuid(); }
  std::string base64(std::string_view key) { return required(key).base64(); }
  Object object(std::string_view key) { return required(key).object(); }
  std::vector<Value> array(std::string_view key) { return required(key).array(); }
  nlohmann::json any(std::string_view key) { return required(key).json(); }

  std::optional<std::string> optional_string(std::string_view key) {
    return read_optional(key, [](const Value& v) { return v.string(); });
  }
  std::optional<std::int64_t> optional_int64(
      std::string_view key, std::int64_t min = std::numeric_limits<std::int64_t>::min(),
      std::int64_t max = std::numeric_limits<std::int64_t>::max()) {
    return read_optional(key, [&](const Value& v) { return v.int64(min, max); });
  }
  std::optional<bool> optional_boolean(std::string_view key) {
    return read_optional(key, [](const Value& v) { return v.boolean(); });
  }
  std::optional<std::string> optional_uuid(std::string_view key) {
    return read_optional(key, [](const Value& v) { return v.uuid(); });
  }
  std::optional<std::string> optional_base64(std::string_view key) {
    return read_optional(key, [](const Value& v) { return v.base64(); });
  }
  std::optional<Object> optional_object(std::string_view key) {
    return read_optional(key, [](const Value& v) { return v.object(); });
  }
  std::optional<std::vector<Value>> optional_array(std::string_view key) {
    return read_optional(key, [](const Value& v) { return v.array(); });
  }
  std::optional<nlohmann::json> optional_any(std::string_view key) {
    return read_optional(key, [](const Value& v) { return v.json(); });
  }

  // InvalidArgument naming the first field (in key order) no reader asked for, here or in an
  // object read from this one.
  void finish() const;

 private:
  friend class Value;
  explicit Object(std::shared_ptr<Value::Node> node) : node_(std::move(node)) {}

  template <class Read>
  auto read_optional(std::string_view key, Read read)
      -> std::optional<decltype(read(std::declval<const Value&>()))> {
    std::optional<Value> value = optional(key);
    if (!value) return std::nullopt;
    return read(*value);
  }

  std::shared_ptr<Value::Node> node_;
};

}  // namespace runledger::wire
