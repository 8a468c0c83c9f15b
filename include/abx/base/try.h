// ABX_TRY / ABX_ASSIGN_OR_RETURN: early return of an abx::Error from a function that returns
// Result<T> or Status. The one home of these macros (abseil's RETURN_IF_ERROR/ASSIGN_OR_RETURN).
//
//   ABX_TRY(write_file(p));                       // Status or Result<T>; the value is dropped
//   ABX_ASSIGN_OR_RETURN(auto fd, open_at(d, p));  // declares fd from the Result's value
//   ABX_ASSIGN_OR_RETURN(cfg.port, parse_port(s)); // assigns to an existing lvalue
//
// Statement macros (not expressions), so they work under -Wpedantic without GNU extensions.
#pragma once

#include <utility>

#include "abx/base/error.h"

#define ABX_TRY(expr)                                          \
  do {                                                         \
    auto&& abx_try_status_ = (expr);                           \
    if (!abx_try_status_.ok()) return abx_try_status_.error(); \
  } while (0)

#define ABX_TRY_CONCAT_INNER_(a, b) a##b
#define ABX_TRY_CONCAT_(a, b) ABX_TRY_CONCAT_INNER_(a, b)

#define ABX_ASSIGN_OR_RETURN(lhs, expr) \
  ABX_ASSIGN_OR_RETURN_IMPL_(ABX_TRY_CONCAT_(abx_try_result_, __LINE__), lhs, expr)

#define ABX_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.error();               \
  lhs = std::move(*tmp)
