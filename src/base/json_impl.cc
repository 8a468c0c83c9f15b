// The one translation unit that compiles Boost.JSON (header-only mode): every abx binary gets
// exactly one copy through abx::base, and command modules loaded with dlopen bind to it.
#include <boost/json/src.hpp>
