#include "abx/image/dockerfile.h"

#include <gtest/gtest.h>

namespace abx::image {
namespace {

Dockerfile dockerfile_ok(std::string_view text) {
  auto r = parse_dockerfile(text);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
  return r.ok() ? std::move(*r) : Dockerfile{};
}

std::string parse_err(std::string_view text, const ParseLimits& limits = {}) {
  auto r = parse_dockerfile(text, limits);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.error().message();
}

using V = std::vector<std::string>;

TEST(ImageDockerfile, TheE2eFile) {
  auto df = dockerfile_ok(
      "FROM scratch\n"
      "COPY busybox /bin/busybox\n"
      "RUN [\"/bin/busybox\",\"sh\",\"-c\",\"echo hi > /hello\"]\n"
      "ENV A=1 B=\"two words\"\n"
      "WORKDIR /work\n"
      "CMD [\"/bin/busybox\", \"sh\"]\n");
  ASSERT_EQ(df.instructions.size(), 6u);
  EXPECT_EQ(df.instructions[0].op, Op::kFrom);
  EXPECT_EQ(df.instructions[0].args, V{"scratch"});
  EXPECT_EQ(df.instructions[1].args, (V{"busybox", "/bin/busybox"}));
  EXPECT_EQ(df.instructions[1].line, 2);
  EXPECT_EQ(df.instructions[2].args, (V{"/bin/busybox", "sh", "-c", "echo hi > /hello"}));
  EXPECT_FALSE(df.instructions[2].shell_form);
  ASSERT_EQ(df.instructions[3].pairs.size(), 2u);
  EXPECT_EQ(df.instructions[3].pairs[1], (std::pair<std::string, std::string>{"B", "two words"}));
  EXPECT_EQ(df.instructions[4].args, V{"/work"});
  EXPECT_EQ(df.instructions[5].op, Op::kCmd);
  EXPECT_EQ(df.instructions[5].args, (V{"/bin/busybox", "sh"}));
}

TEST(ImageDockerfile, ShellFormAndContinuations) {
  auto df = dockerfile_ok(
      "# syntax comment\n"
      "\n"
      "from debian\n"
      "RUN apt-get update && \\\n"
      "  # a comment inside\n"
      "  apt-get install -y python3\n"
      "entrypoint exec server --port 1\n");
  ASSERT_EQ(df.instructions.size(), 3u);
  const auto& run = df.instructions[1];
  EXPECT_EQ(run.line, 4);
  EXPECT_TRUE(run.shell_form);
  EXPECT_EQ(run.args, (V{"/bin/sh", "-c", "apt-get update &&   apt-get install -y python3"}));
  EXPECT_EQ(run.text, "RUN apt-get update &&   apt-get install -y python3");
  EXPECT_EQ(df.instructions[2].op, Op::kEntrypoint);
  EXPECT_EQ(df.instructions[2].args, (V{"/bin/sh", "-c", "exec server --port 1"}));
  EXPECT_EQ(df.instructions[2].line, 7);
}

TEST(ImageDockerfile, EnvForms) {
  auto df = dockerfile_ok("FROM a\nENV PATH /usr/bin:$PATH\nENV X=1 Y='a b' Z=c\\ d\n");
  EXPECT_EQ(df.instructions[1].pairs,
            (std::vector<std::pair<std::string, std::string>>{{"PATH", "/usr/bin:$PATH"}}));
  EXPECT_EQ(df.instructions[2].pairs, (std::vector<std::pair<std::string, std::string>>{
                                          {"X", "1"}, {"Y", "a b"}, {"Z", "c d"}}));
}

TEST(ImageDockerfile, ArgLabelUserCopyFlags) {
  auto df = dockerfile_ok(
      "ARG BASE=scratch\nARG NODEF\nFROM $BASE\nLABEL a=b \"c d\"=e\nUSER 1000:100\n"
      "COPY --chown=1:2 a b /dst/\nADD [\"x y.tar\", \"/opt\"]\n");
  EXPECT_TRUE(df.instructions[0].has_default);
  EXPECT_EQ(df.instructions[0].pairs[0].second, "scratch");
  EXPECT_FALSE(df.instructions[1].has_default);
  EXPECT_EQ(df.instructions[3].pairs[1].first, "c d");
  EXPECT_EQ(df.instructions[4].args, V{"1000:100"});
  EXPECT_EQ(df.instructions[5].chown, "1:2");
  EXPECT_EQ(df.instructions[5].args, (V{"a", "b", "/dst/"}));
  EXPECT_EQ(df.instructions[6].op, Op::kAdd);
  EXPECT_EQ(df.instructions[6].args, (V{"x y.tar", "/opt"}));
}

TEST(ImageDockerfile, Errors) {
  EXPECT_EQ(parse_err("FROM a\nFOO bar\n"), "Dockerfile:2: unknown instruction FOO");
  EXPECT_EQ(parse_err("FROM a\n\nRUN [\"a\", 1]\n"),
            "Dockerfile:3: bad JSON array (strings only): [\"a\", 1]");
  EXPECT_EQ(parse_err("FROM a\nRUN [\"a\"\n"), "Dockerfile:2: bad JSON array: [\"a\"");
  EXPECT_EQ(parse_err("FROM a\nCOPY onlyone\n"),
            "Dockerfile:2: COPY needs at least one source and a destination");
  EXPECT_EQ(parse_err("FROM a\nWORKDIR\n"), "Dockerfile:2: WORKDIR needs arguments");
  EXPECT_EQ(parse_err("FROM a\nADD https://x/y /y\n"),
            "Dockerfile:2: ADD from a URL is not supported (https://x/y): download it into the "
            "context and COPY it");
  EXPECT_EQ(parse_err("FROM a\nCOPY --chmod=755 a b\n"),
            "Dockerfile:2: unsupported flag --chmod=755 for COPY (only --chown= and --from=)");
  EXPECT_EQ(parse_err("FROM a\nADD --from=x a b\n"),
            "Dockerfile:2: unsupported flag --from=x for ADD (only --chown=)");
  EXPECT_EQ(parse_err("RUN x\n"), "Dockerfile:1: RUN before FROM");
  EXPECT_EQ(parse_err("# nothing\n"), "Dockerfile: no FROM instruction");
  EXPECT_EQ(parse_err("FROM a\nLABEL \"x\n"), "Dockerfile:2: unterminated \" quote");
  EXPECT_EQ(parse_err("FROM a\nLABEL novalue\n"),
            "Dockerfile:2: LABEL expects KEY=VALUE, got 'novalue'");
  EXPECT_EQ(parse_err("FROM a\nENV K\n"), "Dockerfile:2: ENV K needs a value");
}

TEST(ImageDockerfile, MultiStage) {
  auto df = dockerfile_ok(
      "ARG V=1\n"
      "FROM scratch AS Build\n"
      "COPY a /a\n"
      "FROM build as second\n"
      "FROM scratch\n"
      "COPY --from=build /a /b\n"
      "COPY --chown=1:2 --from=1 /a /c\n");
  ASSERT_EQ(df.stages.size(), 3u);
  EXPECT_EQ(df.stages[0].name, "build");  // lowercased, as Docker does
  EXPECT_EQ(df.stages[0].line, 2);
  EXPECT_EQ(df.stages[1].name, "second");
  EXPECT_EQ(df.stages[2].name, "");
  EXPECT_EQ(df.instructions[0].stage, 0);
  EXPECT_EQ(df.instructions[3].args, V{"build"});
  EXPECT_EQ(df.instructions[3].stage, 1);
  EXPECT_EQ(df.instructions[5].from, "build");
  EXPECT_EQ(df.instructions[5].from_stage, 0);
  EXPECT_EQ(df.instructions[5].stage, 2);
  EXPECT_EQ(df.instructions[6].from_stage, 1);
  EXPECT_EQ(df.instructions[6].chown, "1:2");
  EXPECT_EQ(df.instructions[2].from_stage, -1);
}

TEST(ImageDockerfile, MultiStageErrors) {
  EXPECT_EQ(parse_err("FROM a AS b\nFROM c\nCOPY --from=nope x y\n"),
            "Dockerfile:3: COPY --from=nope: no such stage (name a stage defined above with "
            "FROM ... AS name, or its index)");
  EXPECT_EQ(parse_err("FROM a AS b\nCOPY --from=b x y\n"),
            "Dockerfile:2: COPY --from=b: stage 'b' is defined at line 1 (this stage): a stage "
            "can only copy from earlier stages");
  EXPECT_EQ(parse_err("FROM a\nCOPY --from=later x y\nFROM c AS later\n"),
            "Dockerfile:2: COPY --from=later: stage 'later' is defined at line 3: a stage can "
            "only copy from earlier stages");
  EXPECT_EQ(parse_err("FROM a\nCOPY --from=0 x y\n"),
            "Dockerfile:2: COPY --from=0: stage 0 is defined at line 1 (this stage): a stage "
            "can only copy from earlier stages");
  // A cycle: each stage builds on the other.
  EXPECT_EQ(parse_err("FROM two AS one\nFROM one AS two\n"),
            "Dockerfile:1: FROM two: stage 'two' is defined at line 2: a stage can only build on "
            "earlier stages");
  EXPECT_EQ(parse_err("FROM self AS self\n"),
            "Dockerfile:1: FROM self: stage 'self' is defined at line 1 (itself): a stage can "
            "only build on earlier stages");
  EXPECT_EQ(parse_err("FROM a AS x\nFROM b AS X\n"),
            "Dockerfile:2: stage name 'x' is already used at line 1");
  EXPECT_EQ(parse_err("FROM a AS 1x\n"),
            "Dockerfile:1: stage name '1x' must start with a letter and hold only letters, "
            "digits, '-', '_' and '.'");
  EXPECT_EQ(parse_err("FROM a b\n"), "Dockerfile:1: FROM takes one image [AS name]");
}

TEST(ImageDockerfile, PlainVarRefs) {
  EXPECT_EQ(plain_var_refs("$A/${B}/${C:-x}/${D:+y}/\\$E/$F_1."), (V{"A", "B", "F_1"}));
}

TEST(ImageDockerfile, Limits) {
  ParseLimits l;
  l.max_bytes = 10;
  EXPECT_EQ(parse_err("FROM scratch\n", l), "Dockerfile: larger than 10 bytes");
  l = {};
  l.max_line_bytes = 8;
  EXPECT_EQ(parse_err("FROM a\nRUN 123456789\n", l), "Dockerfile:2: line longer than 8 bytes");
  l = {};
  l.max_instructions = 2;
  EXPECT_EQ(parse_err("FROM a\nRUN a\nRUN b\n", l), "Dockerfile:3: more than 2 instructions");
}

TEST(ImageDockerfile, ExpandVars) {
  std::map<std::string, std::string> v{{"A", "x"}, {"E", ""}};
  EXPECT_EQ(*expand_vars("$A/${A}/${B:-d}/${E:-d}/${A:+y}/${E:+y}/\\$A/$/$B.", v),
            "x/x/d/d/y//$A/$/.");
  EXPECT_FALSE(expand_vars("${A", v).ok());
}

}  // namespace
}  // namespace abx::image
