#include "cli.h"

int main(int argc, char** argv) { return abx::cli::run_main(argc, argv); }
