// libpq wrappers: see connection.hpp.
#include "server/store/connection.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cstring>

namespace gpuex::store {

std::string_view PgResult::text(int row, int col) const {
  if (row < 0 || row >= rows() || col < 0 || col >= columns()) {
    throw std::out_of_range("PgResult: no cell at row " + std::to_string(row) + ", column " +
                            std::to_string(col));
  }
  return {PQgetvalue(res_.get(), row, col),
          static_cast<std::size_t>(PQgetlength(res_.get(), row, col))};
}

long long PgResult::integer(int row, int col) const {
  auto s = text(row, col);
  long long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    throw StoreError("expected an integer in column " + std::to_string(col) + ", got '" +
                     std::string(s) + "'");
  }
  return v;
}

PgConnection PgConnection::connect(const std::string& dsn, std::chrono::seconds connect_timeout,
                                   const char* application_name) {
  const std::string timeout = std::to_string(connect_timeout.count());
  const char* keys[] = {"dbname", "connect_timeout", "application_name", nullptr};
  const char* values[] = {dsn.c_str(), timeout.c_str(), application_name, nullptr};
  // expand_dbname=1: the dsn may be a URL or key=value string; later keys fill what it leaves out.
  PGconn* raw = PQconnectdbParams(keys, values, 1);
  PgConnection conn(raw);
  if (raw == nullptr) throw StoreError("out of memory creating a PostgreSQL connection");
  if (PQstatus(raw) != CONNECTION_OK) {
    std::string msg = PQerrorMessage(raw);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    throw StoreError("cannot connect to PostgreSQL at " + describe_dsn(dsn) + ": " + msg);
  }
  // Notices ("table exists, skipping") are not errors; keep them off stderr.
  PQsetNoticeProcessor(raw, [](void*, const char*) {}, nullptr);
  return conn;
}

namespace {
[[noreturn]] void throw_result_error(PGconn* conn, PGresult* res) {
  std::string msg = res ? PQresultErrorMessage(res) : PQerrorMessage(conn);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  if (res) PQclear(res);
  throw StoreError(msg.empty() ? "PostgreSQL statement failed" : msg);
}
}  // namespace

PgResult PgConnection::exec(const char* sql, const std::vector<Param>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  PGresult* res = PQexecParams(conn_.get(), sql, static_cast<int>(values.size()), nullptr,
                               values.data(), nullptr, nullptr, 0);
  auto status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) throw_result_error(conn_.get(), res);
  return PgResult(res);
}

void PgConnection::prepare(const Statement& statement) {
  PGresult* res = PQprepare(conn_.get(), statement.name, statement.sql, 0, nullptr);
  if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) throw_result_error(conn_.get(), res);
  PQclear(res);
}

void PgConnection::exec_script(std::string_view sql) {
  std::string text(sql);
  PGresult* res = PQexec(conn_.get(), text.c_str());
  auto status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) throw_result_error(conn_.get(), res);
  PQclear(res);
}

BinaryArray::BinaryArray(Type type) : type_(type), data_(20, '\0') {}

void BinaryArray::put32(std::uint32_t v) {
  char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
  data_.append(b, 4);
}

void BinaryArray::put64(std::uint64_t v) {
  put32(static_cast<std::uint32_t>(v >> 32));
  put32(static_cast<std::uint32_t>(v));
}

void BinaryArray::add_integer(std::int64_t v) {
  ++count_;
  if (type_ == Type::int8) {
    put32(8), put64(static_cast<std::uint64_t>(v));
  } else if (type_ == Type::int4) {
    if (v < INT32_MIN || v > INT32_MAX) throw StoreError("BinaryArray: " + std::to_string(v) + " does not fit an integer");
    put32(4), put32(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)));
  } else {
    throw StoreError("BinaryArray: an integer added to an array of another type");
  }
}

void BinaryArray::add(bool v) {
  if (type_ != Type::boolean) throw StoreError("BinaryArray: a boolean added to an array of another type");
  ++count_;
  put32(1);
  data_ += v ? '\1' : '\0';
}

void BinaryArray::add(std::string_view bytes) {
  if (type_ != Type::text && type_ != Type::json && type_ != Type::jsonb && type_ != Type::bytea) {
    throw StoreError("BinaryArray: text added to an array of another type");
  }
  const bool jsonb = type_ == Type::jsonb;
  if (bytes.size() + jsonb > INT32_MAX) throw StoreError("BinaryArray: an element over 2 GB");
  ++count_;
  put32(static_cast<std::uint32_t>(bytes.size() + jsonb));
  if (jsonb) data_ += '\1';  // jsonb_recv's format version
  data_.append(bytes);
}

void BinaryArray::add_null() {
  ++count_;
  has_null_ = true;
  put32(0xFFFFFFFFu);  // length -1
}

const std::string& BinaryArray::bytes() {
  // ndim, has-null flag, element type, then the one dimension's length and lower bound.
  std::uint32_t header[5] = {1, has_null_ ? 1u : 0u, static_cast<std::uint32_t>(type_), count_, 1};
  for (int i = 0; i < 5; ++i) {
    for (int b = 0; b < 4; ++b) data_[static_cast<std::size_t>(i * 4 + b)] = static_cast<char>(header[i] >> (24 - 8 * b));
  }
  return data_;
}

Pipeline::Pipeline(PgConnection& conn, std::chrono::milliseconds answer_within)
    : conn_(conn), answer_within_(answer_within) {
  if (PQenterPipelineMode(conn_.raw()) != 1) throw StoreError("cannot enter pipeline mode: " + std::string(PQerrorMessage(conn_.raw())));
}

