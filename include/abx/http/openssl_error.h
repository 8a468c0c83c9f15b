// OpenSSL's reason for the last failure of this thread, for an error message: the first error of
// its queue as ERR_error_string_n words it ("unknown OpenSSL error" when the queue is empty), the
// queue cleared. One definition for abx's TLS code (the HTTP client, abxd's CA, the cluster's
// mutual TLS).
#pragma once

#include <string>

namespace abx::http {

std::string openssl_error_text();

}  // namespace abx::http
