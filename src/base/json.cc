#include "abx/base/json.h"

#include <algorithm>
#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value_stack.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abx/base/try.h"

namespace abx {
namespace {

namespace json = boost::json;

// The keys of the open objects, for the duplicate check: every key's characters back to back in
// one buffer, an (offset, size) per key, and where each open object's keys begin. One per thread,
// kept from parse to parse, so a warm parse allocates nothing for it (a request's JSON is parsed
// on the thread that serves it).
struct KeyScratch {
  std::string chars;
  std::vector<std::pair<std::size_t, std::size_t>> keys;
  std::vector<std::size_t> objects;

  std::string_view key(std::size_t i) const {
    return std::string_view(chars).substr(keys[i].first, keys[i].second);
  }
  // Emptied after each parse; a large document's buffers are given back rather than kept.
  void clear() {
    constexpr std::size_t kKeep = 64 * 1024;
    if (chars.capacity() > kKeep) std::string().swap(chars);
    if (keys.capacity() * sizeof(keys[0]) > kKeep) decltype(keys)().swap(keys);
    if (objects.capacity() * sizeof(objects[0]) > kKeep) decltype(objects)().swap(objects);
    chars.clear();
    keys.clear();
    objects.clear();
  }
};

// Up to this many keys an object's new key is compared with each key before it, and a
// duplicate is refused at the key. A larger object's keys are sorted once at its end: comparing
// every pair made an 869 KB object of 80,000 keys take 13.9 s of a server thread.
constexpr std::size_t kKeysScanned = 32;

// A basic_parser handler that builds the value exactly as boost::json::parser does (through the
// public value_stack) and additionally tracks the keys of each open object to refuse duplicates.
class StrictHandler {
 public:
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();

  StrictHandler(KeyScratch& scratch, unsigned char* temp, std::size_t temp_size)
      : st(json::storage_ptr(), temp, temp_size), k(scratch) {}

