// Fuzz target: a sandbox's HTTP/2 bytes (after the client preface) through an nghttp2 server
// session set up as the egress proxy's (egress_h2.cc), each request header block then checked
// and rewritten as the proxy does (abx::egress::check_h2_request, apply_h2_headers). Never
// crashes; a forwarded block names the connection's host, carries the rule's header exactly
// once and its pseudo-headers unchanged and first, and is accepted by an nghttp2 client session.
#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "abx/egress/h2_request.h"

namespace {

namespace egress = abx::egress;
constexpr std::string_view kName = "web.abx.test";

struct State {
  std::map<std::int32_t, std::vector<egress::Header>> blocks;
  nghttp2_session* client = nullptr;
};

void on_block(State& st, std::vector<egress::Header> fields) {
  std::string host;
  const std::vector<egress::Header> before = fields;
  auto refused = egress::check_h2_request(fields, kName, &host);
  if (refused) {
    if (refused->status != 400 && refused->status != 405 && refused->status != 421) std::abort();
    return;
  }
  if (host != kName) std::abort();
  const std::vector<egress::Header> rule = {{"Authorization", "Bearer rule"}, {"X-Key", "1"}};
  std::size_t first = egress::apply_h2_headers(fields, rule);
  if (first != fields.size() - rule.size()) std::abort();
  int auth = 0;
  bool regular = false;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& [k, v] = fields[i];
    if (k == "authorization") ++auth;
    if (!k.empty() && k[0] == ':') {
      if (regular) std::abort();  // a pseudo-header after a regular one
    } else {
      regular = true;
    }
  }
  if (auth != 1 || fields[first].second != "Bearer rule") std::abort();
  for (std::size_t i = 0; i < before.size() && before[i].first.starts_with(":"); ++i)
    if (fields[i] != before[i]) std::abort();
  std::vector<nghttp2_nv> nv;
  for (const auto& [k, v] : fields)
    nv.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(k.data())),
                  reinterpret_cast<std::uint8_t*>(const_cast<char*>(v.data())), k.size(), v.size(),
                  NGHTTP2_NV_FLAG_NONE});
  if (nghttp2_submit_request(st.client, nullptr, nv.data(), nv.size(), nullptr, nullptr) < 0)
    return;  // e.g. the client's stream ids ran out
  const std::uint8_t* out = nullptr;
  while (nghttp2_session_mem_send(st.client, &out) > 0) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  State st;
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(
      cbs, [](nghttp2_session*, const nghttp2_frame* f, void* user) {
        static_cast<State*>(user)->blocks[f->hd.stream_id].clear();
        return 0;
      });
  nghttp2_session_callbacks_set_on_header_callback(
      cbs, [](nghttp2_session*, const nghttp2_frame* f, const std::uint8_t* k, std::size_t kl,
              const std::uint8_t* v, std::size_t vl, std::uint8_t, void* user) {
        static_cast<State*>(user)->blocks[f->hd.stream_id].emplace_back(
            std::string(reinterpret_cast<const char*>(k), kl),
            std::string(reinterpret_cast<const char*>(v), vl));
        return 0;
      });
  nghttp2_session_callbacks_set_on_frame_recv_callback(
      cbs, [](nghttp2_session*, const nghttp2_frame* f, void* user) {
        auto* s = static_cast<State*>(user);
        if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST)
          on_block(*s, std::move(s->blocks[f->hd.stream_id]));
        s->blocks.erase(f->hd.stream_id);
        return 0;
      });
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_session* server = nullptr;
  nghttp2_session_server_new2(&server, cbs, &st, opt);
  nghttp2_session_client_new2(&st.client, cbs, nullptr, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  const nghttp2_settings_entry settings[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
                                             {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 65536}};
  nghttp2_submit_settings(server, NGHTTP2_FLAG_NONE, settings, 2);
  std::string in(NGHTTP2_CLIENT_MAGIC, NGHTTP2_CLIENT_MAGIC_LEN);
  in.append(reinterpret_cast<const char*>(data), size);
  nghttp2_session_mem_recv(server, reinterpret_cast<const std::uint8_t*>(in.data()), in.size());
  const std::uint8_t* out = nullptr;
  while (nghttp2_session_mem_send(server, &out) > 0) {
  }
  nghttp2_session_del(server);
  nghttp2_session_del(st.client);
  return 0;
}
