#include <set>
#include <string>

#include "errors/errors.h"
#include "ids/ids.h"
#include "wire/wire.h"

namespace runledger::wire {

// An object being read: which of its keys were asked for, and the objects read from it, so that
// finish() on the body covers every object the route descended into.
struct Value::Node {
  const nlohmann::json* json;
  std::string name;
  std::set<std::string, std::less<>> read;
  std::vector<std::shared_ptr<Node>> children;
};

namespace {

std::string shown(std::string_view field) {
  return field.empty() ? "request body" : std::string(field);
}

std::string integer_range(std::int64_t min, std::int64_t max) {
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  if (min == kMin && max == kMax) return "an integer";
  if (max == kMax) return "an integer of at least " + std::to_string(min);
  if (min == kMin) return "an integer of at most " + std::to_string(max);
  return "an integer from " + std::to_string(min) + " to " + std::to_string(max);
}

}  // namespace

void refuse(std::string_view field, std::string_view expected) {
  throw InvalidArgument(shown(field) + ": expected " + std::string(expected),
                        {{"field", std::string(field)}});
}

std::string Value::string() const {
  if (!json_->is_string()) refuse(name_, "a string");
  return json_->get<std::string>();
}

std::int64_t Value::int64(std::int64_t min, std::int64_t max) const {
  // A number_unsigned (from JSON that parse_json did not make) may not fit.
  const bool fits = json_->is_number_integer() &&
                    (!json_->is_number_unsigned() ||
                     json_->get<std::uint64_t>() <=
                         static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
  const std::int64_t value = fits ? json_->get<std::int64_t>() : 0;
  if (!fits || value < min || value > max) refuse(name_, integer_range(min, max));
  return value;
}

bool Value::boolean() const {
  if (!json_->is_boolean()) refuse(name_, "true or false");
  return json_->get<bool>();
}

std::string Value::uuid() const {
  constexpr std::string_view kExpected = "a UUID (8-4-4-4-12 hexadecimal digits)";
  if (!json_->is_string() || !is_uuid(json_->get_ref<const std::string&>())) {
    refuse(name_, kExpected);
  }
  return canonical_uuid(json_->get_ref<const std::string&>(), name_);
}

std::string Value::base64() const {
  if (!json_->is_string()) refuse(name_, "a base64 string");
  return base64_decode(json_->get_ref<const std::string&>(), name_);
}

Object Value::object() const {
  if (!json_->is_object()) refuse(name_, "a JSON object");
  // Reading the same object twice shares what was read of it.
  for (const auto& child : owner_->children) {
    if (child->json == json_) return Object(child);
  }
  auto child = std::make_shared<Node>(Node{json_, name_, {}, {}});
  owner_->children.push_back(child);
  return Object(child);
}

std::vector<Value> Value::array() const {
  if (!json_->is_array()) refuse(name_, "a JSON array");
  std::vector<Value> elements;
  elements.reserve(json_->size());
  for (std::size_t i = 0; i < json_->size(); ++i) {
    elements.push_back(Value(&(*json_)[i], name_ + "[" + std::to_string(i) + "]", owner_));
  }
  return elements;
}

Object::Object(const nlohmann::json& body)
    : node_(std::make_shared<Value::Node>(Value::Node{&body, "", {}, {}})) {
  if (!body.is_object()) refuse("", "a JSON object");
}

const std::string& Object::name() const {
  return node_->name;
}

std::string Object::name_of(std::string_view key) const {
  return node_->name.empty() ? std::string(key) : node_->name + "." + std::string(key);
}

Value Object::required(std::string_view key) {
  std::optional<Value> value = optional(key);
  if (!value) {
    const std::string field = name_of(key);
    throw InvalidArgument(field + " is required", {{"field", field}});
  }
  return *std::move(value);
}

std::optional<Value> Object::optional(std::string_view key) {
  node_->read.emplace(key);
  const auto found = node_->json->find(key);
  if (found == node_->json->end() || found->is_null()) return std::nullopt;
  return Value(&*found, name_of(key), node_);
}

void Object::finish() const {
  for (auto member = node_->json->begin(); member != node_->json->end(); ++member) {
    if (!node_->read.contains(member.key())) {
      const std::string field = name_of(member.key());
      throw InvalidArgument(field + " is not a field this request accepts", {{"field", field}});
    }
  }
  for (const auto& child : node_->children) Object(child).finish();
}

}  // namespace runledger::wire
