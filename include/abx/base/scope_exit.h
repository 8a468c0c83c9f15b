// Runs a callable when the scope ends: the undo-on-failure blocks of multi-step set-ups
// (runtime's spawn and restore), which check their own "committed" flag.
//
//   bool committed = false;
//   ScopeExit undo{[&] { if (!committed) remove_what_was_made(); }};
#pragma once

#include <utility>

namespace abx {

template <class F>
class ScopeExit {
 public:
  explicit ScopeExit(F f) : f_(std::move(f)) {}
  ~ScopeExit() { f_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  F f_;
};

}  // namespace abx
