"""Upstream vllm-omni's pytest markers (from its pyproject), shared by conftest and the tests."""

UPSTREAM_MARKERS = {
    "core_model": "L1&L2 tests (run in each PR)",
    "advanced_model": "L3&L4 level tests (run in each merge or nightly)",
    "diffusion": "Diffusion model tests",
    "omni": "Omni model tests",
    "cache": "Cache backend tests",
    "parallel": "Parallelism/distributed tests",
    "cpu": "Tests that run on CPU",
    "gpu": "Tests that run on GPU",
    "cuda": "Tests that run on CUDA",
    "rocm": "Tests that run on AMD/ROCm",
    "xpu": "Tests that run on XPU",
    "npu": "Tests that run on NPU/Ascend",
    "slow": "Slow tests",
    "benchmark": "Benchmark tests",
}
