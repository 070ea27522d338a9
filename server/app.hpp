// gpuexd's `serve`: checks the database, starts every service, serves until SIGINT/SIGTERM.
#pragma once

#include <string>

#include "server/config.hpp"

namespace gpuex {

// Runs the server in the calling thread until a stop signal; returns the process exit code.
int serve(const ServerConfig& config);

// Applies pending migrations (`gpuexd migrate`); returns the process exit code.
int migrate(const ServerConfig& config);

// `gpuexd admin create-account`: prints the new account and its key (shown once) as JSON.
int admin_create_account(const ServerConfig& config, const std::string& name, const std::string& scopes);
// `gpuexd admin revoke-key`: works while servers run (they hear of it at once); 1 if there is no such key.
int admin_revoke_key(const ServerConfig& config, const std::string& key_id);

}  // namespace gpuex
