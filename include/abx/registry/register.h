// ABX_REGISTER: the C++ form of the prototype's `@sandbox.register` decorator.
//
//   ABX_REGISTER(std::string, demo, (int x, std::string y = "hello"), "Run a demo command.") {
//     return std::to_string(x) + ": " + y;
//   }
//
// registers `demo` in default_registry(): the function name is the command name, the parameter
// list is the argument schema and the string is the description. Parameter types map to
// argument types as
//   int, long, long long, std::int64_t, other signed/unsigned integers  -> integer (range of the
//   type) float, double                                                        -> float bool ->
//   boolean std::string (by value or const&)                                     -> string
// Any other parameter type is a compile-time error. A parameter with a literal default (a
// number, true/false or a string literal) is optional with that default; the defaults are
// written once, in the parameter list (the registrar re-declares the function at block scope,
// where a declaration keeps its own default arguments). A non-literal default is reported by
// the server at start-up, since the schema could not publish it.
// Return types: void (null), the scalars above, std::string, boost::json values, and
// std::vector / std::map<std::string, …> of those. A return type with a comma can be written
// in parentheses: ABX_REGISTER((std::map<std::string, int>), counts, (), "…").
#pragma once

#include <algorithm>
#include <boost/json/value_from.hpp>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "abx/registry/registry.h"

namespace abx::registry::detail {

template <class T>
inline constexpr bool is_char_v =
    std::is_same_v<T, char> || std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char> ||
    std::is_same_v<T, wchar_t> || std::is_same_v<T, char8_t> || std::is_same_v<T, char16_t> ||
    std::is_same_v<T, char32_t>;

template <class T>
inline constexpr bool is_integer_param_v =
    std::is_integral_v<T> && !std::is_same_v<T, bool> && !is_char_v<T>;

template <class T>
inline constexpr bool is_supported_param_v =
    is_integer_param_v<T> || std::is_same_v<T, float> || std::is_same_v<T, double> ||
    std::is_same_v<T, bool> || std::is_same_v<T, std::string>;

template <class T>
using param_t = std::remove_cvref_t<T>;

template <class T>
struct returnable
    : std::bool_constant<is_supported_param_v<T> || std::is_same_v<T, boost::json::value> ||
                         std::is_same_v<T, boost::json::object> ||
                         std::is_same_v<T, boost::json::array> ||
                         std::is_same_v<T, boost::json::string>> {};
template <class T, class A>
struct returnable<std::vector<T, A>> : returnable<T> {};
template <class V, class C, class A>
struct returnable<std::map<std::string, V, C, A>> : returnable<V> {};
template <class V, class H, class E, class A>
struct returnable<std::unordered_map<std::string, V, H, E, A>> : returnable<V> {};
template <>
struct returnable<void> : std::true_type {};

// Strips optional parentheses around a macro's type argument: strip_t<void(int)> is int and
// strip_t<void((std::map<a, b>))> is std::map<a, b>.
template <class T>
struct strip;
template <class T>
struct strip<void(T)> {
  using type = T;
};
template <>
struct strip<void()> {
  using type = void;
};
template <class T>
using strip_t = typename strip<T>::type;

template <class T>
CommandArg make_arg(std::string name) {
  using P = param_t<T>;
  static_assert(is_supported_param_v<P>,
                "abx: unsupported command parameter type; use an integer type, float, double, "
                "bool or std::string");
  CommandArg a;
  a.name = std::move(name);
  if constexpr (is_integer_param_v<P>) {
    a.type = ArgType::kInteger;
    if constexpr (std::is_signed_v<P>) {
      a.minimum = static_cast<std::int64_t>(std::numeric_limits<P>::min());
    } else {
      a.minimum = 0;
    }
    if constexpr (sizeof(P) < sizeof(std::int64_t) ||
                  (sizeof(P) == sizeof(std::int64_t) && std::is_signed_v<P>)) {
      a.maximum = static_cast<std::int64_t>(std::numeric_limits<P>::max());
    } else {
      a.maximum = std::numeric_limits<std::int64_t>::max();
    }
  } else if constexpr (std::is_same_v<P, float>) {
    a.type = ArgType::kFloat;
    a.max_magnitude = static_cast<double>(std::numeric_limits<float>::max());
  } else if constexpr (std::is_same_v<P, double>) {
    a.type = ArgType::kFloat;
  } else if constexpr (std::is_same_v<P, bool>) {
    a.type = ArgType::kBoolean;
  } else {
    a.type = ArgType::kString;
  }
  return a;
}

// Converts a coerced kwarg (see coerce.h) to the parameter's C++ type.
template <class T>
param_t<T> from_kwarg(const boost::json::object& kw, const std::string& name) {
  using P = param_t<T>;
  auto it = kw.find(name);
  if (it == kw.end()) return P{};
  const boost::json::value& v = it->value();
  if constexpr (is_integer_param_v<P>) {
    return static_cast<P>(v.as_int64());
  } else if constexpr (std::is_floating_point_v<P>) {
    return static_cast<P>(v.is_double() ? v.as_double() : static_cast<double>(v.as_int64()));
  } else if constexpr (std::is_same_v<P, bool>) {
    return v.as_bool();
  } else {
    return std::string(v.as_string());
  }
}

template <class F>
struct fn_traits : fn_traits<decltype(&std::remove_cvref_t<F>::operator())> {};
template <class R, class... A>
struct fn_traits<R (*)(A...)> {
  using ret = R;
  using args = std::tuple<A...>;
};
template <class R, class... A>
struct fn_traits<R (*)(A...) noexcept> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...)> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const noexcept> : fn_traits<R (*)(A...)> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) noexcept> : fn_traits<R (*)(A...)> {};

