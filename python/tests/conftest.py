"""Shared fixtures: the device the suite runs on and a kernel cache kept for the whole session.

NORMJIT_TEST_DEVICE=cuda runs every test on CUDA tensors (tools/gpu-check); the default is the CPU, where
the kernels run on the emulator backend (each distinct kernel is compiled once by the host compiler and
kept in the cache, so shapes are reused across tests).
"""
import os
import tempfile

import pytest

if not os.environ.get("NORMJIT_CACHE_DIR"):
    os.environ["NORMJIT_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), f"normjit-pytest-{os.getuid()}")

import torch  # noqa: E402

DEVICE = os.environ.get("NORMJIT_TEST_DEVICE", "cpu")
if DEVICE == "cuda" and not torch.cuda.is_available():
    raise RuntimeError("NORMJIT_TEST_DEVICE=cuda but torch sees no CUDA device")


@pytest.fixture
def device():
    return DEVICE


def pytest_report_header(config):
    import normjit
    return (f"normjit {normjit.__version__} from {normjit.__file__}; C library {normjit.c_version()} at "
            f"{normjit.library().path}; torch {torch.__version__}; device {DEVICE}; "
            f"cache {os.environ['NORMJIT_CACHE_DIR']}")