  json::value_stack st;
  KeyScratch& k;
  std::size_t key_start = 0;  // where the key being assembled from parts begins in k.chars
  bool in_key = false;
  std::string error;

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) {
    k.objects.push_back(k.keys.size());
    return true;
  }
  bool on_object_end(std::size_t n, json::error_code& ec) {
    const std::size_t first = k.objects.back();
    if (k.keys.size() - first > kKeysScanned) {
      std::vector<std::string_view> sorted;
      sorted.reserve(k.keys.size() - first);
      for (std::size_t i = first; i < k.keys.size(); ++i) sorted.push_back(k.key(i));
      std::sort(sorted.begin(), sorted.end());
      auto dup = std::adjacent_find(sorted.begin(), sorted.end());
      if (dup != sorted.end())
        return fail(ec, "duplicate object key \"" + std::string(*dup) + "\"");
    }
    if (first < k.keys.size()) k.chars.resize(k.keys[first].first);
    k.keys.resize(first);
    k.objects.pop_back();
    st.push_object(n);
    return true;
  }
  bool on_array_begin(json::error_code&) { return true; }
  bool on_array_end(std::size_t n, json::error_code&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    if (!in_key) key_start = k.chars.size();
    in_key = true;
    k.chars.append(s.data(), s.size());
    st.push_chars(s);
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code& ec) {
    if (!in_key) key_start = k.chars.size();
    in_key = false;
    k.chars.append(s.data(), s.size());
    const std::string_view key = std::string_view(k.chars).substr(key_start);
    if (key.find('\0') != std::string_view::npos) return fail(ec, "object key contains NUL");
    const std::size_t first = k.objects.back();
    if (k.keys.size() - first < kKeysScanned) {
      for (std::size_t i = first; i < k.keys.size(); ++i) {
        if (k.key(i) == key) return fail(ec, "duplicate object key \"" + std::string(key) + "\"");
      }
    }
    k.keys.emplace_back(key_start, key.size());
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

Result<json::value> parse_json_strict(std::string_view text, const JsonLimits& limits,
                                      json::storage_ptr sp) {
  json::parse_options opt;
  opt.max_depth = limits.max_depth;
  opt.allow_comments = false;
  opt.allow_trailing_commas = false;
  opt.allow_invalid_utf8 = false;
  thread_local KeyScratch scratch;
  struct Cleared {
    KeyScratch& k;
    ~Cleared() { k.clear(); }
  } cleared{scratch};
  // The value stack's working memory, for documents of ordinary size: no allocation for it.
  unsigned char temp[2048];
  json::basic_parser<StrictHandler> p(opt, scratch, temp, sizeof temp);
  p.handler().st.reset(std::move(sp));
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

// --- Readers ---

namespace {

bool identifier(std::string_view key) {
  if (key.empty()) return false;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

Error expected(std::string_view path, std::string_view what, const json::value& got) {
  return invalid_argument(std::string(path) + ": expected " + std::string(what) + ", got " +
                          std::string(json_kind_name(got)));
}

Error missing(std::string_view path) {
  return invalid_argument(std::string(path) + ": required field is missing");
}

}  // namespace

std::string json_path_key(std::string_view path, std::string_view key) {
  std::string out(path);
  if (identifier(key)) {
    if (!out.empty()) out += '.';
    out += key;
  } else {
    out += '[';
    out += json::serialize(json::string(key));
    out += ']';
  }
  return out;
}

std::string json_path_index(std::string_view path, std::size_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

std::string_view json_kind_name(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "boolean";
    case json::kind::string:
      return "string";
    case json::kind::array:
      return "array";
    case json::kind::object:
      return "object";
    default:
      return "number";
  }
}

Result<const json::object*> json_as_object(const json::value& v, std::string_view path) {
  if (!v.is_object()) return expected(path, "an object", v);
  return &v.get_object();
}

Result<const json::array*> json_as_array(const json::value& v, std::string_view path) {
  if (!v.is_array()) return expected(path, "an array", v);
  return &v.get_array();
}

Result<std::string> json_as_string(const json::value& v, std::string_view path) {
  if (!v.is_string()) return expected(path, "a string", v);
  return std::string(v.get_string());
}

Result<bool> json_as_bool(const json::value& v, std::string_view path) {
  if (!v.is_bool()) return expected(path, "a boolean", v);
  return v.get_bool();
}

Result<std::int64_t> json_as_int(const json::value& v, std::string_view path, std::int64_t lo,
                                 std::int64_t hi) {
  const auto out_of_range = [&] {
    return invalid_argument(std::string(path) + ": must be between " + std::to_string(lo) +
                            " and " + std::to_string(hi));
  };
  // The parser keeps a number that has no fraction or exponent as int64, or as uint64 when it is
  // above INT64_MAX; anything else is a double. (A value built in memory from an unsigned type
  // is a uint64 whatever its size.)
  std::int64_t i = 0;
  if (v.is_uint64()) {
    if (v.get_uint64() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      if (hi == std::numeric_limits<std::int64_t>::max()) {
        return invalid_argument(std::string(path) + ": integer too large");
      }
      return out_of_range();
    }
    i = static_cast<std::int64_t>(v.get_uint64());
  } else if (v.is_int64()) {
    i = v.get_int64();
  } else {
    return expected(path, "an integer", v);
  }
  if (i < lo || i > hi) return out_of_range();
  return i;
}

Result<std::vector<std::string>> json_as_string_list(const json::value& v, std::string_view path) {
  ABX_ASSIGN_OR_RETURN(const json::array* a, json_as_array(v, path));
  std::vector<std::string> out;
  out.reserve(a->size());
  for (std::size_t i = 0; i < a->size(); ++i) {
    ABX_ASSIGN_OR_RETURN(std::string s, json_as_string((*a)[i], json_path_index(path, i)));
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::map<std::string, std::string>> json_as_string_map(const json::value& v,
                                                              std::string_view path) {
  ABX_ASSIGN_OR_RETURN(const json::object* o, json_as_object(v, path));
  std::map<std::string, std::string> out;
  for (const auto& kv : *o) {
    ABX_ASSIGN_OR_RETURN(std::string s, json_as_string(kv.value(), json_path_key(path, kv.key())));
    out.emplace(std::string(kv.key()), std::move(s));
  }
  return out;
}

const json::value* json_find(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

namespace {

// o[key] for a required reader: absent or null is an error naming the field.
Result<const json::value*> required(const json::object& o, std::string_view key,
                                    std::string_view path) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return missing(json_path_key(path, key));
  return v;
}

}  // namespace

Result<const json::object*> json_required_object(const json::object& o, std::string_view key,
                                                 std::string_view path) {
  ABX_ASSIGN_OR_RETURN(const json::value* v, required(o, key, path));
  return json_as_object(*v, json_path_key(path, key));
}

Result<const json::array*> json_required_array(const json::object& o, std::string_view key,
                                               std::string_view path) {
  ABX_ASSIGN_OR_RETURN(const json::value* v, required(o, key, path));
  return json_as_array(*v, json_path_key(path, key));
}

Result<std::string> json_required_string(const json::object& o, std::string_view key,
                                         std::string_view path) {
  ABX_ASSIGN_OR_RETURN(const json::value* v, required(o, key, path));
  return json_as_string(*v, json_path_key(path, key));
}

Result<bool> json_required_bool(const json::object& o, std::string_view key,
                                std::string_view path) {
  ABX_ASSIGN_OR_RETURN(const json::value* v, required(o, key, path));
  return json_as_bool(*v, json_path_key(path, key));
}

Result<std::int64_t> json_required_int(const json::object& o, std::string_view key,
                                       std::string_view path, std::int64_t lo, std::int64_t hi) {
  ABX_ASSIGN_OR_RETURN(const json::value* v, required(o, key, path));
  return json_as_int(*v, json_path_key(path, key), lo, hi);
}

Result<const json::object*> json_optional_object(const json::object& o, std::string_view key,
                                                 std::string_view path) {
  const json::value* v = json_find(o, key);
  if (v == nullptr) return static_cast<const json::object*>(nullptr);
  return json_as_object(*v, json_path_key(path, key));
}

Result<const json::array*> json_optional_array(const json::object& o, std::string_view key,
                                               std::string_view path) {
  const json::value* v = json_find(o, key);
  if (v == nullptr) return static_cast<const json::array*>(nullptr);
  return json_as_array(*v, json_path_key(path, key));
}

Result<std::optional<std::string>> json_optional_string(const json::object& o, std::string_view key,
                                                        std::string_view path) {
  const json::value* v = json_find(o, key);
  if (v == nullptr) return std::optional<std::string>();
  ABX_ASSIGN_OR_RETURN(std::string s, json_as_string(*v, json_path_key(path, key)));
  return std::optional<std::string>(std::move(s));
}

Result<std::optional<bool>> json_optional_bool(const json::object& o, std::string_view key,
                                               std::string_view path) {
  const json::value* v = json_find(o, key);
  if (v == nullptr) return std::optional<bool>();
  ABX_ASSIGN_OR_RETURN(bool b, json_as_bool(*v, json_path_key(path, key)));
  return std::optional<bool>(b);
}

Result<std::optional<std::int64_t>> json_optional_int(const json::object& o, std::string_view key,
                                                      std::string_view path, std::int64_t lo,
                                                      std::int64_t hi) {
  const json::value* v = json_find(o, key);
  if (v == nullptr) return std::optional<std::int64_t>();
  ABX_ASSIGN_OR_RETURN(std::int64_t i, json_as_int(*v, json_path_key(path, key), lo, hi));
  return std::optional<std::int64_t>(i);
}

Result<std::vector<std::string>> json_optional_string_list(const json::object& o,
                                                           std::string_view key,
                                                           std::string_view path) {
  const json::value* v = json_find(o, key);
  if (v == nullptr) return std::vector<std::string>();
  return json_as_string_list(*v, json_path_key(path, key));
}

Result<std::map<std::string, std::string>> json_optional_string_map(const json::object& o,
                                                                    std::string_view key,
                                                                    std::string_view path) {
  const json::value* v = json_find(o, key);
  if (v == nullptr) return std::map<std::string, std::string>();
  return json_as_string_map(*v, json_path_key(path, key));
}

std::string_view json_string_or_empty(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string()) return {};
  return v->get_string();
}

}  // namespace abx
