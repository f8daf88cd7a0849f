// NVML, loaded with dlopen at run time: anvil builds and runs without the NVIDIA driver,
// and only the commands that ask the driver (anvil topo) need it.
//
// There is no nvml.h dependency: nvml.cpp declares the dozen entry points and types it
// uses, with NVML's documented layouts. Without the library, without a working driver or
// without a GPU, the calls throw kNoDevice (exit code 3) with a message saying which.
#pragma once

#include "sys/topo.h"

namespace anvil {

// Everything topo needs, asked of the live driver.
TopoAnswers nvml_topo_answers();

}  // namespace anvil
