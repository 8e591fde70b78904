"""Writes a memory snapshot of any size, for measuring how `vramfit doctor` reads big files.

A real snapshot of a long run with `_record_memory_history(max_entries=...)` holds millions
of trace entries. Building such a dict in Python and calling `pickle.dump` needs several
times the file size in RAM, so this script writes the same pickle opcodes that `pickle`
writes for protocol 4 (without the optional FRAME opcodes) straight to the file, one event
at a time. `--check` proves the stream equal to what `pickle.loads` reads back from a small
one built the ordinary way.

    python3 make_big_snapshot.py OUT.pickle --events 20000000
    python3 make_big_snapshot.py --check
"""

import argparse
import io
import pickle
import struct

MIB = 1 << 20
STACKS = 2000
DEPTH = 24
SEGMENTS = 400
ACTIONS = ("alloc", "free_requested", "free_completed")
SIZES = (512, 4096, 2 * MIB, 20 * MIB, 64 * MIB)


class Writer:
    """Emits protocol-4 opcodes and numbers memo entries as `pickle.Pickler` does."""

    def __init__(self, out):
        self.out = out
        self.memo = 0
        self.strings = {}

    def raw(self, b):
        self.out.write(b)

    def memoize(self):
        self.raw(b"\x94")
        self.memo += 1
        return self.memo - 1

    def get(self, index):
        self.raw(b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index))

    def str(self, s):
        if s in self.strings:
            self.get(self.strings[s])
            return
        data = s.encode()
        if len(data) < 256:
            self.raw(b"\x8c" + bytes([len(data)]) + data)
        else:
            self.raw(b"X" + struct.pack("<I", len(data)) + data)
        self.strings[s] = self.memoize()

    def int(self, v):
        if 0 <= v < 256:
            self.raw(b"K" + bytes([v]))
        elif 0 <= v < 65536:
            self.raw(b"M" + struct.pack("<H", v))
        elif -(2**31) <= v < 2**31:
            self.raw(b"J" + struct.pack("<i", v))
        else:
            n = (v.bit_length() + 8) // 8
            self.raw(b"\x8a" + bytes([n]) + v.to_bytes(n, "little", signed=True))

    def value(self, v):
        if isinstance(v, bool):
            self.raw(b"\x88" if v else b"\x89")
        elif isinstance(v, int):
            self.int(v)
        elif isinstance(v, str):
            self.str(v)
        else:
            raise TypeError(type(v))

    def scalars(self, items):
        """The keys and values of a dict (between its MARK and SETITEMS)."""
        for k, v in items:
            self.str(k)
            self.value(v)


class Stacks:
    """Frame dicts and frame lists, written where first used and read back from the memo
    after, as PyTorch's symbolizer shares them and `pickle` memoises them."""

    def __init__(self, w):
        self.w = w
        self.frames = {}
        self.stacks = {}

    def frame(self, f):
        w = self.w
        if f in self.frames:
            w.get(self.frames[f])
            return
        user = f % 3 == 0
        filename = (f"/home/user/project/model_{f % 97}.py" if user
                    else f"/usr/lib/python3.11/site-packages/torch/nn/modules/mod_{f % 53}.py")
        w.raw(b"}")
        self.frames[f] = w.memoize()
        w.raw(b"(")
        w.scalars((("filename", filename), ("line", 10 + f % 900), ("name", f"fn_{f}")))
        w.raw(b"u")

    def stack(self, s):
        w = self.w
        if s in self.stacks:
            w.get(self.stacks[s])
            return
        w.raw(b"]")
        self.stacks[s] = w.memoize()
        w.raw(b"(")
        for d in range(DEPTH):
            self.frame(s + d)
        w.raw(b"e")


