"""Side-by-side forward timing on the seed shapes (manifests/seeds.txt): normjit against torch eager and
torch.compile, CUDA events, median of a few runs. Bounded by --budget seconds: normjit and eager are timed
for every shape first, torch.compile (a compile per shape) for as many as the rest of the budget allows.

    python3 python/bench/seeds.py [--budget 45] [--max-elements N] [--device cuda] [manifest]
"""
import argparse
import os
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as TF

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import normjit.torch as njt  # noqa: E402

DT = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def parse(line):
    """(label, x, normjit fn, torch fn) of one manifest line of the presets the seeds use."""
    words = line.split()
    preset, dtype = words[0], DT[words[1]]
    layout = words[2] if re.fullmatch(r"n[a-z]+", words[2]) else None
    shape = [int(e) for e in words[3 if layout else 2].split("x")]
    opts = dict(w.split("=", 1) for w in words if "=" in w)
    return preset, dtype, layout, shape, opts


def build(preset, dtype, layout, shape, opts, dev):
    if preset == "layernorm":
        x = torch.randn(shape, device=dev, dtype=dtype)
        w, b = torch.rand(shape[-1:], device=dev), torch.randn(shape[-1:], device=dev)
        return x, (lambda: njt.layer_norm(x, -1, w, b)), (lambda x, w, b: TF.layer_norm(x, shape[-1:], w, b)), (w, b)
    if preset == "instancenorm":
        cl = layout.endswith("c")
        logical = [shape[0], shape[-1]] + shape[1:-1] if cl else shape
        x = torch.randn(logical, device=dev, dtype=dtype)
        if cl:
            x = x.contiguous(memory_format=torch.channels_last_3d if x.dim() == 5 else torch.channels_last)
        c = logical[1]
        w, b = torch.rand(c, device=dev), torch.randn(c, device=dev)
        return x, (lambda: njt.instance_norm(x, w, b)), (lambda x, w, b: TF.instance_norm(x, weight=w, bias=b)), (w, b)
    if preset == "groupnorm":
        g = int(opts["groups"])
        x = torch.randn(shape, device=dev, dtype=dtype)
        if layout == "nhwc":
            x = x.contiguous(memory_format=torch.channels_last)
        w, b = torch.rand(shape[1], device=dev), torch.randn(shape[1], device=dev)
        return x, (lambda: njt.group_norm(x, g, w, b)), (lambda x, w, b: TF.group_norm(x, g, w, b)), (w, b)
    raise ValueError(f"preset {preset} not timed here")


def time_us(fn, dev, reps=10):
    if dev == "cpu":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("manifest", nargs="?", default=os.path.join(os.path.dirname(__file__), "../../manifests/seeds.txt"))
    ap.add_argument("--budget", type=float, default=45.0)
    ap.add_argument("--max-elements", type=int, default=1 << 28)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    t_end = time.monotonic() + a.budget
    lines = [l.strip() for l in open(a.manifest) if l.strip() and not l.lstrip().startswith("#")]
    rows = []
    for line in lines:
        preset, dtype, layout, shape, opts = parse(line)
        n = 1
        for e in shape:
            n *= e
        if n > a.max_elements:
            rows.append([line, "skipped (--max-elements)"])
            continue
        if time.monotonic() > t_end:
            rows.append([line, "skipped (budget)"])
            continue
        x, nj, tf, (w, b) = build(preset, dtype, layout, shape, opts, a.device)
        t0 = time.perf_counter()
        y = nj()
        if a.device != "cpu":
            torch.cuda.synchronize()
        first_ms = (time.perf_counter() - t0) * 1e3
        ref = tf(x, w, b)
        err = (y.float() - ref.float()).abs().max().item()
        t_nj = time_us(nj, a.device)
        t_eager = time_us(lambda: tf(x, w, b), a.device)
        gbs = 2 * n * x.element_size() / t_nj / 1e3
        rows.append([line, first_ms, t_nj, gbs, t_eager, None, err, (x, tf, w, b)])
        del y, ref
    dev = torch.cuda.get_device_name() if a.device != "cpu" else "cpu (emulator: not a timing)"
    print(f"normjit vs torch {torch.__version__} on {dev}; forward, median of 10 runs, us; first = normjit's "
          "first call including its JIT compile or cache load (ms)\n")
    print("| problem | normjit first (ms) | normjit (us) | GB/s | eager (us) | eager/normjit | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if len(r) == 2:
            print(f"| {r[0]} | {r[1]} | | | | | |")
            continue
        line, first, t_nj, gbs, t_e, _, err, _ = r
        print(f"| {line} | {first:.1f} | {t_nj:.1f} | {gbs:.0f} | {t_e:.1f} | {t_e / t_nj:.2f}x | {err:.2g} |")
    sys.stdout.flush()
    # torch.compile: a compile per shape (seconds each), rows printed as they finish so that a step time
    # limit cuts the table, not the report
    if not (hasattr(torch, "compile") and a.device != "cpu"):
        print("\ntorch.compile: not available here")
        return
    print("\n| problem | torch.compile (us) | normjit (us) | compile/normjit |")
    print("|---|---|---|---|")
    for r in rows:
        if len(r) == 2:
            continue
        if time.monotonic() > t_end - 12:
            print(f"| {r[0]} | skipped (budget) | {r[2]:.1f} | |")
            continue
        x, tf, w, b = r[-1]
        torch._dynamo.reset()  # one graph per shape, below dynamo's recompile limit
        try:
            cf = torch.compile(tf, dynamic=False)
            t_c = time_us(lambda: cf(x, w, b), a.device)
            print(f"| {r[0]} | {t_c:.1f} | {r[2]:.1f} | {t_c / r[2]:.2f}x |")
        except Exception as e:  # a compile failure is a row's note, not the end of the table
            print(f"| {r[0]} | failed: {type(e).__name__} | {r[2]:.1f} | |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
