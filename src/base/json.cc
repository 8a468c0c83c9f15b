#include "abx/base/json.h"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value_stack.hpp>
#include <cmath>
#include <string>
#include <vector>

namespace abx {
namespace {

namespace json = boost::json;

// A basic_parser handler that builds the value exactly as boost::json::parser does (through the
// public value_stack) and additionally tracks the keys of each open object to refuse duplicates.
class StrictHandler {
 public:
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();

  json::value_stack st;
  std::vector<std::vector<std::string>> keys;  // keys seen, per open object
  std::string key;                             // the key being assembled from parts
  std::string error;

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) {
    keys.emplace_back();
    return true;
  }
  bool on_object_end(std::size_t n, json::error_code&) {
    keys.pop_back();
    st.push_object(n);
    return true;
  }
  bool on_array_begin(json::error_code&) { return true; }
  bool on_array_end(std::size_t n, json::error_code&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    key.append(s.data(), s.size());
    st.push_chars(s);
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code& ec) {
    key.append(s.data(), s.size());
    if (key.find('\0') != std::string::npos) return fail(ec, "object key contains NUL");
    auto& seen = keys.back();
    for (const auto& k : seen) {
      if (k == key) return fail(ec, "duplicate object key \"" + key + "\"");
    }
    seen.push_back(std::move(key));
    key.clear();
    st.push_key(s);
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, std::size_t, json::error_code&) {
    st.push_string(s);
    return true;
  }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(std::int64_t i, json::string_view, json::error_code&) {
    st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code&) {
    st.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view s, json::error_code& ec) {
    if (!std::isfinite(d)) {
      return fail(ec, "number out of range: " + std::string(s.data(), s.size()));
    }
    st.push_double(d);
    return true;
  }
  bool on_bool(bool b, json::error_code&) {
    st.push_bool(b);
    return true;
  }
  bool on_null(json::error_code&) {
    st.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }

 private:
  bool fail(json::error_code& ec, std::string msg) {
    error = std::move(msg);
    ec = json::error::syntax;  // any error stops the parser; our message says what happened
    return false;
  }
};

}  // namespace

Result<json::value> parse_json_strict(std::string_view text, const JsonLimits& limits) {
  json::parse_options opt;
  opt.max_depth = limits.max_depth;
  opt.allow_comments = false;
  opt.allow_trailing_commas = false;
  opt.allow_invalid_utf8 = false;
  json::basic_parser<StrictHandler> p(opt);
  p.handler().st.reset();
  json::error_code ec;
  std::size_t n = p.write_some(false, text.data(), text.size(), ec);
  if (!ec && n < text.size()) ec = json::error::extra_data;
  if (ec) {
    std::string why = p.handler().error;
    if (why.empty()) {
      why = ec == json::error::too_deep
                ? "nesting deeper than " + std::to_string(limits.max_depth) + " levels"
                : ec.message();
    }
    return invalid_argument("malformed JSON at byte " + std::to_string(n) + ": " + why);
  }
  return p.handler().st.release();
}

std::string to_json_string(const json::value& v) { return json::serialize(v); }

}  // namespace abx