template <class R, class... A>
constexpr void check_signature() {
  static_assert(returnable<std::remove_cvref_t<R>>::value,
                "abx: unsupported command return type; use void, a scalar, std::string, a "
                "boost::json value, or std::vector / std::map<std::string, ...> of those");
  static_assert((is_supported_param_v<param_t<A>> && ...),
                "abx: unsupported command parameter type; use an integer type, float, double, "
                "bool or std::string");
}

// Builds the type-erased CommandFn that converts kwargs and calls fn.
template <class R, class... A, class F, std::size_t... I>
CommandFn make_invoker(F fn, std::vector<std::string> names, std::index_sequence<I...>) {
  return [fn = std::move(fn), names = std::move(names)](const boost::json::object& kw) {
    if constexpr (std::is_void_v<R>) {
      fn(from_kwarg<A>(kw, names[I])...);
      return boost::json::value(nullptr);
    } else {
      return boost::json::value_from(fn(from_kwarg<A>(kw, names[I])...));
    }
  };
}

template <class Probe, class Tuple, std::size_t... I>
constexpr bool invocable_with_prefix(std::index_sequence<I...>) {
  return std::is_invocable_v<const Probe&, std::tuple_element_t<I, Tuple>...>;
}

// The number of leading parameters without a default: the shortest prefix of the argument list
// with which the probe (a lambda with the same parameter list, defaults included) is callable.
template <class Probe, class... A>
constexpr std::size_t count_required() {
  using T = std::tuple<A...>;
  return []<std::size_t... K>(std::index_sequence<K...>) {
    std::size_t r = sizeof...(A);
    ((invocable_with_prefix<Probe, T>(std::make_index_sequence<K>{}) ? (r = std::min(r, K), 0) : 0),
     ...);
    return r;
  }
  (std::make_index_sequence<sizeof...(A) + 1>{});
}

// Parameter names and default texts from the stringified parameter list.
struct ParamText {
  std::string name;
  std::string default_text;  // empty when there is none
};
Result<std::vector<ParamText>> parse_param_list(std::string_view text);
// A C++ literal (integer, floating, true/false, string) as a JSON value of the given type.
Result<boost::json::value> parse_default_literal(std::string_view text, ArgType type);

// Makes `arg` optional with default `v`, after checking v against the type and range (a float
// default may be written as an integer). Throws RegistryError.
void set_default(CommandArg& arg, boost::json::value v);

// Finishes a registration: reports (rather than throws) mistakes, since it runs during static
// initialisation; the server refuses to start while default_registry().errors() is non-empty.
void finish_macro_registration(RegisteredCommand cmd, std::string_view params_text,
                               std::size_t required);

template <class R, class... A, class Probe>
void register_function(const char* name, R (*fn)(A...), const char* params_text,
                       const char* description, const Probe&) {
  check_signature<R, A...>();
  RegisteredCommand cmd;
  cmd.name = name;
  cmd.description = description;
  std::vector<std::string> names;
  auto parsed = parse_param_list(params_text);
  if (parsed.ok() && parsed->size() == sizeof...(A)) {
    for (const auto& p : *parsed) names.push_back(p.name);
    std::size_t i = 0;
    ((cmd.args.push_back(make_arg<A>(names[i])), ++i), ...);
  }
  cmd.fn = make_invoker<R, A...>(fn, names, std::index_sequence_for<A...>{});
  finish_macro_registration(std::move(cmd), params_text, count_required<Probe, A...>());
}

