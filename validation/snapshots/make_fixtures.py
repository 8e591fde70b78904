"""Writes the memory-snapshot, memory_stats and hostile-pickle fixtures of vramfit-doctor.

The snapshots have the shape `torch.cuda.memory._snapshot()` returns (see
torch/cuda/memory.py, `_snapshot` docstring): a dict with `segments` (each with `blocks`),
`device_traces` and `allocator_settings`. Like real snapshots, blocks and trace entries
share the same frame dicts and frame lists, so `pickle` writes memo references.
No PyTorch is needed: run `python3 make_fixtures.py` from this directory.
"""

import json
import os
import pickle

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "vramfit-doctor", "tests", "fixtures", "snapshots")
MIB = 1 << 20


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


# Shared frame objects, as PyTorch's symbolizer reuses them.
F_LINEAR = frame("/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward")
F_ATTN = frame("/home/user/model.py", 88, "attention")
F_MLP = frame("/home/user/model.py", 121, "mlp")
F_LOSS = frame("/home/user/train.py", 57, "compute_loss")
F_STEP = frame("/home/user/train.py", 203, "train_step")
F_OPT = frame("/usr/lib/python3.11/site-packages/torch/optim/adamw.py", 480, "_multi_tensor_adamw")
STACK_ATTN = [F_LINEAR, F_ATTN, F_STEP]
STACK_MLP = [F_LINEAR, F_MLP, F_STEP]
STACK_LOSS = [F_LOSS, F_STEP]
STACK_OPT = [F_OPT, F_STEP]


def block(address, size, state, stack):
    return {"address": address, "size": size, "requested_size": size, "state": state, "frames": stack}


def segment(address, blocks, stream=0, expandable=False):
    total = sum(b["size"] for b in blocks)
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {
        "device": 0, "address": address, "total_size": total, "allocated_size": allocated,
        "active_size": allocated, "requested_size": allocated, "stream": stream,
        "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": expandable,
        "frames": [], "blocks": blocks,
    }


def fragmented_oom_snapshot():
    base = 0x7F0000000000
    segs = []
    addr = base
    # Eight 512 MiB segments, each with a live 320 MiB activation and a 192 MiB hole.
    for i in range(8):
        stack = STACK_ATTN if i % 2 == 0 else STACK_MLP
        blocks = [block(addr, 320 * MIB, "active_allocated", stack), block(addr + 320 * MIB, 192 * MIB, "inactive", [])]
        segs.append(segment(addr, blocks))
        addr += 512 * MIB
    # Optimizer state: one 2 GiB segment fully used; logits 1 GiB.
    segs.append(segment(addr, [block(addr, 2048 * MIB, "active_allocated", STACK_OPT)]))
    addr += 2048 * MIB
    segs.append(segment(addr, [block(addr, 1024 * MIB, "active_allocated", STACK_LOSS)]))
    addr += 1024 * MIB
    # One fully free cached segment, and one block waiting for another stream.
    segs.append(segment(addr, [block(addr, 64 * MIB, "inactive", [])]))
    addr += 64 * MIB
    segs.append(segment(addr, [block(addr, 20 * MIB, "active_pending_free", STACK_MLP)], stream=7))

    trace = []
    t = 1_700_000_000_000_000
    for step in range(40):
        for i, stack in enumerate((STACK_ATTN, STACK_MLP, STACK_LOSS)):
            t += 1500
            size = (64 + 16 * i) * MIB
            if step % 10 == 0 and i == 0:
                trace.append({"action": "segment_alloc", "addr": base + step, "size": 512 * MIB, "stream": 0, "time_us": t, "frames": stack})
            trace.append({"action": "alloc", "addr": base + step * 7 + i, "size": size, "stream": 0, "time_us": t, "frames": stack})
        for i in range(3):
            t += 800
            trace.append({"action": "free_requested", "addr": base + step * 7 + i, "size": (64 + 16 * i) * MIB, "stream": 0, "time_us": t})
            trace.append({"action": "free_completed", "addr": base + step * 7 + i, "size": (64 + 16 * i) * MIB - (MIB if i == 2 else 0), "stream": 0, "time_us": t})
    t += 2000
    trace.append({"action": "oom", "addr": 0, "device_free": 118 * MIB, "size": 768 * MIB, "stream": 0, "time_us": t, "frames": STACK_LOSS})
    return {
        "segments": segs,
        "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
                               "expandable_segments": False, "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)}},
        "external_annotations": [],
    }


