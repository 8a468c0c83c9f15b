#include "sqlite.h"

namespace abx::store::sql {

Error map_error(int rc, sqlite3* db, std::string_view step) {
  std::string msg = "sqlite: " + std::string(step) + ": ";
  msg += (db != nullptr && sqlite3_extended_errcode(db) == rc) ? sqlite3_errmsg(db)
                                                               : sqlite3_errstr(rc);
  switch (rc) {
    case SQLITE_CONSTRAINT_PRIMARYKEY:
    case SQLITE_CONSTRAINT_UNIQUE:
      return {ErrorCode::kAlreadyExists, std::move(msg)};
    case SQLITE_CONSTRAINT_CHECK:
    case SQLITE_CONSTRAINT_NOTNULL:
      return {ErrorCode::kInvalidArgument, std::move(msg)};
    default:
      break;
  }
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
      return {ErrorCode::kAlreadyExists, std::move(msg)};
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
      return {ErrorCode::kUnavailable, std::move(msg)};
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return {ErrorCode::kPermissionDenied, std::move(msg)};
    case SQLITE_FULL:
      return {ErrorCode::kInsufficientStorage, std::move(msg)};
    case SQLITE_NOMEM:
      return {ErrorCode::kResourceExhausted, std::move(msg)};
    case SQLITE_TOOBIG:
    case SQLITE_RANGE:
    case SQLITE_MISMATCH:
      return {ErrorCode::kInvalidArgument, std::move(msg)};
    default:
      return {ErrorCode::kInternal, std::move(msg)};
  }
}

Result<Connection> Connection::open(const std::string& path, int busy_timeout_ms) {
  sqlite3* raw = nullptr;
  // FULLMUTEX: the Store also serialises, but this keeps SQLite safe if that ever changes.
  // NOFOLLOW: the database path itself must not be a symlink someone planted.
  int rc = sqlite3_open_v2(path.c_str(), &raw,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX |
                               SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_EXRESCODE,
                           nullptr);
  DbPtr db(raw);
  if (rc != SQLITE_OK) return map_error(rc, raw, "open " + path);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, busy_timeout_ms);
  Connection c;
  c.db_ = std::move(db);
  return c;
}

Result<Stmt> Connection::prepare(std::string_view sql, std::string_view step) {
  auto it = cache_.find(std::string(sql));
  if (it == cache_.end()) {
    sqlite3_stmt* s = nullptr;
    int rc = sqlite3_prepare_v3(db_.get(), sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &s, nullptr);
    if (rc != SQLITE_OK) return map_error(rc, db_.get(), step);
    it = cache_.emplace(std::string(sql), StmtPtr(s)).first;
  }
  return Stmt(db_.get(), it->second.get(), step);
}

Status Connection::exec(const char* sql, std::string_view step) {
  int rc = sqlite3_exec(db_.get(), sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return map_error(rc, db_.get(), step);
  return {};
}

}  // namespace abx::store::sql
