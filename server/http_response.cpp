// See http_response.hpp.
#include "server/http_response.hpp"

#include <boost/json/serialize.hpp>

namespace gpuex::http {

Response text_response(Status status, std::string body, std::string_view content_type) {
  Response res{status, 11};
  res.set(bhttp::field::content_type, content_type);
  res.set(bhttp::field::cache_control, "no-store");
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

Response json_response(Status status, const boost::json::value& body) {
  return text_response(status, boost::json::serialize(body), "application/json");
}

Response error_response(Status status, std::string_view code, std::string_view message,
                        std::string_view field) {
  boost::json::object error{{"code", code}, {"message", message}};
  if (!field.empty()) error["field"] = field;
  return json_response(status, boost::json::object{{"error", std::move(error)}});
}

}  // namespace gpuex::http
