// The framing checks of catalogue §2.1, shared by every abx listener (see server.h).
#include <boost/beast/core/string.hpp>
#include <charconv>
#include <string>
#include <string_view>

#include "abx/http/server.h"

namespace abx::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

std::optional<FramingError> check_request_header(const bhttp::request_header<>& req,
                                                 const Limits& lim) {
  auto bad = [](unsigned status, std::string msg) {
    return FramingError{status, invalid_argument(std::move(msg))};
  };
  if (req.target().size() > lim.max_target_bytes) {
    return bad(414,
               "request target longer than " + std::to_string(lim.max_target_bytes) + " bytes");
  }
  std::size_t fields = 0;
  std::size_t hosts = 0;
  for (const auto& f : req) {
    ++fields;
    if (f.name() == bhttp::field::host) ++hosts;
    if (f.name() == bhttp::field::transfer_encoding && !beast::iequals(f.value(), "chunked")) {
      return bad(400, "unsupported Transfer-Encoding '" + std::string(f.value()) +
                          "' (only chunked is accepted)");
    }
  }
  if (fields > lim.max_header_fields) {
    return bad(431, "more than " + std::to_string(lim.max_header_fields) + " header fields");
  }
  if (hosts > 1) return bad(400, "more than one Host header");
  if (req.version() >= 11 && hosts == 0) return bad(400, "missing Host header");
  auto target = req.target();
  if (target.empty() ||
      (target[0] != '/' && !(req.method() == bhttp::verb::options && target == "*"))) {
    return bad(400, "request target must be a path (origin-form)");
  }
  return std::nullopt;
}

std::size_t add_body_piece(std::span<boost::asio::const_buffer> bufs, std::size_t nb,
                           ChunkLine& line, boost::asio::const_buffer data, bool chunked,
                           bool last) {
  static constexpr std::string_view kCrlfLast = "\r\n0\r\n\r\n";
  const std::size_t n = data.size();
  if (chunked && n > 0) {
    const auto r = std::to_chars(line.data(), line.data() + line.size() - 2, n, 16);
    r.ptr[0] = '\r';
    r.ptr[1] = '\n';
    bufs[nb++] =
        boost::asio::buffer(line.data(), static_cast<std::size_t>(r.ptr + 2 - line.data()));
    bufs[nb++] = data;
    bufs[nb++] = boost::asio::buffer(last ? kCrlfLast : kCrlfLast.substr(0, 2));
  } else if (chunked && last) {
    bufs[nb++] = boost::asio::buffer(kCrlfLast.substr(2));
  } else if (n > 0) {
    bufs[nb++] = data;
  }
  return nb;
}

}  // namespace abx::http
