// ws::text_frame: the frame the hub builds once per message (RFC 6455 §5.2, server to client: FIN,
// text opcode, no mask). Expected bytes written out by hand from the RFC's length encoding.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "server/ws_hub.hpp"

namespace {

std::vector<unsigned> head(const std::string& frame, std::size_t n) {
  std::vector<unsigned> out;
  for (std::size_t i = 0; i < n && i < frame.size(); ++i) out.push_back(static_cast<unsigned char>(frame[i]));
  return out;
}

}  // namespace

TEST_CASE("ws frame: a short payload has a one-byte length") {
  auto f = gpuex::ws::text_frame(R"({"a":1})");
  CHECK(head(*f, 2) == std::vector<unsigned>{0x81, 7});
  CHECK(f->substr(2) == R"({"a":1})");
  CHECK(gpuex::ws::text_frame("")->size() == 2);
  CHECK(head(*gpuex::ws::text_frame(std::string(125, 'x')), 2) == std::vector<unsigned>{0x81, 125});
}

TEST_CASE("ws frame: 126 to 65535 bytes take the 16-bit length") {
  auto f = gpuex::ws::text_frame(std::string(126, 'x'));
  CHECK(head(*f, 4) == std::vector<unsigned>{0x81, 126, 0x00, 0x7E});
  CHECK(f->size() == 4 + 126);
  auto g = gpuex::ws::text_frame(std::string(65535, 'y'));
  CHECK(head(*g, 4) == std::vector<unsigned>{0x81, 126, 0xFF, 0xFF});
  CHECK(g->size() == 4 + 65535);
  CHECK(g->back() == 'y');
}

TEST_CASE("ws frame: over 65535 bytes take the 64-bit length") {
  // 70000 = 0x0001'1170
  auto f = gpuex::ws::text_frame(std::string(70000, 'z'));
  CHECK(head(*f, 10) == std::vector<unsigned>{0x81, 127, 0, 0, 0, 0, 0x00, 0x01, 0x11, 0x70});
  CHECK(f->size() == 10 + 70000);
  auto g = gpuex::ws::text_frame(std::string(65536, 'z'));
  CHECK(head(*g, 10) == std::vector<unsigned>{0x81, 127, 0, 0, 0, 0, 0, 0x01, 0x00, 0x00});
}
