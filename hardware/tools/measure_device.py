"""Measure the device facts a hardware YAML records, on the machine that has the GPU.

Run on one GPU: ``python hardware/tools/measure_device.py OUT.json``. It reads the driver's
view of the device with ``nvidia-smi`` (name, total memory, power limits) and samples the
board power draw in three states: idle (no process holds the GPU), standby (a process holds a
CUDA context and a large allocation but runs nothing) and active (back-to-back bf16 GEMMs),
plus the achieved bf16 GEMM rate and device-to-device copy bandwidth. Without PyTorch only the
nvidia-smi part and the idle sample run. Every figure in the output is raw measurement; the
YAML comment that uses one must name this script, the date and the machine.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

QUERY = ("name,memory.total,power.draw,power.limit,power.default_limit,power.max_limit,"
         "clocks.max.sm,clocks.max.mem,pcie.link.gen.max,pcie.link.width.max,driver_version")


def smi(fields: str) -> list[str]:
    out = subprocess.run(["nvidia-smi", "-i", "0", f"--query-gpu={fields}",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True,
                         check=True).stdout
    return [v.strip() for v in out.strip().splitlines()[0].split(",")]


def sample_power(seconds: float, period: float = 0.2) -> list[float]:
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            samples.append(float(smi("power.draw")[0]))
        except ValueError:  # "[N/A]" on boards that do not report it
            pass
        time.sleep(period)
    return samples


def summary(samples: list[float]) -> dict:
    s = sorted(samples)
    return {"n": len(s), "median_w": s[len(s) // 2] if s else None,
            "min_w": s[0] if s else None, "max_w": s[-1] if s else None}


def torch_part(result: dict) -> None:
    import torch
    free, total = torch.cuda.mem_get_info()
    result["torch_mem_get_info_total_bytes"] = total
    result["torch_mem_get_info_free_bytes"] = free
    hold = torch.empty(int(free * 0.8), dtype=torch.uint8, device="cuda")  # model-loaded stand-in
    torch.cuda.synchronize()
    time.sleep(2.0)
    result["standby_power"] = summary(sample_power(6.0))
    del hold
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    stop = threading.Event()
    samples: list[float] = []

    def sampler() -> None:
        time.sleep(3.0)  # let clocks and temperature settle
        while not stop.is_set():
            samples.extend(sample_power(0.2, 0.2))

    t = threading.Thread(target=sampler)
    t.start()
    iters, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 15.0:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        iters += 20
    dt = time.perf_counter() - t0
    stop.set()
    t.join()
    result["gemm_bf16_8192_tflops"] = 2 * n ** 3 * iters / dt / 1e12
    result["active_power"] = summary(samples)
    del a, b
    x = torch.empty(2 ** 32, dtype=torch.uint8, device="cuda")  # 4 GiB
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    t0, reps = time.perf_counter(), 20
    for _ in range(reps):
        y.copy_(x)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    # a copy reads and writes every byte: 2 x size per repetition, decimal GB/s
    result["d2d_copy_gbs"] = 2 * x.numel() * reps / dt / 1e9


def main() -> None:
    result: dict = {"when_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    result["nvidia_smi"] = dict(zip(QUERY.split(","), smi(QUERY)))
    result["idle_power"] = summary(sample_power(6.0))
    try:
        torch_part(result)
    except ImportError:
        result["torch"] = "not installed: standby/active/GEMM/copy not measured"
    text = json.dumps(result, indent=1)
    print(text)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
