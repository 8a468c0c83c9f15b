#include "abx/server/server.h"
