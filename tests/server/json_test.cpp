// Reading JSON the same way every time: a key named twice is found wherever it is, and a body's canonical
// form ignores spacing and key order but nothing else.
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include "server/json_fields.hpp"

using namespace gpuex;

TEST_CASE("repeated_key finds a key named twice in any one object, and only there") {
  CHECK(!repeated_key(R"({"a": 1, "b": 2})"));
  CHECK(!repeated_key(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})"));  // the same name in different objects
  const auto top = repeated_key(R"({"price": "1", "quantity": 2, "price": "5"})");
  REQUIRE(top);
  CHECK(top->key == "price");
  CHECK(top->field() == "price");  // a field of the request: named as the error's field
  const auto nested = repeated_key(R"({"x": [{"k": 1, "k": 2}]})");
  REQUIRE(nested);
  CHECK(nested->key == "k");
  CHECK(nested->field().empty());  // not a field of the request
  CHECK(nested->message() == R"(an object names "k" twice)");
  CHECK(repeated_key(R"({"x": {"y": {"z": 1, "z": 1}}})")->key == "z");
  CHECK(repeated_key(R"({"\u0061": 1, "a": 2})")->key == "a");  // an escape is the character it stands for
  // A key split across the parser's parts (long, with escapes) is still one key.
  const std::string long_key(5000, 'k');
  const auto split = repeated_key("{\"" + long_key + "\\n\": 1, \"" + long_key + "\\n\": 2}");
  REQUIRE(split);
  CHECK(split->key == long_key + "\n");
  CHECK(split->field().empty());  // too long to repeat back
  CHECK(!repeated_key("{not json"));  // the caller's parse answers that
}

TEST_CASE("canonical_json is the same for the same value, whatever the spacing and key order") {
  const auto canon = [](const char* text) { return canonical_json(boost::json::parse(text)); };
  CHECK(canon(R"({"b": [1, {"d": null, "c": true}], "a": "x"})") == R"({"a":"x","b":[1,{"c":true,"d":null}]})");
  CHECK(canon(R"( { "a" : 1 , "b" : 2 } )") == canon(R"({"b":2,"a":1})"));
  CHECK(canon(R"({"s": "\u00e9\"\n"})") == canon("{\"s\": \"\xc3\xa9\\\"\\n\"}"));
  // What differs in value still differs: array order, a decimal string's digits, number types.
  CHECK(canon("[1, 2]") != canon("[2, 1]"));
  CHECK(canon(R"({"p": "1.4"})") != canon(R"({"p": "1.40"})"));
  CHECK(canon(R"({"n": 1})") != canon(R"({"n": 2})"));
  CHECK(canon("{}") == "{}");
  CHECK(canon("[]") == "[]");
}
