// Thin RAII over the SQLite C API for abx::store: a connection, prepared statements, and one
// mapping from SQLite result codes to abx::ErrorCode. Values are always bound, never spliced
// into SQL text.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "abx/base/error.h"
#include "abx/base/try.h"

namespace abx::store::sql {

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// Maps an (extended) SQLite result code to a canonical error; `step` names the operation.
Error map_error(int rc, sqlite3* db, std::string_view step);

// A prepared statement borrowed from the connection's cache. Resets and clears its bindings when
// it goes out of scope, so the cached statement is ready for the next user.
class Stmt {
 public:
  Stmt(sqlite3* db, sqlite3_stmt* s, std::string_view step) : db_(db), s_(s), step_(step) {}
  ~Stmt() {
    if (s_ != nullptr) {
      sqlite3_reset(s_);
      sqlite3_clear_bindings(s_);
    }
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt(Stmt&& o) noexcept : db_(o.db_), s_(o.s_), step_(o.step_) { o.s_ = nullptr; }

  Stmt& bind(int i, std::string_view v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
  Stmt& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
  Stmt& bind(int i, std::int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& bind(int i, int v) { return bind(i, static_cast<std::int64_t>(v)); }
  Stmt& bind(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Stmt& bind_null(int i) {
    sqlite3_bind_null(s_, i);
    return *this;
  }

  // true: a row is available; false: done. Errors are mapped with the step name.
  Result<bool> step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return map_error(rc, db_, step_);
  }
  // Runs a statement that returns no rows.
  Status exec() {
    ABX_TRY(step());
    return {};
  }

  std::string text(int col) const {
    const unsigned char* p = sqlite3_column_text(s_, col);
    int n = sqlite3_column_bytes(s_, col);
    return p == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(p), n);
  }
  std::int64_t int64(int col) const { return sqlite3_column_int64(s_, col); }
  double real(int col) const { return sqlite3_column_double(s_, col); }
  bool is_null(int col) const { return sqlite3_column_type(s_, col) == SQLITE_NULL; }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_;
  std::string_view step_;
};

// A connection with a statement cache keyed by SQL text.
class Connection {
 public:
  static Result<Connection> open(const std::string& path, int busy_timeout_ms);

  sqlite3* get() const { return db_.get(); }
  // `step` must outlive the returned Stmt (pass a string literal).
  Result<Stmt> prepare(std::string_view sql, std::string_view step);
  // Runs SQL without bound values (pragmas, DDL, BEGIN/COMMIT).
  Status exec(const char* sql, std::string_view step);
  std::int64_t changes() const { return sqlite3_changes64(db_.get()); }

 private:
  DbPtr db_;
  std::unordered_map<std::string, StmtPtr> cache_;
};

}  // namespace abx::store::sql
