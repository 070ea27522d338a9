// Strict readers of the JSON the store wrote itself (the command log, engine snapshots): a missing or
// mistyped member is a StoreError naming `what` and the member, never a silently default value.
#pragma once

#include <boost/json/object.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "server/json_fields.hpp"
#include "server/store/connection.hpp"

namespace gpuex::store {

inline const boost::json::value& member(const boost::json::object& o, std::string_view key, std::string_view what) {
  const auto* v = o.if_contains(key);
  if (!v) throw StoreError(std::string(what) + ": '" + std::string(key) + "' is missing");
  return *v;
}

inline std::int64_t int_at(const boost::json::object& o, std::string_view key, std::string_view what) {
  const auto& v = member(o, key, what);
  if (!v.is_int64()) throw StoreError(std::string(what) + ": '" + std::string(key) + "' is not an integer");
  return v.get_int64();
}

inline std::string string_at(const boost::json::object& o, std::string_view key, std::string_view what) {
  const auto& v = member(o, key, what);
  if (!v.is_string()) throw StoreError(std::string(what) + ": '" + std::string(key) + "' is not a string");
  return std::string(v.get_string());
}

inline bool bool_at(const boost::json::object& o, std::string_view key, std::string_view what) {
  const auto& v = member(o, key, what);
  if (!v.is_bool()) throw StoreError(std::string(what) + ": '" + std::string(key) + "' is not a boolean");
  return v.get_bool();
}

inline const boost::json::object& object_at(const boost::json::object& o, std::string_view key, std::string_view what) {
  const auto& v = member(o, key, what);
  if (!v.is_object()) throw StoreError(std::string(what) + ": '" + std::string(key) + "' is not an object");
  return v.get_object();
}

inline const boost::json::array& array_at(const boost::json::object& o, std::string_view key, std::string_view what) {
  const auto& v = member(o, key, what);
  if (!v.is_array()) throw StoreError(std::string(what) + ": '" + std::string(key) + "' is not an array");
  return v.get_array();
}

// A request body the API's reader must take back whole (the store wrote it with the API's writer).
template <class T, class Read>
T read_with(const boost::json::object& body, Read read, std::string_view what) {
  JsonFields fields(body);
  T value = read(fields);
  if (auto err = fields.finish()) throw StoreError(std::string(what) + ": unreadable body: " + err->body());
  return value;
}

}  // namespace gpuex::store
