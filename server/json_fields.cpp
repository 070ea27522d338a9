// See json_fields.hpp.
#include "server/json_fields.hpp"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "server/decimal.hpp"
#include "server/rfc3339.hpp"

namespace gpuex {

namespace {

// A basic_parser handler that finds the first key an object repeats. RFC 8259 leaves the meaning of a
// repeated name open (boost::json keeps the last, other readers the first), so a body that says "price"
// twice is refused rather than read as one of them.
struct RepeatedKeys {
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);
  using error_code = boost::system::error_code;
  using string_view = boost::json::string_view;

  std::vector<std::vector<std::string>> open;  // the keys of each object being read, outermost first
  std::string key;                             // the parts of the key being read
  std::optional<RepeatedKey> repeated;

  bool on_object_begin(error_code&) {
    open.emplace_back();
    return true;
  }
  bool on_key_part(string_view s, std::size_t, error_code&) {
    key.append(s.data(), s.size());
    return true;
  }
  bool on_key(string_view s, std::size_t, error_code&) {
    key.append(s.data(), s.size());
    open.back().push_back(std::move(key));
    key.clear();
    return true;
  }
  // Sorted once the object ends: n log n, whatever the number of keys a 64 KiB body holds.
  bool on_object_end(std::size_t, error_code&) {
    std::vector<std::string>& keys = open.back();
    std::sort(keys.begin(), keys.end());
    if (auto it = std::adjacent_find(keys.begin(), keys.end()); it != keys.end() && !repeated) {
      repeated = RepeatedKey{*it, open.size() == 1};
    }
    open.pop_back();
    return true;
  }
  bool on_document_begin(error_code&) { return true; }
  bool on_document_end(error_code&) { return true; }
  bool on_array_begin(error_code&) { return true; }
  bool on_array_end(std::size_t, error_code&) { return true; }
  bool on_string_part(string_view, std::size_t, error_code&) { return true; }
  bool on_string(string_view, std::size_t, error_code&) { return true; }
  bool on_number_part(string_view, error_code&) { return true; }
  bool on_int64(std::int64_t, string_view, error_code&) { return true; }
  bool on_uint64(std::uint64_t, string_view, error_code&) { return true; }
  bool on_double(double, string_view, error_code&) { return true; }
  bool on_bool(bool, error_code&) { return true; }
  bool on_null(error_code&) { return true; }
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }
};

}  // namespace

std::optional<RepeatedKey> repeated_key(std::string_view text) {
  boost::json::basic_parser<RepeatedKeys> parser(boost::json::parse_options{});
  boost::system::error_code ec;
  parser.write_some(false, text.data(), text.size(), ec);
  if (ec) return std::nullopt;  // not JSON (or nested deeper than the default 32): the caller's parse says so
  return parser.handler().repeated;
}

std::string RepeatedKey::message() const {
  return key.size() > 64 ? "an object names a key twice" : "an object names \"" + key + "\" twice";
}

std::string_view RepeatedKey::field() const { return top_level && key.size() <= 64 ? key : std::string_view(); }

boost::json::parse_options body_parse_options() {
  boost::json::parse_options options;
  options.max_depth = 16;
  return options;
}

std::string canonical_json(const boost::json::value& v) {
  std::string out;
  const auto put = [&out](const auto& self, const boost::json::value& x) -> void {
    if (x.is_object()) {
      std::vector<const boost::json::key_value_pair*> members;
      for (const auto& kv : x.get_object()) members.push_back(&kv);
      std::sort(members.begin(), members.end(), [](const auto* a, const auto* b) { return a->key() < b->key(); });
      out += '{';
      for (const auto* kv : members) {
        if (kv != members.front()) out += ',';
        out += boost::json::serialize(boost::json::string(kv->key()));
        out += ':';
        self(self, kv->value());
      }
      out += '}';
    } else if (x.is_array()) {
      out += '[';
      bool first = true;
      for (const auto& e : x.get_array()) {
        if (!first) out += ',';
        first = false;
        self(self, e);
      }
      out += ']';
    } else {
      out += boost::json::serialize(x);
    }
  };
  put(put, v);
  return out;
}

std::variant<boost::json::object, http::Response> parse_json_body(const http::Request& request) {
  boost::system::error_code ec;
  auto value = boost::json::parse(request.body(), ec, {}, body_parse_options());
  if (ec) {
    return http::error_response(http::Status::bad_request, "malformed_json",
                                "the body is not valid JSON: " + ec.message());
  }
  if (!value.is_object()) {
    return http::error_response(http::Status::bad_request, "malformed_json", "the body must be a JSON object");
  }
  if (auto repeated = repeated_key(request.body())) {
    return http::error_response(http::Status::bad_request, "malformed_json", repeated->message(), repeated->field());
  }
  return std::move(value.as_object());
}

void JsonFields::fail(std::string_view code, std::string_view field, std::string message) {
  if (!error_) error_ = http::error_response(http::Status::bad_request, code, message, field);
}

const boost::json::value* JsonFields::lookup(std::string_view name, Need need) {
  seen_.emplace_back(name);
  auto it = body_.find(name);
  if (it == body_.end() || it->value().is_null()) {
    if (need == Need::required) fail("missing_field", name, std::string(name) + " is required");
    return nullptr;
  }
  return &it->value();
}

