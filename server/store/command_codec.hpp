// The command log's form of engine commands: JSON a later gpuexd reads back into equal commands.
#pragma once

#include <boost/json/object.hpp>

#include <string>
#include <string_view>

#include "matching/command.hpp"

namespace gpuex::store {

// The command's kind ("place_order", "tick", ...) and body.
std::string_view command_kind(const matching::CommandBody& body);
boost::json::object command_body_json(const matching::CommandBody& body);
// Throws StoreError when the stored body does not read back (a corrupt or foreign log).
matching::CommandBody command_body_from_json(std::string_view kind, const boost::json::object& body);

}  // namespace gpuex::store
