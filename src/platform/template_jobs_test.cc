// translate_template: the e2b SDK's TemplateBuildStartV2 body as a Dockerfile, and its refusals.
#include "template_jobs.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "abx/image/dockerfile.h"

namespace abx::platform {
namespace {

namespace json = boost::json;

Result<TranslatedTemplate> translate(std::string_view body) {
  return translate_template(json::parse(body).as_object());
}

TEST(TranslateTemplate, EveryStepTypeBecomesAParsableDockerfile) {
  const std::string hash(64, 'a');
  auto t = translate(R"({"fromImage": "e2bdev/base", "startCmd": "python -m http.server",
    "readyCmd": "ss -ltn | grep 8000", "force": false, "steps": [
    {"type": "COPY", "args": ["app", "/srv/", "user", "0640"], "filesHash": ")" +
                     hash + R"("},
    {"type": "RUN", "args": ["echo \"hi\"\nexit 0"]},
    {"type": "RUN", "args": ["id", "root"]},
    {"type": "ENV", "args": ["A", "x \"y\" \\z", "B", ""]},
    {"type": "WORKDIR", "args": ["/srv"]},
    {"type": "USER", "args": ["user"]},
    {"type": "RUN", "args": ["apt-get update", "root"]}]})");
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->file_hashes, std::vector<std::string>{hash});
  EXPECT_EQ(t->line_step.at(1), "base");
  EXPECT_EQ(t->line_step.at(2), "1");
  EXPECT_EQ(t->line_step.rbegin()->second, "finalize");
  EXPECT_EQ(t->package_steps, std::set<std::string>{"7"});
  auto df = image::parse_dockerfile(t->dockerfile, {}, "Dockerfile");
  ASSERT_TRUE(df.ok()) << df.error().message() << "\n" << t->dockerfile;
  const auto& in = df->instructions;
  EXPECT_EQ(in.at(0).args, std::vector<std::string>{"abx:base"});
  EXPECT_EQ(in.at(1).args, (std::vector<std::string>{hash + "/app", "/srv/"}));
  EXPECT_EQ(in.at(2).args.back(), "chown -R 'user' '/srv/app'");
  EXPECT_EQ(in.at(3).args.back(), "chmod 0640 '/srv/app'");
  EXPECT_EQ(in.at(4).args, (std::vector<std::string>{"/bin/sh", "-c", "echo \"hi\"\nexit 0"}));
  // A RUN as another user switches and switches back.
  EXPECT_EQ(in.at(5).op, image::Op::kUser);
  EXPECT_EQ(in.at(7).args, std::vector<std::string>{"root"});
  ASSERT_EQ(in.at(8).pairs.size(), 2u);
  EXPECT_EQ(in.at(8).pairs[0].second, "x \"y\" \\z");
  EXPECT_EQ(in.at(8).pairs[1].second, "");
  EXPECT_EQ(in.back().op, image::Op::kLabel);
  EXPECT_EQ(in.at(in.size() - 2).args,
            (std::vector<std::string>{"/bin/sh", "-c", "python -m http.server"}));
}

TEST(TranslateTemplate, FromTemplateAndImage) {
  auto t = translate(R"({"fromTemplate": "mine:v2"})");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->from_template, "mine");
  EXPECT_EQ(t->dockerfile, "FROM mine\n");
  EXPECT_EQ(translate(R"({"fromImage": "debian:bookworm"})")->dockerfile, "FROM debian:bookworm\n");
  EXPECT_EQ(translate(R"({})")->dockerfile, "FROM abx:base\n");
}

TEST(TranslateTemplate, Refusals) {
  auto msg = [](std::string_view body) {
    auto t = translate(body);
    return t.ok() ? std::string("ok") : t.error().message();
  };
  EXPECT_EQ(msg(R"({"steps": [{"type": "FROB", "args": []}]})"),
            "step 1: unknown step type 'FROB' (RUN, COPY, ENV, WORKDIR, USER)");
  EXPECT_EQ(msg(R"({"steps": [{"type": "COPY", "args": ["a", "/b"]}]})"),
            "step 1: COPY needs the filesHash of its uploaded files");
  EXPECT_EQ(msg(R"({"steps": [{"type": "COPY", "args": ["../x", "/b"], "filesHash": "ab"}]})"),
            "step 1: COPY source ../x must be relative to the context");
  EXPECT_EQ(msg(R"({"steps": [{"type": "ENV", "args": ["A", "x\ny"]}]})"),
            "step 1: the value of A must not contain a line break");
  EXPECT_EQ(msg(R"({"steps": [{"type": "WORKDIR", "args": ["/a\nRUN x"]}]})"),
            "step 1: WORKDIR takes one path");
  EXPECT_EQ(msg(R"({"steps": [{"type": "RUN", "args": [1]}]})"),
            "step 1: args must be an array of strings");
  EXPECT_EQ(msg(R"({"fromImage": "a b"})"), "fromImage: 'a b' is not an image reference");
  EXPECT_EQ(msg(R"({"fromImage": "x", "fromTemplate": "y"})"),
            "give fromImage or fromTemplate, not both");
  auto reg = translate(R"({"fromImage": "x", "fromImageRegistry": {"type": "registry"}})");
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.error().code(), ErrorCode::kUnimplemented);
}

}  // namespace
}  // namespace abx::platform
