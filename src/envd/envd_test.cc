// envd over real HTTP: see the tests below.
#include <gtest/gtest.h>