def small_expandable_snapshot():
    base = 0x7E0000000000
    blocks = [block(base, 40 * MIB, "active_allocated", STACK_MLP), block(base + 40 * MIB, 20 * MIB, "inactive", [])]
    return {
        "segments": [segment(base, blocks, expandable=True)],
        "device_traces": [[
            {"action": "segment_map", "addr": base, "size": 60 * MIB, "stream": 0, "time_us": 10},
            {"action": "alloc", "addr": base, "size": 40 * MIB, "stream": 0, "time_us": 20, "frames": STACK_MLP},
        ]],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "expandable_segments": True},
    }


def two_devices_snapshot():
    """Segments of device 0 and 1, and a trace per device; device 1 has the longer trace and
    runs out of memory."""
    base = 0x7D0000000000
    seg0 = segment(base, [block(base, 30 * MIB, "active_allocated", STACK_ATTN)])
    seg1 = segment(base + 64 * MIB, [block(base + 64 * MIB, 50 * MIB, "active_allocated", STACK_MLP),
                                     block(base + 114 * MIB, 14 * MIB, "inactive", [])])
    seg1["device"] = 1
    trace0 = [{"action": "segment_alloc", "addr": base, "size": 30 * MIB, "stream": 0, "time_us": 5},
              {"action": "alloc", "addr": base, "size": 30 * MIB, "stream": 0, "time_us": 6, "frames": STACK_ATTN}]
    trace1 = [{"action": "segment_alloc", "addr": base + 64 * MIB, "size": 64 * MIB, "stream": 0, "time_us": 10}]
    for i in range(5):
        trace1.append({"action": "alloc", "addr": base + 64 * MIB, "size": 10 * MIB, "stream": 0,
                       "time_us": 20 + i, "frames": STACK_MLP})
    trace1.append({"action": "oom", "addr": 0, "device_free": 2 * MIB, "size": 96 * MIB, "stream": 0,
                   "time_us": 40, "frames": STACK_LOSS})
    return {"segments": [seg0, seg1], "device_traces": [trace0, trace1],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}}


def legacy_segment_list():
    """`torch.cuda.memory_snapshot()` of PyTorch 1.x: the bare list of segments."""
    base = 0x7C0000000000
    return [segment(base, [block(base, 12 * MIB, "active_allocated", STACK_OPT), block(base + 12 * MIB, 8 * MIB, "inactive", [])]),
            segment(base + 20 * MIB, [block(base + 20 * MIB, 2 * MIB, "inactive", [])])]


class Hostile:
    """Pickles to a call of os.system: the reader must refuse it without running it."""

    def __reduce__(self):
        return (os.system, ("echo this must never run",))


def memory_stats():
    stats = {}
    values = {
        "allocated_bytes": (9_663_676_416, 15_032_385_536),
        "reserved_bytes": (16_106_127_360, 16_106_127_360),
        "active_bytes": (9_663_676_416, 15_032_385_536),
        "inactive_split_bytes": (5_368_709_120, 5_905_580_032),
        "requested_bytes": (9_600_000_000, 15_000_000_000),
    }
    for key, (current, peak) in values.items():
        for pool, share in (("all", 1.0), ("large_pool", 0.99), ("small_pool", 0.01)):
            stats[f"{key}.{pool}.current"] = int(current * share)
            stats[f"{key}.{pool}.peak"] = int(peak * share)
            stats[f"{key}.{pool}.allocated"] = int(peak * 40 * share)
            stats[f"{key}.{pool}.freed"] = int((peak * 40 - current) * share)
    for key, current in (("segment", 212), ("allocation", 1480), ("active", 1480), ("inactive_split", 160)):
        for pool in ("all", "large_pool", "small_pool"):
            for field in ("current", "peak", "allocated", "freed"):
                stats[f"{key}.{pool}.{field}"] = current
    stats.update({"num_alloc_retries": 3, "num_ooms": 1, "max_split_size": -1, "num_sync_all_streams": 0,
                  "num_device_alloc": 215, "num_device_free": 3})
    return dict(sorted(stats.items()))