std::optional<std::string> JsonFields::string(std::string_view name, Need need, std::size_t max_length) {
  const auto* v = lookup(name, need);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    fail("invalid_field", name, std::string(name) + " must be a string");
    return std::nullopt;
  }
  const auto& s = v->get_string();
  if (s.size() > max_length) {
    fail("invalid_field", name, std::string(name) + " is longer than " + std::to_string(max_length) + " characters");
    return std::nullopt;
  }
  // PostgreSQL's text and jsonb cannot hold U+0000: refused here rather than failing a whole commit.
  if (s.find('\0') != boost::json::string::npos) {
    fail("invalid_field", name, std::string(name) + " must not contain the NUL character (\\u0000)");
    return std::nullopt;
  }
  return std::string(s);
}

std::optional<std::string> JsonFields::one_of(std::string_view name, Need need,
                                              std::initializer_list<std::string_view> allowed) {
  auto s = string(name, need, 64);
  if (!s) return std::nullopt;
  if (std::find(allowed.begin(), allowed.end(), *s) == allowed.end()) {
    std::string list;
    for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    fail("invalid_field", name, std::string(name) + " must be one of: " + list);
    return std::nullopt;
  }
  return s;
}

std::optional<std::int64_t> JsonFields::integer(std::string_view name, Need need, std::int64_t min, std::int64_t max) {
  const auto* v = lookup(name, need);
  if (!v) return std::nullopt;
  std::optional<std::int64_t> n;
  if (v->is_int64()) n = v->get_int64();
  if (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(max)) n = static_cast<std::int64_t>(v->get_uint64());
  if (!n || *n < min || *n > max) {
    fail("invalid_field", name,
         std::string(name) + " must be a whole number from " + std::to_string(min) + " to " + std::to_string(max));
    return std::nullopt;
  }
  return n;
}

std::optional<bool> JsonFields::boolean(std::string_view name, Need need) {
  const auto* v = lookup(name, need);
  if (!v) return std::nullopt;
  if (!v->is_bool()) {
    fail("invalid_field", name, std::string(name) + " must be true or false");
    return std::nullopt;
  }
  return v->get_bool();
}

std::optional<std::int64_t> JsonFields::decimal(std::string_view name, Need need, int scale, std::int64_t min,
                                                std::int64_t max) {
  const auto* v = lookup(name, need);
  if (!v) return std::nullopt;
  std::optional<std::int64_t> n;
  if (v->is_string()) n = parse_fixed(v->get_string(), scale);
  if (!n || *n < min || *n > max) {
    fail("invalid_field", name,
         std::string(name) + " must be a decimal string from " + format_fixed(min, scale, 0) + " to " +
             format_fixed(max, scale, 0) + " with at most " + std::to_string(scale) + " decimals, e.g. \"2.05\"");
    return std::nullopt;
  }
  return n;
}

std::optional<std::int64_t> JsonFields::measure(std::string_view name, Need need, int scale, std::int64_t min,
                                                std::int64_t max) {
  const auto* v = lookup(name, need);
  if (!v) return std::nullopt;
  std::optional<std::int64_t> n;
  std::int64_t unit = 1;
  for (int i = 0; i < scale; ++i) unit *= 10;
  if (v->is_string()) {
    n = parse_fixed(v->get_string(), scale);
  } else if (v->is_int64() && v->get_int64() > std::numeric_limits<std::int64_t>::min() / unit &&
             v->get_int64() < std::numeric_limits<std::int64_t>::max() / unit) {
    n = v->get_int64() * unit;
  } else if (v->is_double() && std::isfinite(v->get_double()) && std::fabs(v->get_double()) < 1e12) {
    // A percentage or similar measure: a JSON double is accepted only with no more decimals than the scale.
    double scaled = v->get_double() * static_cast<double>(unit);
    double rounded = std::round(scaled);
    if (std::fabs(scaled - rounded) < 1e-6) n = static_cast<std::int64_t>(rounded);
  }
  if (!n || *n < min || *n > max) {
    fail("invalid_field", name,
         std::string(name) + " must be a number from " + format_fixed(min, scale, 0) + " to " +
             format_fixed(max, scale, 0) + " with at most " + std::to_string(scale) + " decimals");
    return std::nullopt;
  }
  return n;
}

std::optional<std::int64_t> JsonFields::time(std::string_view name, Need need) {
  const auto* v = lookup(name, need);
  if (!v) return std::nullopt;
  std::optional<std::int64_t> t;
  if (v->is_string()) t = parse_rfc3339(v->get_string());
  if (!t) {
    fail("invalid_field", name,
         std::string(name) + " must be an RFC 3339 time in whole seconds from 1970 to 9999, e.g. \"2027-01-01T00:00:00Z\"");
    return std::nullopt;
  }
  return t;
}

std::optional<std::vector<std::string>> JsonFields::strings(std::string_view name, Need need, std::size_t max_items,
                                                            std::size_t max_length) {
  const auto* v = lookup(name, need);
  if (!v) return std::nullopt;
  if (!v->is_array() || v->get_array().size() > max_items) {
    fail("invalid_field", name,
         std::string(name) + " must be an array of at most " + std::to_string(max_items) + " strings");
    return std::nullopt;
  }
  std::vector<std::string> out;
  for (const auto& item : v->get_array()) {
    if (!item.is_string() || item.get_string().size() > max_length ||
        item.get_string().find('\0') != boost::json::string::npos) {
      fail("invalid_field", name, std::string(name) + " must hold strings of at most " + std::to_string(max_length) +
                                      " characters, without NUL (\\u0000)");
      return std::nullopt;
    }
    out.emplace_back(item.get_string());
  }
  return out;
}

std::optional<http::Response> JsonFields::finish() {
  if (!error_) {
    for (const auto& kv : body_) {
      if (std::find(seen_.begin(), seen_.end(), kv.key()) == seen_.end()) {
        fail("unknown_field", kv.key(), "unknown field: " + std::string(kv.key()));
        break;
      }
    }
  }
  return error_;
}

}  // namespace gpuex
