// REQUIRE_GPU(), the first statement of every test that needs a GPU: in a build without CUDA,
// or on a machine without a usable CUDA GPU, the test skips and says so.
#pragma once

#include <gtest/gtest.h>

#include "ops/ops.h"

#define REQUIRE_GPU()                                                     \
  do {                                                                    \
    if (!::anvil::cuda_available()) GTEST_SKIP() << "no usable CUDA GPU"; \
  } while (0)
