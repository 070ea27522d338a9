// Strict reading of JSON request bodies: exact types, limits on every field, unknown fields refused.
// The first problem found becomes the 400 answer, naming the field at fault.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/parse_options.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "server/http_response.hpp"

namespace gpuex {

// How request bodies are parsed (nesting bounded).
boost::json::parse_options body_parse_options();
// A JSON value written with each object's keys sorted and no spaces: two bodies that differ only in spacing
// and key order (a client that serializes its request again for a retry) give the same text.
std::string canonical_json(const boost::json::value& v);
// The body as a JSON object, or the 400 to send (malformed_json, also for a key named twice in one object).
std::variant<boost::json::object, http::Response> parse_json_body(const http::Request& request);
// The first key that an object of the JSON `text` names twice, if any. RFC 8259 leaves the meaning of a repeated
// name open (boost::json keeps the last copy, other readers the first), so a message that says "price" twice is
// refused rather than read as one of them.
struct RepeatedKey {
  std::string key;
  bool top_level = false;  // in the outermost object: a field of the request
  std::string message() const;      // the sentence that says so
  std::string_view field() const;   // the error's `field`: the key if it is a field of the request, else empty
};
std::optional<RepeatedKey> repeated_key(std::string_view text);

enum class Need { required, optional };

class JsonFields {
 public:
  explicit JsonFields(const boost::json::object& body) : body_(body) {}

  std::optional<std::string> string(std::string_view name, Need need, std::size_t max_length = 200);
  // One of `allowed` exactly.
  std::optional<std::string> one_of(std::string_view name, Need need, std::initializer_list<std::string_view> allowed);
  std::optional<std::int64_t> integer(std::string_view name, Need need, std::int64_t min, std::int64_t max);
  std::optional<bool> boolean(std::string_view name, Need need);
  // A decimal string ("2.05") as value x 10^scale, within [min, max] in those units.
  std::optional<std::int64_t> decimal(std::string_view name, Need need, int scale, std::int64_t min, std::int64_t max);
  // A JSON number or decimal string with at most `scale` decimals (a non-money measure such as a
  // percentage), as value x 10^scale.
  std::optional<std::int64_t> measure(std::string_view name, Need need, int scale, std::int64_t min, std::int64_t max);
  // An RFC 3339 time as Unix seconds.
  std::optional<std::int64_t> time(std::string_view name, Need need);
  std::optional<std::vector<std::string>> strings(std::string_view name, Need need, std::size_t max_items,
                                                  std::size_t max_length);

  bool has(std::string_view name) const { return body_.contains(name); }
  // Records a rule broken by a combination of fields (first problem wins).
  void fail(std::string_view code, std::string_view field, std::string message);

  // Call after reading every field the route knows: any other field is `unknown_field`. Returns the
  // 400 to send, or nullopt when the body was good.
  std::optional<http::Response> finish();
  bool ok() const { return !error_; }

 private:
  const boost::json::value* lookup(std::string_view name, Need need);

  const boost::json::object& body_;
  std::vector<std::string> seen_;
  std::optional<http::Response> error_;
};

}  // namespace gpuex
