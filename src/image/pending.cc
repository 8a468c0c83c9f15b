// Parts of Store still being written (this file goes when they land).
#include "abx/image/store.h"
#include "store_state.h"

namespace abx::image {

Result<Image> Store::add_image(std::string_view manifest_digest,
                               const std::function<void(std::string_view)>&) {
  return Error(ErrorCode::kUnimplemented, "image store: add_image is not implemented yet");
}
Result<Image> Store::import(const Reference&, const std::function<void(std::string_view)>&) {
  return Error(ErrorCode::kUnimplemented, "image store: import is not implemented yet");
}
Result<Image> Store::directory_image(const std::string&) {
  return Error(ErrorCode::kUnimplemented, "image store: directory_image is not implemented yet");
}
Status Store::tag(std::string_view, std::string_view) {
  return Error(ErrorCode::kUnimplemented, "image store: tag is not implemented yet");
}
Status Store::untag(std::string_view) {
  return Error(ErrorCode::kUnimplemented, "image store: untag is not implemented yet");
}
Result<Image> Store::get(std::string_view) {
  return Error(ErrorCode::kUnimplemented, "image store: get is not implemented yet");
}
std::map<std::string, std::string> Store::tags() const { return {}; }
Result<std::uint64_t> Store::gc(const std::set<std::string>&) {
  return Error(ErrorCode::kUnimplemented, "image store: gc is not implemented yet");
}

}  // namespace abx::image
