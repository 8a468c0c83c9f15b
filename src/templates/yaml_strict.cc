#include "yaml_strict.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <optional>
#include <sstream>

namespace abx::templates::yaml {

Node::Node() = default;
Node::Node(const Node&) = default;
Node::Node(Node&&) noexcept = default;
Node& Node::operator=(const Node&) = default;
Node& Node::operator=(Node&&) noexcept = default;
Node::~Node() = default;

const Node* Node::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.value == key) return &v;
  }
  return nullptr;
}

namespace {

struct StrictError {
  int line;
  int column;
  std::string message;
};

[[noreturn]] void fail(const YAML::Mark& m, std::string msg) {
  throw StrictError{m.line + 1, m.column + 1, std::move(msg)};
}

// yaml-cpp reports "?" for an untagged plain node and "!" for an untagged quoted scalar (the
// non-specific tags); anything else was written by the author.
bool non_specific(const std::string& tag) { return tag.empty() || tag == "?" || tag == "!"; }

class Builder : public YAML::EventHandler {
 public:
  explicit Builder(int max_depth) : max_depth_(max_depth) {}

  std::optional<Node> root;

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    check_anchor(mark, anchor);
    add(make(Node::Kind::kNull, mark));
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    fail(mark, "aliases (*name) are not allowed");
  }
  void OnAnchor(const YAML::Mark& mark, const std::string&) override {
    fail(mark, "anchors (&name) are not allowed");
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    check_anchor(mark, anchor);
    check_tag(mark, tag);
    Node n = make(Node::Kind::kScalar, mark);
    n.value = value;
    n.quoted = tag == "!";
    add(std::move(n));
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, tag, anchor, Node::Kind::kSeq);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, tag, anchor, Node::Kind::kMap);
  }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    Node node;
    std::optional<Node> key;
  };

  static Node make(Node::Kind k, const YAML::Mark& m) {
    Node n;
    n.kind = k;
    n.line = m.line + 1;
    n.column = m.column + 1;
    return n;
  }
  static void check_anchor(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) fail(mark, "anchors (&name) are not allowed");
  }
  static void check_tag(const YAML::Mark& mark, const std::string& tag) {
    if (!non_specific(tag)) fail(mark, "tags are not allowed (found '" + tag + "')");
  }

  void open(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor, Node::Kind k) {
    check_anchor(mark, anchor);
    check_tag(mark, tag);
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      fail(mark, "nesting deeper than " + std::to_string(max_depth_) + " levels");
    }
    stack_.push_back(Frame{make(k, mark), std::nullopt});
  }

  void close() {
    Node n = std::move(stack_.back().node);
    stack_.pop_back();
    add(std::move(n));
  }

  void add(Node n) {
    if (stack_.empty()) {
      root = std::move(n);
      return;
    }
    Frame& f = stack_.back();
    if (f.node.kind == Node::Kind::kSeq) {
      f.node.items.push_back(std::move(n));
      return;
    }
    if (!f.key) {
      if (n.kind != Node::Kind::kScalar) {
        throw StrictError{n.line, n.column, "mapping keys must be plain strings"};
      }
      for (const auto& [k, v] : f.node.entries) {
        if (k.value == n.value) {
          throw StrictError{
              n.line, n.column,
              "duplicate key '" + n.value + "' (first at line " + std::to_string(k.line) + ")"};
        }
      }
      f.key = std::move(n);
      return;
    }
    f.node.entries.emplace_back(std::move(*f.key), std::move(n));
    f.key.reset();
  }

  int max_depth_;
  std::vector<Frame> stack_;
};

}  // namespace

Result<Node> parse(std::string_view text, std::string_view file, int max_depth) {
  auto at = [&](int line, int col, const std::string& msg) {
    return invalid_argument(std::string(file) + ":" + std::to_string(line) + ":" +
                            std::to_string(col) + ": " + msg);
  };
  if (text.find('\0') != std::string_view::npos) return at(1, 1, "NUL byte in YAML");
  std::istringstream in{std::string(text)};
  Builder b(max_depth);
  try {
    YAML::Parser parser(in);
    if (!parser.HandleNextDocument(b) || !b.root) return Node{};  // empty file: a null document
    Builder extra(max_depth);
    if (parser.HandleNextDocument(extra)) return at(1, 1, "more than one YAML document");
  } catch (const StrictError& e) {
    return at(e.line, e.column, e.message);
  } catch (const YAML::Exception& e) {
    return at(e.mark.line + 1, e.mark.column + 1, e.msg);
  } catch (const std::exception& e) {
    return at(1, 1, e.what());
  }
  return std::move(*b.root);
}

}  // namespace abx::templates::yaml
