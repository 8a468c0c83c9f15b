// translate_template: the e2b SDK's TemplateBuildStartV2 body as a Dockerfile, and its refusals;
// TemplateJobs' records in the store (what an abxd restart finds).
#include "template_jobs.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "abx/image/dockerfile.h"
#include "abx/testing/temp_dir.h"

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

TEST(TranslateTemplate, SkipCacheForcesFromItsLine) {
  auto all = translate(R"({"fromTemplate": "bb", "force": true, "steps": [
    {"type": "RUN", "args": ["a"]}]})");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->no_cache_from_line, 1);
  // The builder's skipCache() before step 2: its `force` and every later step's.
  auto from2 = translate(R"({"fromTemplate": "bb", "force": false, "steps": [
    {"type": "RUN", "args": ["a"], "force": false},
    {"type": "ENV", "args": ["A", "1"], "force": true},
    {"type": "RUN", "args": ["b"], "force": true}]})");
  ASSERT_TRUE(from2.ok());
  EXPECT_EQ(from2->no_cache_from_line, 3);  // FROM, RUN a, then ENV on line 3
  auto none = translate(R"({"fromTemplate": "bb", "steps": [{"type": "RUN", "args": ["a"]}]})");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->no_cache_from_line, 0);
  EXPECT_FALSE(translate(R"({"force": "yes"})").ok());
}

// Records, tags and logs outlive the TemplateJobs (abxd) that made them; a build that was
// unfinished when it went is loaded as error with the reason, never as building.
TEST(TemplateJobsStore, RecordsTagsAndLogsSurviveAndUnfinishedBuildsEndAsError) {
  testing::TempDir d;
  auto st = store::Store::open(d.path() / "abx.db");
  ASSERT_TRUE(st.ok()) << st.error().message();
  TemplateBuildOptions bo;
  bo.home = d.string();
  TemplateBuilder builder(bo);
  std::string waiting, tagged;
  {
    TemplateJobs jobs(builder, (d.path() / "files").string(), st->get());
    auto r = jobs.request("app", "default", {"default", "v1"}, 2, 512);
    tagged = r.build_id;
    auto w = jobs.request("app", "default", {"v2"});
    waiting = w.build_id;
    jobs.set_tags("app", tagged, {"prod"});
    ASSERT_TRUE(jobs.remove_tags("app", {"v1"}).ok());
  }
  // A record the store holds as building (its abxd died mid-build), with a log line.
  store::TemplateBuildRecord b;
  b.build_id = "b-building";
  b.template_id = "other";
  b.team_id = "default";
  b.status = "building";
  b.created_at_ms = 5;
  ASSERT_TRUE((*st)->put_template_build(b).ok());
  ASSERT_TRUE(
      (*st)->append_template_build_logs("b-building", {{0, 6, "info", "step 1", "1"}}).ok());

  TemplateJobs again(builder, (d.path() / "files").string(), st->get());
  auto t = again.get("app", tagged, "default");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->tags, (std::vector<std::string>{"default", "prod"}));
  EXPECT_EQ(t->cpu_count, 2);
  EXPECT_EQ(t->memory_mb, 512);
  // Never started: it cannot start any more either.
  auto w = again.get("app", waiting, "default");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->status, "error");
  EXPECT_NE(w->reason.find("abxd restarted while the build was waiting"), std::string::npos);
  auto x = again.get("other", "b-building", "default");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->status, "error");
  EXPECT_NE(x->reason.find("abxd restarted while the build was building"), std::string::npos);
  EXPECT_EQ(x->reason_step, "1");
  ASSERT_EQ(x->logs.size(), 2u);
  EXPECT_EQ(x->logs[0].message, "step 1");
  EXPECT_EQ(x->logs[1].level, "error");
  // ... and so it stays in the store.
  auto all = (*st)->list_template_builds();
  ASSERT_TRUE(all.ok());
  for (const auto& r : *all) EXPECT_NE(r.status, "building");
  EXPECT_FALSE(again.get("app", tagged, "another-team").ok());
  // A removed template's builds go from the store too.
  again.forget("other");
  TemplateJobs third(builder, (d.path() / "files").string(), st->get());
  EXPECT_FALSE(third.get("other", "b-building", "default").ok());
  EXPECT_TRUE(third.get("app", tagged, "default").ok());
}

}  // namespace
}  // namespace abx::platform
