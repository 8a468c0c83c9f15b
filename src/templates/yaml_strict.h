// A strict YAML reader for configuration files: yaml-cpp's event parser feeding a small tree
// that keeps line/column marks. Anchors, aliases, tags other than the non-specific ones,
// non-scalar or duplicate mapping keys, several documents and nesting past a depth cap are
// errors, so a file means one thing and cannot expand (no "billion laughs").
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abx/base/error.h"

namespace abx::templates::yaml {

struct Node {
  enum class Kind { kNull, kScalar, kSeq, kMap };
  Kind kind = Kind::kNull;
  std::string value;        // kScalar
  bool quoted = false;      // the scalar was written quoted (so never a number or boolean)
  int line = 0;             // 1-based
  int column = 0;           // 1-based
  std::vector<Node> items;  // kSeq
  std::vector<std::pair<Node, Node>> entries;  // kMap, in file order

  // Out of line (yaml_strict.cc), where pair<Node, Node> is complete: clang cannot instantiate
  // the vector's members inside the class that its element type contains.
  Node();
  Node(const Node&);
  Node(Node&&) noexcept;
  Node& operator=(const Node&);
  Node& operator=(Node&&) noexcept;
  ~Node();

  const Node* find(std::string_view key) const;
};

// Errors are kInvalidArgument "file:line:col: message".
Result<Node> parse(std::string_view text, std::string_view file, int max_depth);

}  // namespace abx::templates::yaml
