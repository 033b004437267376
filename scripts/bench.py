#!/usr/bin/env python3
"""Generate benchmark checkpoints and time tensorplay, `cat` and the Python way side by side.

Run through scripts/bench.sh. Every command runs in a fresh process; wall time is the median
of several runs with the file already in the page cache (a `cat` first warms it); peak RSS
is GNU time's maximum resident set size of that command.
"""

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time

PY_METADATA = r"""
import sys, torch
path = sys.argv[1]
if path.endswith(".safetensors"):
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        for name in f.keys():
            s = f.get_slice(name)
            s.get_shape(); s.get_dtype()
else:
    sd = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
    storages, devices = {}, set()
    for name, t in sd.items():
        st = t.untyped_storage()
        storages.setdefault(st.data_ptr(), []).append(name)
        devices.add(t.device.type)
        t.is_contiguous(); t.requires_grad
"""

PY_DEEP = r"""
import sys, torch
path = sys.argv[1]
bad = 0
if path.endswith(".safetensors"):
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            if t.is_floating_point() and not torch.isfinite(t).all():
                bad += 1
else:
    sd = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
    storages, devices = {}, set()
    for name, t in sd.items():
        storages.setdefault(t.untyped_storage().data_ptr(), []).append(name)
        devices.add(t.device.type)
        if t.is_floating_point() and not torch.isfinite(t).all():
            bad += 1
print(bad)
"""


def transformer_shapes(target_bytes, hidden=2048, mlp=5632, vocab=32000):
    """Llama-shaped bf16 tensors until the total reaches target_bytes."""
    shapes = [("model.embed_tokens.weight", (vocab, hidden))]
    layer = 0
    total = vocab * hidden * 2
    while total < target_bytes:
        p = f"model.layers.{layer}."
        for name, shape in [
            ("self_attn.q_proj.weight", (hidden, hidden)),
            ("self_attn.k_proj.weight", (hidden, hidden)),
            ("self_attn.v_proj.weight", (hidden, hidden)),
            ("self_attn.o_proj.weight", (hidden, hidden)),
            ("mlp.gate_proj.weight", (mlp, hidden)),
            ("mlp.up_proj.weight", (mlp, hidden)),
            ("mlp.down_proj.weight", (hidden, mlp)),
            ("input_layernorm.weight", (hidden,)),
            ("post_attention_layernorm.weight", (hidden,)),
        ]:
            n = 1
            for d in shape:
                n *= d
            if total + 2 * n > target_bytes:
                return shapes
            shapes.append((p + name, shape))
            total += 2 * n
        layer += 1
    return shapes


def generate(workdir):
    import torch
    from safetensors.torch import save_file

    os.makedirs(workdir, exist_ok=True)
    files = {}
    torch.manual_seed(0)
    big = {name: torch.randn(shape, dtype=torch.float32).to(torch.bfloat16) for name, shape in transformer_shapes(1 << 30)}
    files["1 GiB bf16, safetensors"] = os.path.join(workdir, "big.safetensors")
    files["1 GiB bf16, PyTorch zip"] = os.path.join(workdir, "big.pt")
    many = {f"blocks.{i}.weight": torch.randn(64) for i in range(20000)}
    files["20 000 tensors, safetensors"] = os.path.join(workdir, "many.safetensors")
    files["20 000 tensors, PyTorch zip"] = os.path.join(workdir, "many.pt")
    for label, path in files.items():
        if os.path.exists(path):
            continue
        data = big if label.startswith("1 GiB") else many
        if path.endswith(".safetensors"):
            save_file(data, path)
        else:
            torch.save(data, path)
    return files


def measure(cmd, runs):
    """Median wall time and peak RSS (MiB) of `cmd`, measured by GNU time around it so the
    numbers are the command's own, not inherited from this (large) Python process."""
    times, rss = [], []
    rss_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tensorplay-bench-rss-{os.getpid()}")
    if isinstance(cmd, str):
        cmd = ["sh", "-c", cmd]
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{cmd} exited {done.returncode}")
        with open(rss_file) as f:
            rss.append(int(f.read().split()[-1]) / 1024)  # KiB -> MiB
    os.remove(rss_file)
    return statistics.median(times), max(rss)


SCALE_ST = [1_000, 10_000, 100_000, 1_000_000]
SCALE_PT = [1_000, 10_000, 20_000, 100_000]

PY_ST_LIST = r"""
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], framework="numpy") as f:
    for name in f.keys():
        s = f.get_slice(name)
        s.get_shape(); s.get_dtype()
"""

