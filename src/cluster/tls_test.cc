// abxd --cluster's TLS settings and endpoint parsing (no etcd needed).
#include "abx/cluster/tls.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "abx/cluster/membership.h"

namespace abx::cluster {
namespace {

namespace fs = std::filesystem;

class TlsSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("abx-cluster-tls-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name, fs::perms mode) {
    std::string p = (dir_ / name).string();
    std::ofstream(p) << "x";
    fs::permissions(p, mode);
    return p;
  }
  std::string key() { return file("node.key", fs::perms::owner_read); }
  TlsSettings node_tls() {
    TlsSettings s;
    s.node = {
        file("ca.pem", fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read),
        file("node.pem", fs::perms::owner_read), key()};
    s.listen = "127.0.0.1:3443";
    return s;
  }
  fs::path dir_;
};

TEST(EtcdEndpoints, HttpsAccepted) {
  auto e = parse_endpoints("https://127.0.0.1:2379,https://etcd-2:2379/");
  ASSERT_TRUE(e.ok()) << e.error().message();
  ASSERT_EQ(e->size(), 2u);
  EXPECT_TRUE((*e)[0].tls);
  EXPECT_EQ((*e)[1].host, "etcd-2");
  EXPECT_EQ((*e)[1].url(), "https://etcd-2:2379");
  auto plain = parse_endpoints("http://127.0.0.1:2379,127.0.0.1:2380");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)[1].tls);
}

TEST(EtcdEndpoints, MixOrOtherSchemesRefused) {
  auto mix = parse_endpoints("https://127.0.0.1:2379,http://127.0.0.1:2380");
  ASSERT_FALSE(mix.ok());
  EXPECT_NE(mix.error().message().find("a mix is refused"), std::string::npos);
  EXPECT_FALSE(parse_endpoints("unix://x:1").ok());
  EXPECT_FALSE(parse_endpoints("https://user@host:1").ok());
  EXPECT_FALSE(parse_endpoints("https://").ok());
}

TEST(NodeApiUrl, HttpsIsTls) {
  auto e = parse_api_url("https://10.0.0.1:3443");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->tls);
  EXPECT_EQ(e->port, 3443);
  auto p = parse_api_url("http://10.0.0.1:3000");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->tls);
  EXPECT_FALSE(parse_api_url("ftp://10.0.0.1:3000").ok());
}

TEST_F(TlsSettingsTest, PlainClusterUnchanged) {
  auto eps = parse_endpoints("http://127.0.0.1:2379");
  ASSERT_TRUE(eps.ok());
  auto plan = check_tls_settings({}, *eps, "", "127.0.0.1:3000");
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_FALSE(plan->etcd_tls);
  EXPECT_FALSE(plan->node_tls);
  EXPECT_EQ(plan->advertise_url, "http://127.0.0.1:3000");
  EXPECT_FALSE(check_tls_settings({}, *eps, "", "127.0.0.1:0").ok());
}

TEST_F(TlsSettingsTest, EtcdTlsNeedsItsCa) {
  auto eps = parse_endpoints("https://127.0.0.1:2379");
  ASSERT_TRUE(eps.ok());
  auto no_ca = check_tls_settings({}, *eps, "", "127.0.0.1:3000");
  ASSERT_FALSE(no_ca.ok());
  EXPECT_NE(no_ca.error().message().find("--etcd-ca"), std::string::npos);
  TlsSettings s;
  s.etcd.ca = file("etcd-ca.pem", fs::perms::owner_read);
  auto ok = check_tls_settings(s, *eps, "", "127.0.0.1:3000");
  ASSERT_TRUE(ok.ok()) << ok.error().message();
  EXPECT_TRUE(ok->etcd_tls);
  s.etcd.cert = file("etcd-client.pem", fs::perms::owner_read);
  auto half = check_tls_settings(s, *eps, "", "127.0.0.1:3000");
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.error().message().find("--etcd-key"), std::string::npos);
  s.etcd.key = key();
  EXPECT_TRUE(check_tls_settings(s, *eps, "", "127.0.0.1:3000").ok());
  // TLS files with plain endpoints: a mistake, not silently ignored.
  auto plain = parse_endpoints("http://127.0.0.1:2379");
  auto wasted = check_tls_settings(s, *plain, "", "127.0.0.1:3000");
  ASSERT_FALSE(wasted.ok());
  EXPECT_NE(wasted.error().message().find("https://"), std::string::npos);
}

TEST_F(TlsSettingsTest, NodeTlsNeedsAllFourAndAnHttpsUrl) {
  auto eps = parse_endpoints("http://127.0.0.1:2379");
  ASSERT_TRUE(eps.ok());
  TlsSettings s = node_tls();
  auto plan = check_tls_settings(s, *eps, "", "127.0.0.1:3000");
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_TRUE(plan->node_tls);
  EXPECT_EQ(plan->listen_port, 3443);
  EXPECT_EQ(plan->advertise_url, "https://127.0.0.1:3443");
  EXPECT_FALSE(check_tls_settings(s, *eps, "http://10.0.0.1:3443", "127.0.0.1:3000").ok());
  EXPECT_TRUE(check_tls_settings(s, *eps, "https://n1.example:3443", "127.0.0.1:3000").ok());
  TlsSettings no_listen = s;
  no_listen.listen.clear();
  auto nl = check_tls_settings(no_listen, *eps, "", "127.0.0.1:3000");
  ASSERT_FALSE(nl.ok());
  EXPECT_NE(nl.error().message().find("--cluster-listen"), std::string::npos);
  TlsSettings no_ca = s;
  no_ca.node.ca.clear();
  EXPECT_FALSE(check_tls_settings(no_ca, *eps, "", "127.0.0.1:3000").ok());
  TlsSettings bad = s;
  bad.listen = "127.0.0.1:99999";
  EXPECT_FALSE(check_tls_settings(bad, *eps, "", "127.0.0.1:3000").ok());
  bad.listen = "127.0.0.1:0";
  EXPECT_FALSE(check_tls_settings(bad, *eps, "", "127.0.0.1:3000").ok());
  EXPECT_TRUE(check_tls_settings(bad, *eps, "https://127.0.0.1:4443", "127.0.0.1:3000").ok());
  // https:// advertised without node TLS is refused.
  EXPECT_FALSE(check_tls_settings({}, *eps, "https://127.0.0.1:3443", "127.0.0.1:3000").ok());
}

TEST_F(TlsSettingsTest, KeyReadableByOthersRefused) {
  auto eps = parse_endpoints("http://127.0.0.1:2379");
  TlsSettings s = node_tls();
  fs::permissions(s.node.key, fs::perms::owner_read | fs::perms::group_read);
  auto r = check_tls_settings(s, *eps, "", "127.0.0.1:3000");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("--cluster-key"), std::string::npos);
  EXPECT_NE(r.error().message().find("group or others"), std::string::npos);
  fs::permissions(s.node.key, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_TRUE(check_tls_settings(s, *eps, "", "127.0.0.1:3000").ok());
  auto missing = check_key_file((dir_ / "absent.key").string(), "--etcd-key");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_FALSE(check_key_file(dir_.string(), "--etcd-key").ok());  // a directory
}

TEST(HostPort, Parsed) {
  auto a = parse_host_port("[::1]:3443", "--cluster-listen");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "::1");
  EXPECT_FALSE(parse_host_port("3443", "--cluster-listen").ok());
  EXPECT_FALSE(parse_host_port("h:", "--cluster-listen").ok());
  EXPECT_FALSE(parse_host_port("h:x1", "--cluster-listen").ok());
}

}  // namespace
}  // namespace abx::cluster
