"""The wheel's dependencies, chosen before CMake runs (pyproject.toml's [[tool.dynamic-metadata]]).

A CUDA build needs NVIDIA's CUDA 13 libraries from PyPI at run time: cuBLAS and cuBLASLt,
NCCL, and cuDNN (loaded with dlopen for attention), which loads NVRTC from beside it; the
CUDA runtime is linked statically. pip puts them in site-packages/nvidia/{cu13,nccl,cudnn}/lib,
where the binary's RUNPATH looks (CMakeLists.txt). Building one also needs the header-only
cudnn-frontend, a build requirement here. A CPU build needs nothing.

The build is a CUDA one where CMake will find nvcc, looking where it looks ($CUDACXX, PATH,
$CUDA_PATH/bin, /usr/local/cuda/bin), unless the environment says ANVIL_CUDA=OFF
(pyproject.toml hands that to CMake too). CMake runs this file to check that it built what the
wheel declares: `python dependencies.py` prints "cuda" or "cpu".
"""

import os
import shutil
import sys

NVIDIA_RUNTIME = [
    "nvidia-cublas>=13.1,<14",
    "nvidia-nccl-cu13>=2.28,<3",
    "nvidia-cudnn-cu13>=9.13,<10",
    "nvidia-cuda-nvrtc>=13,<14",
]
CUDNN_FRONTEND = "nvidia-cudnn-frontend==1.32.0"  # the version tools/setup.sh installs


def cuda_build():
    if os.environ.get("ANVIL_CUDA", "").strip().lower() in ("0", "off", "false", "no", "n"):
        return False
    if os.environ.get("CUDACXX"):
        return True
    folders = [os.path.join(os.environ["CUDA_PATH"], "bin")] if os.environ.get("CUDA_PATH") else []
    folders.append("/usr/local/cuda/bin")
    if shutil.which("nvcc"):
        return True
    return any(os.access(os.path.join(f, "nvcc"), os.X_OK) for f in folders)


def dynamic_metadata(settings, project):
    return {"dependencies": NVIDIA_RUNTIME if cuda_build() else []}


def get_requires_for_dynamic_metadata(settings):
    return [CUDNN_FRONTEND] if cuda_build() else []


if __name__ == "__main__":
    sys.stdout.write("cuda\n" if cuda_build() else "cpu\n")
