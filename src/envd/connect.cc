#include "connect.h"

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

namespace abx::envd {

namespace bhttp = boost::beast::http;

http::Response connect_error_response(const Error& err, unsigned version) {
  http::Response res{static_cast<bhttp::status>(connect_http_status(err.code())), version};
  res.set(bhttp::field::content_type, "application/json");
  res.body() = connect::error_json(err);
  return res;
}

http::Response connect_stream_error_response(const Error& err, unsigned version) {
  http::Response res{bhttp::status::ok, version};
  res.set(bhttp::field::content_type, "application/connect+json");
  res.body() = connect::encode_end_stream(&err);
  return res;
}

http::Response rest_error_response(const Error& err, unsigned version) {
  unsigned status = http::http_status(err.code());
  http::Response res{static_cast<bhttp::status>(status), version};
  res.set(bhttp::field::content_type, "application/json; charset=utf-8");
  res.body() =
      boost::json::serialize(boost::json::object{{"code", status}, {"message", err.message()}});
  return res;
}

http::Response not_acceptable_response(const std::string& message, unsigned version) {
  http::Response res{bhttp::status::not_acceptable, version};
  res.set(bhttp::field::content_type, "application/json; charset=utf-8");
  res.body() = boost::json::serialize(boost::json::object{{"code", 406}, {"message", message}});
  return res;
}

}  // namespace abx::envd
