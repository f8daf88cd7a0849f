"""torch.distributed's all-reduce bus bandwidth, beside `anvil bench all_reduce`: a 1 GiB bf16
tensor, 5 untimed and 20 timed all-reduces, nccl-tests' bus-bandwidth factor 2 (n - 1) / n.

    torchrun --standalone --nproc-per-node=gpu bench/reference_allreduce.py
"""
import os
import time

import torch
import torch.distributed as dist

WARMUP, TIMED = 5, 20


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    n = dist.get_world_size()
    x = torch.ones(2**30 // 2, dtype=torch.bfloat16, device=device)
    for _ in range(WARMUP):
        dist.all_reduce(x)
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(TIMED):
        dist.all_reduce(x)
    torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - t0) / TIMED
    busbw = x.numel() * x.element_size() / seconds * 2 * (n - 1) / n / 1e9
    if dist.get_rank() == 0:
        print("all_reduce bus bandwidth: %.1f GB/s (world %d, 1 GiB bf16)" % (busbw, n))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
