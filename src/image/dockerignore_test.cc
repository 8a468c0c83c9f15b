#include "abx/image/dockerignore.h"

#include <gtest/gtest.h>

namespace abx::image {
namespace {

DockerIgnore ignore_ok(std::string_view text) {
  auto r = DockerIgnore::parse(text);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
  return r.ok() ? std::move(*r) : DockerIgnore{};
}

TEST(ImageDockerIgnore, DockersRules) {
  auto di = ignore_ok(
      "# a comment\n"
      "\n"
      "  node_modules  \n"
      "*.log\n"
      "!keep.log\n"
      "/build/\n"
      "docs/**\n"
      "**/*.tmp\n"
      "a/**/z\n"
      "x?z\n"
      "[a-c]1\n"
      "[^a-c]2\n"
      "lit\\*\n"
      "./dot/./slash//\n");
  EXPECT_FALSE(di.has_exceptions() && di.empty());
  EXPECT_TRUE(di.excluded("node_modules"));
  EXPECT_TRUE(di.excluded("node_modules/a/b"));   // below an excluded directory
  EXPECT_FALSE(di.excluded("src/node_modules"));  // only at the root
  EXPECT_TRUE(di.excluded("a.log"));
  EXPECT_FALSE(di.excluded("dir/a.log"));   // '*' stops at '/'
  EXPECT_FALSE(di.excluded("keep.log"));    // the exception, last match wins
  EXPECT_TRUE(di.excluded("build/out.o"));  // leading and trailing '/' cleaned
  EXPECT_TRUE(di.excluded("docs/a/b.md"));
  EXPECT_FALSE(di.excluded("docs"));  // docs/** is what is below docs
  EXPECT_TRUE(di.excluded("x.tmp"));  // **/ is zero or more directories
  EXPECT_TRUE(di.excluded("deep/er/x.tmp"));
  EXPECT_TRUE(di.excluded("a/z"));
  EXPECT_TRUE(di.excluded("a/b/c/z"));
  EXPECT_FALSE(di.excluded("a/b/c/zz"));
  EXPECT_TRUE(di.excluded("xyz"));
  EXPECT_FALSE(di.excluded("x/z"));  // '?' is not '/'
  EXPECT_TRUE(di.excluded("b1"));
  EXPECT_FALSE(di.excluded("d1"));
  EXPECT_TRUE(di.excluded("d2"));
  EXPECT_FALSE(di.excluded("b2"));
  EXPECT_TRUE(di.excluded("lit*"));
  EXPECT_FALSE(di.excluded("litx"));
  EXPECT_TRUE(di.excluded("dot/slash/f"));
  EXPECT_FALSE(di.excluded("Dockerfile"));
}

TEST(ImageDockerIgnore, ExceptionsInsideAnExcludedDirectory) {
  auto di = ignore_ok("vendor\n!vendor/keep\n**/secret*\n");
  EXPECT_TRUE(di.has_exceptions());
  EXPECT_TRUE(di.excluded("vendor/other"));
  EXPECT_FALSE(di.excluded("vendor/keep"));
  EXPECT_FALSE(di.excluded("vendor/keep/inner"));  // its parent matches the exception
  EXPECT_TRUE(di.excluded("vendor/keep/secret.txt"));
  auto all = ignore_ok("**\n!Dockerfile\n");
  EXPECT_TRUE(all.excluded("a/b/c"));
  EXPECT_FALSE(all.excluded("Dockerfile"));
}

TEST(ImageDockerIgnore, Errors) {
  auto r = DockerIgnore::parse("ok\n\n[abc\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(),
            ".dockerignore:3: bad pattern '[abc' (an unterminated [ class or a trailing \\)");
  r = DockerIgnore::parse("x\\");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(),
            ".dockerignore:1: bad pattern 'x\\' (an unterminated [ class or a trailing \\)");
  r = DockerIgnore::parse("a\n!\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), ".dockerignore:2: '!' needs a pattern");
  DockerIgnore::Limits l;
  l.max_patterns = 1;
  r = DockerIgnore::parse("a\nb\n", ".dockerignore", l);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), ".dockerignore:2: more than 1 patterns");
}

// A pattern made to backtrack: linear work, so this returns at once.
TEST(ImageDockerIgnore, NoBacktracking) {
  std::string pattern;
  for (int i = 0; i < 200; ++i) pattern += "*a";
  pattern += "b";
  auto di = ignore_ok(pattern);
  EXPECT_FALSE(di.excluded(std::string(3000, 'a')));
}

}  // namespace
}  // namespace abx::image
