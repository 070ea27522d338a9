// HTTP request/response types and the JSON bodies every route answers with (API.md "Errors").
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/value.hpp>

#include <string_view>

namespace gpuex::http {

namespace bhttp = boost::beast::http;
using Request = bhttp::request<bhttp::string_body>;
using Response = bhttp::response<bhttp::string_body>;
using Status = bhttp::status;

// A JSON body with the given status.
Response json_response(Status status, const boost::json::value& body);
// {"error": {"code", "message", "field"?}}: `code` is the snake_case word clients branch on.
Response error_response(Status status, std::string_view code, std::string_view message,
                        std::string_view field = {});
// A plain-text body (Prometheus metrics, liveness).
Response text_response(Status status, std::string body, std::string_view content_type);

}  // namespace gpuex::http