PY_TORCH_LOAD = r"""
import sys, torch
sd = torch.load(sys.argv[1], mmap=True, weights_only=True, map_location="cpu")
for name, t in sd.items():
    t.untyped_storage().data_ptr(); t.device; t.dtype; t.shape
"""


def write_many_safetensors(path, n):
    """n one-element float32 tensors, written directly (the header is JSON; no torch needed)."""
    import struct
    parts = ['{"__metadata__":{"format":"pt"}']
    for i in range(n):
        parts.append(f',"blocks.{i}.weight":{{"dtype":"F32","shape":[1],"data_offsets":[{4 * i},{4 * i + 4}]}}')
    parts.append("}")
    header = "".join(parts).encode()
    header += b" " * (-len(header) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        f.write(b"\0" * (4 * n))
    os.replace(path + ".tmp", path)


def write_many_torch(path, n):
    """n one-element float32 tensors, one storage each, by torch.save (a child process)."""
    code = ("import sys, torch; n = int(sys.argv[2]); "
            "torch.save({f'blocks.{i}.weight': torch.zeros(1) for i in range(n)}, sys.argv[1] + '.tmp')")
    subprocess.run([sys.executable, "-c", code, path, str(n)], check=True)
    os.replace(path + ".tmp", path)


def scale(args):
    """Per-tensor cost: tensorplay --metadata-only against the Python tools, 1k to 1M tensors;
    replaces the "Per-tensor cost: scaling" section of --out, leaving the rest intact."""
    tp = os.path.abspath(args.tensorplay)
    os.makedirs(args.workdir, exist_ok=True)
    files = []
    for n in SCALE_ST:
        path = os.path.join(args.workdir, f"scale-{n}.safetensors")
        if not os.path.exists(path):
            write_many_safetensors(path, n)
        files.append(("safetensors", n, path))
    for n in SCALE_PT:
        path = os.path.join(args.workdir, f"scale-{n}.pt")
        if not os.path.exists(path):
            write_many_torch(path, n)
        files.append(("PyTorch zip", n, path))
    picklescan = args.picklescan if args.picklescan and os.path.exists(args.picklescan) else None
    rows = []
    for kind, n, path in files:
        subprocess.run(f"cat {path} > /dev/null", shell=True, check=True)
        r = {"kind": kind, "n": n}
        # The budget is raised so the largest file is audited rather than refused (TP502):
        # under the default 1 GiB a million tensors do not fit beside the crate's reading.
        r["tp"] = measure([tp, "audit", "--ci-mode", "--fail-on", "never", "--metadata-only",
                           "--max-memory", "4GiB", path], args.runs)
        if kind == "safetensors":
            r["py"] = measure([sys.executable, "-c", PY_ST_LIST, path], args.runs)
        else:
            r["py"] = measure([sys.executable, "-c", PY_TORCH_LOAD, path], args.runs)
            if picklescan:
                r["ps"] = measure([picklescan, "-p", path], args.runs)
        rows.append(r)
        print(kind, n, {k: v for k, v in r.items() if k not in ("kind", "n")}, flush=True)

    def us(t, n):
        return f"{t / n * 1e6:.2f} µs"

    out = ["## Per-tensor cost: scaling\n\n",
           f"Produced by `scripts/bench.sh --scale` on {datetime.date.today().isoformat()} "
           f"({os.cpu_count()} cores, shared with other jobs: wall times vary run to run). Files of one-element "
           "`float32` tensors, one storage each; every command in a fresh process, median of "
           f"{args.runs} runs with the file in the page cache; peak RSS is GNU time's maximum of those runs. "
           "tensorplay runs `audit --metadata-only --ci-mode --max-memory 4GiB`; the `safetensors` package lists every tensor's "
           "shape and dtype through `safe_open`; PyTorch runs `torch.load(mmap=True, weights_only=True)` "
           "and touches each tensor's storage, device, dtype and shape; picklescan (pinned in "
           "`scripts/requirements-bench.txt`) scans the file.\n\n",
           "| file | tensors | tensorplay | per tensor | peak RSS | Python peer | peer / tensorplay | picklescan |\n",
           "|---|---|---|---|---|---|---|---|\n"]
    for r in rows:
        t, rss = r["tp"]
        py = r["py"][0]
        ps = f"{r['ps'][0]:.2f} s" if "ps" in r else "—"
        peer = "safetensors `safe_open`" if r["kind"] == "safetensors" else "`torch.load`"
        out.append(f"| {r['kind']} | {r['n']:,} | {t:.3f} s | {us(t, r['n'])} | {rss:.0f} MiB | "
                   f"{py:.2f} s ({peer}) | {py / t:.1f}× | {ps} |\n".replace(",", " "))
    out.append("\nTargets (issue: per-tensor cost):\n\n")
    def row(kind, n):
        return next((r for r in rows if r["kind"] == kind and r["n"] == n), None)
    checks = []
    r = row("safetensors", 1_000_000)
    if r:
        checks.append(("1 000 000-tensor safetensors ≤ 0.8 s", r["tp"][0] <= 0.8, f"{r['tp'][0]:.2f} s"))
        checks.append(("1 000 000-tensor safetensors ≤ 512 MiB", r["tp"][1] <= 512, f"{r['tp'][1]:.0f} MiB"))
        checks.append(("1 000 000-tensor safetensors ≥ 5× the safetensors package", r["py"][0] / r["tp"][0] >= 5,
                       f"{r['py'][0] / r['tp'][0]:.1f}×"))
    r = row("PyTorch zip", 100_000)
    if r:
        checks.append(("100 000-tensor PyTorch zip ≤ 0.15 s", r["tp"][0] <= 0.15, f"{r['tp'][0]:.2f} s"))
        checks.append(("100 000-tensor PyTorch zip ≤ 128 MiB", r["tp"][1] <= 128, f"{r['tp'][1]:.0f} MiB"))
    r = row("PyTorch zip", 20_000)
    if r:
        checks.append(("20 000-tensor PyTorch zip ≥ 60× `torch.load`", r["py"][0] / r["tp"][0] >= 60,
                       f"{r['py'][0] / r['tp'][0]:.0f}×"))
    st = [r for r in rows if r["kind"] == "safetensors"]
    if len(st) >= 2:
        flat = st[-1]["tp"][0] / st[-1]["n"] <= 2 * st[1]["tp"][0] / st[1]["n"]
        checks.append(("per-tensor wall time 10k → 1M within 2× (no superlinear step)", flat,
                       f"{us(st[1]['tp'][0], st[1]['n'])} → {us(st[-1]['tp'][0], st[-1]['n'])}"))
    for what, ok, got in checks:
        out.append(f"- {what}: {got}, {'met' if ok else 'not met'}\n")
    section = "".join(out)
    text = open(args.out).read() if os.path.exists(args.out) else "# Benchmarks\n"
    head = "## Per-tensor cost: scaling\n"
    if head in text:
        before, rest = text.split(head, 1)
        nxt = rest.find("\n## ")
        after = rest[nxt + 1:] if nxt >= 0 else ""
        text = before + section + ("\n" + after if after else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(args.out, "w") as f:
        f.write(text)
    print(section)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--generate-only":
        for label, path in generate(sys.argv[2]).items():
            print(f"{label}\t{path}")
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensorplay", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scale", action="store_true", help="only the per-tensor scaling table")
    ap.add_argument("--picklescan", help="picklescan executable for the scaling table")
    ap.add_argument("--mapped-sum", help="the mapped_sum example, the deep scan's yardstick")
    args = ap.parse_args()
    if args.scale:
        scale(args)
        return
    tp = os.path.abspath(args.tensorplay)
    # Generate in a child process so this one stays small.
    gen = subprocess.run([sys.executable, __file__, "--generate-only", args.workdir], check=True, capture_output=True, text=True)
    files = dict(line.split("\t") for line in gen.stdout.strip().splitlines())
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    have_torch = probe.returncode == 0
    torch_version = probe.stdout.strip() if have_torch else "not installed"

    rows = []
    for label, path in files.items():
        size = os.path.getsize(path)
        subprocess.run(f"cat {path} > /dev/null", shell=True, check=True)  # warm the page cache
        r = {"label": label, "size": size}
        r["cat"] = measure(f"cat {path} > /dev/null", args.runs)
        r["tp_meta"] = measure([tp, "audit", "--ci-mode", "--fail-on", "never", "--metadata-only", path], args.runs)
        r["tp_deep"] = measure([tp, "audit", "--ci-mode", "--fail-on", "never", path], args.runs)
        if args.mapped_sum:
            r["sum"] = measure([args.mapped_sum, path], args.runs)
        if have_torch:
            r["py_meta"] = measure([sys.executable, "-c", PY_METADATA, path], args.runs)
            r["py_deep"] = measure([sys.executable, "-c", PY_DEEP, path], args.runs)
        rows.append(r)
        print(label, {k: v for k, v in r.items() if k not in ("label",)}, flush=True)

    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    out = []
    out.append("# Benchmarks\n")
    out.append("Produced by `scripts/bench.sh` (generates the checkpoints, builds tensorplay in release mode, "
               "runs every command in a fresh process; times are medians of "
               f"{args.runs} runs with the file in the page cache; peak RSS is GNU time's maximum resident set size of that command).\n")
    out.append(f"- date: {datetime.date.today().isoformat()}\n- machine: {os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB RAM, "
               f"{platform.system()} {platform.release()}\n- Python way: torch {torch_version} "
               "(`torch.load(mmap=True, weights_only=True)` or `safe_open`, a loop over tensors, storages and devices, plus "
               "`torch.isfinite(t).all()` for the deep check)\n")
    out.append("- two-thread sum: `crates/engine/examples/mapped_sum.rs`, the file mapped as tensorplay maps it "
               "and every byte read once by two threads summing 64-bit words (the memory-bandwidth yardstick)\n")
    out.append("\n| checkpoint | size | `cat` | two-thread sum | tensorplay metadata | tensorplay deep | Python metadata | Python deep | metadata speed-up | deep / `cat` | deep / sum | deep peak RSS |\n")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        cat_t = r["cat"][0]
        meta_t, meta_rss = r["tp_meta"]
        deep_t, deep_rss = r["tp_deep"]
        py_meta = r.get("py_meta", (float("nan"), 0))[0]
        py_deep = r.get("py_deep", (float("nan"), 0))[0]
        sum_t = r.get("sum", (float("nan"), 0))[0]
        out.append(f"| {r['label']} | {r['size'] / (1 << 20):.0f} MiB | {cat_t:.3f} s | {sum_t:.3f} s | {meta_t:.3f} s | {deep_t:.3f} s | "
                   f"{py_meta:.2f} s | {py_deep:.2f} s | {py_meta / meta_t:.0f}× | {deep_t / cat_t:.2f}× | {deep_t / sum_t:.2f}× | {deep_rss:.0f} MiB |\n")
    out.append("\n## Targets\n\n")
    for r in rows:
        big = r["label"].startswith("1 GiB")
        if "py_meta" in r:
            want = 50 if big else 30
            got = r["py_meta"][0] / r["tp_meta"][0]
            out.append(f"- {r['label']}: metadata audit ≥ {want}× faster than Python: {got:.0f}×, "
                       f"{'met' if got >= want else 'not met'}\n")
        if big:
            ratio = r["tp_deep"][0] / r["cat"][0]
            out.append(f"- {r['label']}: deep audit ≤ 2× `cat`: {ratio:.2f}×, {'met' if ratio <= 2 else 'not met'}\n")
            if "sum" in r:
                ratio = r["tp_deep"][0] / r["sum"][0]
                out.append(f"- {r['label']}: deep audit ≤ 1.1× a two-thread sum over the mapped file: {ratio:.2f}×, "
                           f"{'met' if ratio <= 1.1 else 'not met'}\n")
            rss = r["tp_deep"][1]
            out.append(f"- {r['label']}: deep audit peak RSS ≤ 256 MiB: {rss:.0f} MiB, {'met' if rss <= 256 else 'not met'}\n")
    many = [r for r in rows if not r["label"].startswith("1 GiB")]
    if many:
        per_tensor = ", ".join(f"{r['tp_meta'][0] / 20000 * 1e6:.1f} µs ({r['label'].split(', ')[1]})" for r in many)
        out.append("\n## What limits it\n\n"
                   "- On the 1 GiB files the metadata audit reads the header or pickle and nothing else, so it costs the same "
                   "for 1 GiB as for 1 GiB × 100; the deep audit reads every byte once, two threads scanning 8 MiB chunks, "
                   "and releases scanned pages, so its resident memory is the program plus a few chunks.\n"
                   f"- On 20 000 tiny tensors every cost is per tensor: {per_tensor} each, for parsing its header entry or "
                   "pickle calls, building its four layers, running every rule and placing it in the simulated caching "
                   "allocator; for safetensors the longest steps are the header's entries, read by tensorplay and again by the "
                   "safetensors crate (both on every core), and for PyTorch files the pickle machine. The Python way spends most of its time importing torch (a fixed ~2 s), so the ratio there "
                   "measures tensorplay's per-tensor work against that import. The deep audit of tiny tensors is "
                   "likewise per-tensor work, not bandwidth, which is why its ratio to `cat` (which reads 6–10 MiB "
                   "in a few milliseconds) is large and not a target.\n")
    # Sections other runs wrote (the per-tensor scaling table, others' notes) are kept.
    kept = ""
    if os.path.exists(args.out):
        own = ("## Targets", "## What limits it")
        text = open(args.out).read()
        starts = [i for i in range(len(text)) if text.startswith("\n## ", i) and not text.startswith(own, i + 1)]
        if starts:
            kept = text[starts[0]:]
    with open(args.out, "w") as f:
        f.write("".join(out) + kept)
    print("".join(out))


if __name__ == "__main__":
    main()