def memory_summary(stats, device=0):
    """The text of torch.cuda.memory_summary() for `stats`, following torch/cuda/memory.py."""

    def _format_size(sz, pref_sz):
        prefixes = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
        prefix = prefixes[0]
        for new_prefix in prefixes[1:]:
            if pref_sz < 768 * 1024:
                break
            prefix = new_prefix
            sz //= 1024
            pref_sz /= 1024
        return f"{sz:6d} {prefix}"

    def _format_count(cnt, pref_cnt):
        prefixes = [" ", "K", "M"]
        prefix = prefixes[0]
        for new_prefix in prefixes[1:]:
            if pref_cnt < 750 * 1000:
                break
            prefix = new_prefix
            cnt //= 1000
            pref_cnt /= 1000
        return f"{cnt:7d} {prefix} "

    metrics_to_display = [
        ("allocated_bytes", "Allocated memory", _format_size),
        ("active_bytes", "Active memory", _format_size),
        ("requested_bytes", "Requested memory", _format_size),
        ("reserved_bytes", "GPU reserved memory", _format_size),
        ("inactive_split_bytes", "Non-releasable memory", _format_size),
        ("allocation", "Allocations", _format_count),
        ("active", "Active allocs", _format_count),
        ("segment", "GPU reserved segments", _format_count),
        ("inactive_split", "Non-releasable allocs", _format_count),
    ]
    lines = []
    lines.append("=" * 75)
    lines.append(" {_:16} PyTorch CUDA memory summary, device ID {device:<17d} ")
    lines.append("-" * 75)
    lines.append("  {_:9} CUDA OOMs: {num_ooms:<12d} | {_:6} cudaMalloc retries: {num_alloc_retries:<8d}  ")
    lines.append("=" * 75)
    lines.append("        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ")
    for metric_key, metric_name, formatter in metrics_to_display:
        lines.append("-" * 75)
        submetrics = [("all", metric_name)]
        submetrics.append(("large_pool", "      from large pool"))
        submetrics.append(("small_pool", "      from small pool"))
        current_prefval, peak_prefval, allocated_prefval, freed_prefval = None, None, None, None
        for submetric_key, submetric_name in submetrics:
            prefix = metric_key + "." + submetric_key + "."
            current = stats[prefix + "current"]
            peak = stats[prefix + "peak"]
            allocated = stats[prefix + "allocated"]
            freed = stats[prefix + "freed"]
            if current_prefval is None:
                current_prefval, peak_prefval, allocated_prefval, freed_prefval = current, peak, allocated, freed
            lines.append(
                f" {submetric_name:<21} | {formatter(current, current_prefval)} | {formatter(peak, peak_prefval)} | "
                f"{formatter(allocated, allocated_prefval)} | {formatter(freed, freed_prefval)} "
            )
    lines.append("=" * 75)
    fmt_dict = {"_": "", "device": device}
    for k, v in stats.items():
        fmt_dict[k.replace(".", "-")] = v
    fmt_dict["num_ooms"] = stats["num_ooms"]
    fmt_dict["num_alloc_retries"] = stats["num_alloc_retries"]
    return "|" + "|\n|".join(lines).format(**fmt_dict) + "|\n"


def main():
    os.makedirs(OUT, exist_ok=True)
    snap = fragmented_oom_snapshot()
    data = pickle.dumps(snap, protocol=4)
    with open(os.path.join(OUT, "oom_fragmented.pickle"), "wb") as f:
        f.write(data)
    with open(os.path.join(OUT, "oom_fragmented_truncated.pickle"), "wb") as f:
        f.write(data[: len(data) // 2])
    with open(os.path.join(OUT, "expandable_protocol2.pickle"), "wb") as f:
        pickle.dump(small_expandable_snapshot(), f, protocol=2)
    with open(os.path.join(OUT, "expandable_protocol5.pickle"), "wb") as f:
        pickle.dump(small_expandable_snapshot(), f, protocol=5)
    with open(os.path.join(OUT, "two_devices.pickle"), "wb") as f:
        pickle.dump(two_devices_snapshot(), f, protocol=4)
    with open(os.path.join(OUT, "legacy_segment_list.pickle"), "wb") as f:
        pickle.dump(legacy_segment_list(), f, protocol=3)
    with open(os.path.join(OUT, "hostile_reduce.pickle"), "wb") as f:
        pickle.dump({"segments": [Hostile()]}, f, protocol=4)
    with open(os.path.join(OUT, "hostile_global_protocol0.pickle"), "wb") as f:
        pickle.dump(os.system, f, protocol=0)
    with open(os.path.join(OUT, "not_a_snapshot.pickle"), "wb") as f:
        pickle.dump({"weights": [1.0, 2.0], "name": "model"}, f, protocol=4)
    with open(os.path.join(OUT, "memory_stats.json"), "w") as f:
        json.dump(memory_stats(), f, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "memory_summary.txt"), "w") as f:
        f.write(memory_summary(memory_stats()))


if __name__ == "__main__":
    main()