Pipeline::~Pipeline() {
  // Only possible once every answer was read; after a failure the connection is dropped anyway.
  if (PQpipelineStatus(conn_.raw()) != PQ_PIPELINE_OFF) PQexitPipelineMode(conn_.raw());
}

void Pipeline::send(const char* sql, const std::vector<Param>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  if (PQsendQueryParams(conn_.raw(), sql, static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr,
                        0) != 1) {
    throw StoreError("cannot send a statement: " + std::string(PQerrorMessage(conn_.raw())));
  }
  sent();
}

void Pipeline::send(const Statement& prepared, const std::vector<Param>& params) {
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  if (PQsendQueryPrepared(conn_.raw(), prepared.name, static_cast<int>(values.size()), values.data(), nullptr, nullptr,
                          0) != 1) {
    throw StoreError("cannot send statement " + std::string(prepared.name) + ": " + PQerrorMessage(conn_.raw()));
  }
  sent();
}

void Pipeline::send(const char* sql, const std::vector<BinaryArray*>& arrays) { send_binary(sql, false, arrays); }

void Pipeline::send(const Statement& prepared, const std::vector<BinaryArray*>& arrays) {
  send_binary(prepared.name, true, arrays);
}

void Pipeline::send_binary(const char* name_or_sql, bool prepared, const std::vector<BinaryArray*>& arrays) {
  std::vector<const char*> values;
  std::vector<int> lengths, formats(arrays.size(), 1);
  values.reserve(arrays.size()), lengths.reserve(arrays.size());
  for (auto* a : arrays) {
    const std::string& b = a->bytes();
    values.push_back(b.data()), lengths.push_back(static_cast<int>(b.size()));
  }
  const int n = static_cast<int>(arrays.size());
  int ok = prepared ? PQsendQueryPrepared(conn_.raw(), name_or_sql, n, values.data(), lengths.data(), formats.data(), 0)
                    : PQsendQueryParams(conn_.raw(), name_or_sql, n, nullptr, values.data(), lengths.data(), formats.data(), 0);
  if (ok != 1) {
    throw StoreError("cannot send a statement" + (prepared ? " " + std::string(name_or_sql) : std::string()) + ": " +
                     PQerrorMessage(conn_.raw()));
  }
  sent();
}

void Pipeline::sent() {
  // Reading answers now and then keeps both sides' socket buffers from filling up.
  if (++pending_ >= 256) sync();
}

void Pipeline::await_result(std::chrono::steady_clock::time_point deadline) {
  if (answer_within_.count() <= 0) return;
  PGconn* c = conn_.raw();
  while (PQisBusy(c)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      throw StoreError("PostgreSQL did not answer within " + std::to_string(answer_within_.count()) + " ms");
    }
    pollfd p{PQsocket(c), POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno != EINTR) throw StoreError(std::string("cannot wait for PostgreSQL: ") + std::strerror(errno));
    if (r > 0 && PQconsumeInput(c) != 1) throw StoreError("connection lost: " + std::string(PQerrorMessage(c)));
  }
}

void Pipeline::sync() {
  if (PQpipelineSync(conn_.raw()) != 1) throw StoreError("cannot sync the pipeline: " + std::string(PQerrorMessage(conn_.raw())));
  const auto deadline = std::chrono::steady_clock::now() + answer_within_;
  std::string first_error;
  int remaining = pending_;
  pending_ = 0;
  // One or more results then a null per statement, then the sync's own result.
  while (remaining > 0) {
    await_result(deadline);
    PGresult* res = PQgetResult(conn_.raw());
    if (res == nullptr) {
      --remaining;
      continue;
    }
    auto status = PQresultStatus(res);
    if (status == PGRES_FATAL_ERROR && first_error.empty()) first_error = PQresultErrorMessage(res);
    if (status == PGRES_PIPELINE_ABORTED && first_error.empty()) first_error = "statement skipped after an earlier error";
    PQclear(res);
    if (PQstatus(conn_.raw()) != CONNECTION_OK) throw StoreError("connection lost: " + std::string(PQerrorMessage(conn_.raw())));
  }
  await_result(deadline);
  PGresult* res = PQgetResult(conn_.raw());
  bool synced = res && PQresultStatus(res) == PGRES_PIPELINE_SYNC;
  if (res) PQclear(res);
  if (!synced) throw StoreError("pipeline out of step: " + std::string(PQerrorMessage(conn_.raw())));
  if (!first_error.empty()) {
    while (!first_error.empty() && (first_error.back() == '\n' || first_error.back() == ' ')) first_error.pop_back();
    throw StoreError(first_error);
  }
}

std::string describe_dsn(const std::string& dsn) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(dsn.c_str(), &err);
  if (opts == nullptr) {
    if (err) PQfreemem(err);
    return "(unparsable DSN)";
  }
  std::string host, port, db;
  for (auto* o = opts; o->keyword; ++o) {
    if (!o->val) continue;
    std::string_view key = o->keyword;
    if (key == "host" || key == "hostaddr") host = o->val;
    if (key == "port") port = o->val;
    if (key == "dbname") db = o->val;
  }
  PQconninfoFree(opts);
  return (host.empty() ? "localhost" : host) + ":" + (port.empty() ? "5432" : port) + "/" + db;
}

}  // namespace gpuex::store
