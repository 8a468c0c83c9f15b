// The one translation unit that compiles Boost.URL (header-only mode) for abxd.
#include <boost/url/src.hpp>