// ABX_HINTS' body: sets the hints, recording (not throwing) a mistake, as during static
// initialisation a throw would abort the process before main.
inline void set_macro_hints(const char* name, CommandHints hints) {
  try {
    default_registry().set_hints(name, hints);
  } catch (const RegistryError& e) {
    default_registry().record_error(std::string("ABX_HINTS(") + name + "): " + e.what() +
                                    " (write ABX_HINTS after the command's ABX_REGISTER, in the "
                                    "same file)");
  }
}

// ABX_INLINE's body: like set_macro_hints, records a mistake instead of throwing.
inline void set_macro_execution(const char* name, Execution execution) {
  try {
    default_registry().set_execution(name, execution);
  } catch (const RegistryError& e) {
    default_registry().record_error(std::string("ABX_INLINE(") + name + "): " + e.what() +
                                    " (write ABX_INLINE after the command's ABX_REGISTER, in the "
                                    "same file)");
  }
}

struct Registrar {
  template <class F>
  explicit Registrar(F&& f) {
    f();
  }
};

}  // namespace abx::registry::detail

namespace abx::registry {

template <class F>
void CommandBuilder::bind(F&& fn) {
  using traits = detail::fn_traits<F>;
  using R = typename traits::ret;
  [&]<class... A>(std::tuple<A...>*) {
    detail::check_signature<R, A...>();
    if (names_.size() != sizeof...(A)) {
      throw RegistryError("command '" + cmd_.name + "': " + std::to_string(names_.size()) +
                          " names given with arg() for a function of " +
                          std::to_string(sizeof...(A)) + " parameters");
    }
    std::size_t i = 0;
    ((cmd_.args.push_back(detail::make_arg<A>(names_[i].name)), ++i), ...);
    std::vector<std::string> names;
    bool seen_default = false;
    for (std::size_t k = 0; k < names_.size(); ++k) {
      CommandArg& arg = cmd_.args[k];
      arg.description = names_[k].description;
      if (names_[k].default_value) {
        detail::set_default(arg, *names_[k].default_value);
        seen_default = true;
      } else if (seen_default) {
        throw RegistryError("command '" + cmd_.name + "': argument '" + arg.name +
                            "' without a default follows one with a default");
      } else {
        arg.required = true;
      }
      names.push_back(arg.name);
    }
    cmd_.fn = detail::make_invoker<R, A...>(std::forward<F>(fn), std::move(names),
                                            std::index_sequence_for<A...>{});
  }(static_cast<typename traits::args*>(nullptr));
  reg_.register_command(std::move(cmd_));
}

}  // namespace abx::registry

#define ABX_REGISTER_CAT2_(a, b) a##b
#define ABX_REGISTER_CAT_(a, b) ABX_REGISTER_CAT2_(a, b)

// See the top of this file. The registrar lambda re-declares the function at block scope (so
// the registrar can take its address before the definition that follows the macro), and a
// probe lambda with the same parameter list tells which parameters have defaults.
#define ABX_REGISTER(RET, NAME, PARAMS, DESCRIPTION)                                               \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wunused-parameter\"") _Pragma( \
      "GCC diagnostic ignored \"-Wshadow\"") static const ::abx::registry::detail::Registrar       \
      ABX_REGISTER_CAT_(abx_registrar_, NAME)([] {                                                 \
        ::abx::registry::detail::strip_t<void(RET)> NAME PARAMS;                                   \
        ::abx::registry::detail::register_function(#NAME, &NAME, #PARAMS, DESCRIPTION,             \
                                                   [] PARAMS {});                                  \
      });                                                                                          \
  _Pragma("GCC diagnostic pop")::abx::registry::detail::strip_t<void(RET)> NAME PARAMS

// Client hints for a command registered with ABX_REGISTER, published as MCP tool annotations
// (readOnlyHint, destructiveHint, idempotentHint). Write it after the command's definition in
// the same file (static initialisers run in order within a file):
//   ABX_HINTS(divide, .read_only = true, .idempotent = true);
// The fields are those of abx::registry::CommandHints; unset fields stay "not stated".
#define ABX_HINTS(NAME, ...)                                                                     \
  static const ::abx::registry::detail::Registrar ABX_REGISTER_CAT_(abx_hints_, NAME)([] {       \
    ::abx::registry::detail::set_macro_hints(#NAME, ::abx::registry::CommandHints{__VA_ARGS__}); \
  })

// Runs a command registered with ABX_REGISTER on the server's I/O thread instead of the worker
// pool (abx::registry::Execution::kInline): no thread hop per call, but also no deadline, so
// only for quick commands that never block. Write it after the command's definition:
//   ABX_INLINE(add);
#define ABX_INLINE(NAME)                                                                      \
  static const ::abx::registry::detail::Registrar ABX_REGISTER_CAT_(abx_inline_, NAME)([] {   \
    ::abx::registry::detail::set_macro_execution(#NAME, ::abx::registry::Execution::kInline); \
  })
