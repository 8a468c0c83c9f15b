// write_layer into a Store: through a file under the store's tmp/, then a verified blob writer.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "abx/base/os.h"
#include "abx/base/try.h"
#include "abx/image/layer.h"
#include "abx/image/store.h"

namespace abx::image {

namespace {
std::string errno_msg(const std::string& what, int err) { return what + ": " + std::strerror(err); }
}  // namespace

Result<LayerBlob> write_layer(Store& store, const std::string& dir,
                              const LayerWriteOptions& options) {
  // Opened first: a blob writer holds the store's shared lock, so no other process opening the
  // store sweeps tmp/ (and this temporary file with it) while the layer is written.
  ABX_ASSIGN_OR_RETURN(auto w, store.blob_writer("", -1));
  std::string tmpl = store.root() + "/tmp/layer-XXXXXX";
  UniqueFd fd(::mkostemp(tmpl.data(), O_CLOEXEC));
  if (!fd) return internal_error(errno_msg("create " + tmpl, errno));
  struct Unlink {
    std::string path;
    ~Unlink() { ::unlink(path.c_str()); }
  } unlink_tmp{tmpl};
  ABX_ASSIGN_OR_RETURN(auto blob, write_layer_to(dir, fd.get(), options));
  if (store.has_blob(blob.digest)) return blob;
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return internal_error(errno_msg("seek " + tmpl, errno));
  std::string buf(256 * 1024, '\0');
  for (;;) {
    ssize_t n = os::retry_eintr([&] { return ::read(fd.get(), buf.data(), buf.size()); });
    if (n < 0) return internal_error(errno_msg("read " + tmpl, errno));
    if (n == 0) break;
    ABX_TRY(w.write(std::string_view(buf.data(), static_cast<std::size_t>(n))));
  }
  ABX_TRY(w.commit());
  if (w.digest() != blob.digest || w.written() != blob.size) {
    return internal_error("layer " + blob.digest + " changed while it was stored");
  }
  return blob;
}

}  // namespace abx::image
