#include "abx/server/server.h"

int main(int argc, char** argv) { return abx::server::serve_main(argc, argv); }