def write(out, events, seed=1):
    w = Writer(out)
    stacks = Stacks(w)
    state = seed

    def rand(n):
        nonlocal state
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        return (state >> 33) % n

    w.raw(b"\x80\x04}")
    w.memoize()
    w.raw(b"(")
    base = 0x7F0000000000
    w.str("segments")
    w.raw(b"]")
    w.memoize()
    w.raw(b"(")
    for s in range(SEGMENTS):
        address = base + s * 64 * MIB
        live = 40 * MIB if rand(2) == 0 else 0
        w.raw(b"}")
        w.memoize()
        w.raw(b"(")
        w.scalars((("device", 0), ("address", address), ("total_size", 64 * MIB),
                   ("allocated_size", live), ("active_size", live), ("requested_size", live),
                   ("stream", 0), ("segment_type", "large")))
        w.str("segment_pool_id")
        w.raw(b"K\x00K\x00\x86")
        w.memoize()
        w.scalars((("is_expandable", False),))
        w.str("frames")
        w.raw(b"]")
        w.memoize()
        w.str("blocks")
        w.raw(b"]")
        w.memoize()
        w.raw(b"(")
        blocks = ((address, 40 * MIB, "active_allocated" if live else "inactive"),
                  (address + 40 * MIB, 24 * MIB, "inactive"))
        for addr, size, state_name in blocks:
            w.raw(b"}")
            w.memoize()
            w.raw(b"(")
            w.scalars((("address", addr), ("size", size), ("requested_size", size), ("state", state_name)))
            w.str("frames")
            stacks.stack(rand(STACKS))
            w.raw(b"u")
        w.raw(b"e")
        w.raw(b"u")
    w.raw(b"e")

    w.str("device_traces")
    w.raw(b"]")
    w.memoize()
    w.raw(b"]")
    w.memoize()
    t = 1_700_000_000_000_000
    batch = 0
    for i in range(events):
        if batch == 0:
            w.raw(b"(")
        action = ACTIONS[i % 3]
        t += 1 + rand(50)
        w.raw(b"}")
        w.memoize()
        w.raw(b"(")
        w.scalars((("action", action), ("addr", base + (i // 3) * 512),
                   ("size", SIZES[(i // 3) % len(SIZES)]), ("stream", 0), ("time_us", t),
                   ("compile_context", "N/A"), ("user_metadata", "")))
        if action == "alloc":
            w.str("frames")
            stacks.stack(rand(STACKS))
        w.raw(b"u")
        batch += 1
        if batch == 1000:
            w.raw(b"e")
            batch = 0
    if batch:
        w.raw(b"e")
    w.raw(b"a")

    w.str("allocator_settings")
    w.raw(b"}")
    w.memoize()
    w.raw(b"(")
    w.scalars((("PYTORCH_CUDA_ALLOC_CONF", ""), ("expandable_segments", False)))
    w.raw(b"u")
    w.raw(b"u.")


def check():
    buf = io.BytesIO()
    write(buf, 2500)
    snap = pickle.loads(buf.getvalue())
    assert len(snap["segments"]) == SEGMENTS
    assert len(snap["device_traces"]) == 1 and len(snap["device_traces"][0]) == 2500
    events = snap["device_traces"][0]
    assert [e["action"] for e in events[:3]] == list(ACTIONS)
    # Shared, as in a real snapshot: events with the same stack hold the same list object,
    # and stacks that overlap hold the same frame dicts.
    lists = {id(e["frames"]) for e in events if "frames" in e}
    assert len(lists) < sum("frames" in e for e in events)
    frames = {id(f) for e in events if "frames" in e for f in e["frames"]}
    assert len(frames) <= STACKS + DEPTH
    # The same object, pickled again by `pickle` itself, reads back equal.
    assert pickle.loads(pickle.dumps(snap, protocol=4)) == snap
    print("ok:", len(buf.getvalue()), "bytes for 2500 events; pickle.loads agrees")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.check:
        check()
        return
    with open(args.out, "wb", buffering=1 << 20) as f:
        write(f, args.events)


if __name__ == "__main__":
    main()
