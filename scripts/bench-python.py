"""Measures the live audit (`tensorplay.audit`) from Python: a 100 000-tensor state dict's
metadata (`metadata_only=True`), and the whole audit of a 500-tensor model (values read in
place), each the best of --repeat runs, with where the time goes (describing the tensors in
Python, the extension's audit). Run it with the installed wheel and torch in one environment;
prints Markdown rows for BENCHMARKS.md.

    python scripts/bench-python.py [--tensors 100000] [--repeat 5]
"""

import argparse
import time

import tensorplay
import torch
from tensorplay import _live


def best(repeat, work):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def state_dict(n):
    """n small tensors over n storages, named as a decoder's layers name them."""
    return {f"model.layers.{i // 8}.mlp.proj_{i % 8}.weight": torch.zeros(4) for i in range(n)}


def model(layers):
    """A model of 2 × layers tensors (weight and bias per Linear)."""
    return torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(layers)))


def breakdown(obj, repeat, options):
    named = _live.named_tensors(obj, "audit")

    def describe():
        with _live._bulk():  # as the audit does it
            _live._rows(_live._strided(named))

    described = best(repeat, describe)
    whole = best(repeat, lambda: tensorplay.audit(obj, **options))
    return whole, described


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensors", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"torch {torch.__version__}")
    print("| input | audit | of which describing the tensors in Python | target |")
    print("|---|---|---|---|")
    sd = state_dict(args.tensors)
    whole, described = breakdown(sd, args.repeat, {"metadata_only": True})
    print(
        f"| {args.tensors} tensors, metadata only | {whole * 1000:.0f} ms "
        f"| {described * 1000:.0f} ms | ≤ 1000 ms |"
    )
    del sd
    net = model(250)
    whole, described = breakdown(net, args.repeat, {})
    print(
        f"| 500-tensor model (250 × Linear(64, 64)), values read | {whole * 1000:.1f} ms "
        f"| {described * 1000:.1f} ms | ≤ 50 ms |"
    )


if __name__ == "__main__":
    main()
