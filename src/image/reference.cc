// Image references (include/abx/image/reference.h): Docker's grammar and normalisation
// (distribution/reference) for registry references, skopeo's transport:path[:tag] for local ones.
#include "abx/image/reference.h"

#include <algorithm>
#include <cctype>

namespace abx::image {
namespace {

constexpr std::size_t kMaxReference = 4096;  // archive paths included
constexpr std::size_t kMaxName = 255;        // registry/repository, as Docker's NameTotalLengthMax
constexpr std::size_t kMaxTag = 128;

bool lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool alnum(char c) { return lower_alnum(c) || (c >= 'A' && c <= 'Z'); }

// A repository path component: [a-z0-9]+ ((\.|_|__|-+) [a-z0-9]+)*
bool valid_path_component(std::string_view c) {
  if (c.empty() || !lower_alnum(c.front()) || !lower_alnum(c.back())) return false;
  for (std::size_t i = 0; i < c.size();) {
    if (lower_alnum(c[i])) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < c.size() && !lower_alnum(c[j])) ++j;
    std::string_view sep = c.substr(i, j - i);
    bool ok = sep == "." || sep == "_" || sep == "__" ||
              std::all_of(sep.begin(), sep.end(), [](char ch) { return ch == '-'; });
    if (!ok) return false;
    i = j;
  }
  return true;
}

// host[:port], host = label(.label)*, label = alnum ([alnum-]* alnum)?; or [IPv6]:port.
bool valid_domain(std::string_view d) {
  if (d.empty()) return false;
  std::string_view host = d;
  std::string_view port;
  if (d.front() == '[') {
    auto close = d.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    std::string_view ip = d.substr(1, close - 1);
    if (!std::all_of(ip.begin(), ip.end(), [](char c) {
          return std::isxdigit(static_cast<unsigned char>(c)) || c == ':';
        }))
      return false;
    std::string_view rest = d.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
      if (port.empty()) return false;
    }
    host = {};
  } else if (auto colon = d.find(':'); colon != std::string_view::npos) {
    host = d.substr(0, colon);
    port = d.substr(colon + 1);
    if (port.empty()) return false;
  }
  if (!std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      port.size() > 5)
    return false;
  if (d.front() == '[') return true;
  std::size_t start = 0;
  while (start <= host.size()) {
    auto dot = host.find('.', start);
    std::string_view label =
        host.substr(start, dot == std::string_view::npos ? host.npos : dot - start);
    if (label.empty() || label.size() > 63 || !alnum(label.front()) || !alnum(label.back()))
      return false;
    if (!std::all_of(label.begin(), label.end(), [](char c) { return alnum(c) || c == '-'; }))
      return false;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return true;
}

// [\w][\w.-]{0,127}
bool valid_tag(std::string_view t) {
  auto word = [](char c) { return alnum(c) || c == '_'; };
  if (t.empty() || t.size() > kMaxTag || !word(t.front())) return false;
  return std::all_of(t.begin(), t.end(), [&](char c) { return word(c) || c == '.' || c == '-'; });
}

// An OCI layout's org.opencontainers.image.ref.name: alphanum+ (separator alphanum+)* with
// separators -._:@/+ and "--" (image-layout spec); tags are the common case.
bool valid_layout_ref(std::string_view r) {
  if (r.empty() || r.size() > kMaxName || !alnum(r.front()) || !alnum(r.back())) return false;
  for (std::size_t i = 0; i < r.size(); ++i) {
    char c = r[i];
    if (alnum(c)) continue;
    bool sep = c == '-' || c == '.' || c == '_' || c == ':' || c == '@' || c == '/' || c == '+';
    if (!sep || !alnum(r[i - 1])) {
      if (!(c == '-' && r[i - 1] == '-' && i >= 2 && alnum(r[i - 2]))) return false;
    }
  }
  return true;
}

Error bad(std::string_view text, std::string_view why) {
  std::string shown(text.substr(0, 200));
  if (text.size() > 200) shown += "...";
  return invalid_argument("invalid image reference \"" + shown + "\": " + std::string(why));
}

bool has_control(std::string_view s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

Result<Reference> parse_local(std::string_view text, Transport t, std::string_view rest) {
  Reference ref;
  ref.transport = t;
  // skopeo splits path and tag at the first ':' (a path with ':' cannot be named this way).
  auto colon = rest.find(':');
  ref.path = std::string(rest.substr(0, colon));
  if (ref.path.empty()) return bad(text, "missing path after the transport");
  if (colon != std::string_view::npos) {
    std::string_view tag = rest.substr(colon + 1);
    if (tag.empty()) return bad(text, "empty tag after the path");
    if (t == Transport::kDockerArchive) {
      // docker-archive:PATH:name:tag selects one of several images by its RepoTags entry.
      if (tag.size() > kMaxName + kMaxTag + 1 || has_control(tag) ||
          tag.find_first_of(" \t") != std::string_view::npos)
        return bad(text, "invalid image name after the archive path");
    } else if (!valid_layout_ref(tag)) {
      return bad(text, "invalid tag \"" + std::string(tag) + "\" after the path");
    }
    ref.tag = std::string(tag);
  }
  return ref;
}

}  // namespace

bool valid_digest(std::string_view digest) {
  if (digest.size() != 71 || digest.substr(0, 7) != "sha256:") return false;
  return std::all_of(digest.begin() + 7, digest.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// One function of ~90 lines on purpose: one pass over the text in Docker's order (transport,
// digest, tag, registry, repository), each step narrowing what the next one reads.
Result<Reference> parse_reference(std::string_view text) {
  if (text.empty()) return bad(text, "empty");
  if (text.size() > kMaxReference) return bad(text, "longer than 4096 bytes");
  if (has_control(text)) return bad(text, "contains control characters");
  struct Prefix {
    std::string_view name;
    Transport t;
  };
  for (Prefix p : {Prefix{"oci-archive:", Transport::kOciArchive},
                   Prefix{"docker-archive:", Transport::kDockerArchive},
                   Prefix{"oci:", Transport::kOciLayout}}) {
    if (text.substr(0, p.name.size()) == p.name) {
      return parse_local(text, p.t, text.substr(p.name.size()));
    }
  }
  if (text.substr(0, 9) == "docker://") text.remove_prefix(9);  // skopeo's spelling

  Reference ref;
  std::string_view name = text;
  if (auto at = name.find('@'); at != std::string_view::npos) {
    std::string_view digest = name.substr(at + 1);
    name = name.substr(0, at);
    if (digest.substr(0, 7) != "sha256:") {
      return bad(text, "only sha256 digests are supported");
    }
    if (!valid_digest(digest)) return bad(text, "digest must be sha256: and 64 lowercase hex");
    ref.digest = std::string(digest);
  }
  // A tag follows the last ':' that is after the last '/' (a port is before it).
  auto slash = name.rfind('/');
  auto colon = name.rfind(':');
  if (colon != std::string_view::npos && (slash == std::string_view::npos || colon > slash)) {
    std::string_view tag = name.substr(colon + 1);
    if (!valid_tag(tag)) {
      return bad(text, "invalid tag \"" + std::string(tag.substr(0, 200)) +
                           "\" (letters, digits, _ . -; at most 128, not starting with . or -)");
    }
    ref.tag = std::string(tag);
    name = name.substr(0, colon);
  }
  if (name.empty()) return bad(text, "missing repository name");

  // Docker's split: the first component is a registry when it has a '.' or ':', is
  // "localhost", or has upper case; otherwise the registry is docker.io.
  std::string_view repo = name;
  auto first_slash = name.find('/');
  if (first_slash != std::string_view::npos) {
    std::string_view first = name.substr(0, first_slash);
    bool is_domain =
        first.find_first_of(".:") != std::string_view::npos || first == "localhost" ||
        std::any_of(first.begin(), first.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
    if (is_domain) {
      if (!valid_domain(first)) {
        return bad(text, "invalid registry host \"" + std::string(first) + "\"");
      }
      ref.registry = std::string(first);
      repo = name.substr(first_slash + 1);
    }
  }
  if (ref.registry.empty() || ref.registry == "index.docker.io" ||
      ref.registry == "registry-1.docker.io") {
    ref.registry = "docker.io";
  }
  if (repo.empty()) return bad(text, "missing repository name");
  std::size_t start = 0;
  for (;;) {
    auto next = repo.find('/', start);
    std::string_view comp =
        repo.substr(start, next == std::string_view::npos ? repo.npos : next - start);
    if (!valid_path_component(comp)) {
      if (std::any_of(comp.begin(), comp.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) {
        return bad(text, "repository name must be lowercase");
      }
      return bad(text, "invalid repository component \"" + std::string(comp.substr(0, 200)) +
                           "\" (lowercase letters, digits and . _ __ - separators)");
    }
    if (next == std::string_view::npos) break;
    start = next + 1;
  }
  ref.repository = std::string(repo);
  if (ref.registry == "docker.io" && ref.repository.find('/') == std::string::npos) {
    ref.repository = "library/" + ref.repository;
  }
  if (ref.registry.size() + 1 + ref.repository.size() > kMaxName) {
    return bad(text, "name longer than 255 characters");
  }
  if (ref.tag.empty() && ref.digest.empty()) ref.tag = "latest";
  return ref;
}

std::string Reference::str() const {
  switch (transport) {
    case Transport::kOciArchive:
      return "oci-archive:" + path + (tag.empty() ? "" : ":" + tag);
    case Transport::kDockerArchive:
      return "docker-archive:" + path + (tag.empty() ? "" : ":" + tag);
    case Transport::kOciLayout:
      return "oci:" + path + (tag.empty() ? "" : ":" + tag);
    case Transport::kRegistry:
      break;
  }
  std::string out = registry + "/" + repository;
  if (!tag.empty()) out += ":" + tag;
  if (!digest.empty()) out += "@" + digest;
  return out;
}

std::string Reference::api_host() const {
  return registry == "docker.io" ? "registry-1.docker.io" : registry;
}

}  // namespace abx::image
