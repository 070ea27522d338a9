// A libpq connection and result with RAII, parameterised queries only, and errors as StoreError.
#pragma once

#include <libpq-fe.h>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gpuex::store {

// The database cannot be reached or failed a statement: an infrastructure failure, not bad input.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One result set, text format. Row and column indexes are checked.
class PgResult {
 public:
  explicit PgResult(PGresult* res) : res_(res, &PQclear) {}
  int rows() const { return PQntuples(res_.get()); }
  int columns() const { return PQnfields(res_.get()); }
  bool is_null(int row, int col) const { return PQgetisnull(res_.get(), row, col) != 0; }
  std::string_view text(int row, int col) const;
  long long integer(int row, int col) const;
  std::string affected() const { return PQcmdTuples(res_.get()); }

 private:
  std::unique_ptr<PGresult, decltype(&PQclear)> res_;
};

// A query parameter in text form; nullopt is SQL NULL.
using Param = std::optional<std::string>;

// A one-dimensional array parameter in PostgreSQL's binary format (array_recv), for the writer's
// unnest statements: the server copies each element as it is instead of parsing an array literal
// ("{...}", quoted and backslash-escaped) and then each element's text (int8in, ...). The element
// type must be the one the statement casts the parameter to ($1::bigint[] takes int8).
class BinaryArray {
 public:
  enum class Type : std::uint32_t { boolean = 16, bytea = 17, int8 = 20, int4 = 23, text = 25, json = 114, jsonb = 3802 };
  explicit BinaryArray(Type type);

  template <std::integral T>
    requires(!std::same_as<T, bool>)
  void add(T v) {
    add_integer(static_cast<std::int64_t>(v));
  }
  void add(bool v);
  // text, json, jsonb (its version byte is added) or bytea (raw bytes).
  void add(std::string_view bytes);
  void add_null();
  std::uint32_t size() const { return count_; }
  // The parameter's bytes: the header then the elements.
  const std::string& bytes();

 private:
  void add_integer(std::int64_t v);
  void put32(std::uint32_t v);
  void put64(std::uint64_t v);
  Type type_;
  std::uint32_t count_ = 0;
  bool has_null_ = false;
  std::string data_;  // header (20 bytes, filled in by bytes()) then elements
};

// A named statement, prepared once per connection (PgConnection::prepare) and then sent by name.
struct Statement {
  const char* name;
  const char* sql;
};

class PgConnection {
 public:
  // Connects or throws StoreError; `connect_timeout` bounds the wait on an unreachable server. The
  // application name tells an operator (pg_stat_activity) which part of gpuexd a backend serves.
  static PgConnection connect(const std::string& dsn,
                              std::chrono::seconds connect_timeout = std::chrono::seconds(5),
                              const char* application_name = "gpuexd");

  PgResult exec(const char* sql, const std::vector<Param>& params = {});
  void prepare(const Statement& statement);
  // Runs several statements with no parameters (migrations, BEGIN/COMMIT).
  void exec_script(std::string_view sql);

  bool healthy() const { return PQstatus(conn_.get()) == CONNECTION_OK; }
  std::string host() const { return PQhost(conn_.get()); }
  std::string port() const { return PQport(conn_.get()); }
  std::string database() const { return PQdb(conn_.get()); }
  PGconn* raw() { return conn_.get(); }
  int backend_pid() const { return PQbackendPID(conn_.get()); }  // 0 when not connected

 private:
  explicit PgConnection(PGconn* conn) : conn_(conn, &PQfinish) {}
  std::unique_ptr<PGconn, decltype(&PQfinish)> conn_;
};

// Sends statements without waiting for each answer (libpq pipeline mode); sync() then reads every
// answer and throws StoreError with the first failure. Leaves pipeline mode when destroyed.
class Pipeline {
 public:
  // `answer_within` > 0: sync() throws StoreError when PostgreSQL sends nothing for that long (a frozen
  // or stalled server), so the caller fails the transaction instead of waiting for ever.
  explicit Pipeline(PgConnection& conn, std::chrono::milliseconds answer_within = {});
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  void send(const char* sql, const std::vector<Param>& params = {});
  void send(const Statement& prepared, const std::vector<Param>& params);
  // Every parameter a binary array (BinaryArray::bytes()).
  void send(const char* sql, const std::vector<BinaryArray*>& arrays);
  void send(const Statement& prepared, const std::vector<BinaryArray*>& arrays);
  void sync();

 private:
  void sent();
  void await_result(std::chrono::steady_clock::time_point deadline);
  void send_binary(const char* name_or_sql, bool prepared, const std::vector<BinaryArray*>& arrays);

  PgConnection& conn_;
  std::chrono::milliseconds answer_within_;
  int pending_ = 0;  // statements sent since the last sync
};

// "host:port/db" of a DSN without its password, for logs.
std::string describe_dsn(const std::string& dsn);

}  // namespace gpuex::store
