"""``fragmentation(loader_or_batches)``: TP301's fragmentation score and the simulated CUDA
caching allocator's load, batch by batch, over batches drawn from a data loader.

Each batch is audited as a live object by the command's own code (the four layers built from
its tensors, TP301 and TP302 run, values not read): the score is TP301's (variance / mean² of
the batch's storage sizes), the threshold the one TP301 applies (``thresholds
.fragmentation_score`` of the configuration, default 5), and the bytes are what the simulated
allocator requested, allocated and reserved to load the batch's storages. Nothing is
re-computed here; this module only collects the per-batch numbers and draws them.
"""

import html
import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import List, Optional

from ._live import _strided, _torch, audit_named, tensors_in
from ._errors import ReadError

BATCH = "a torch.Tensor, a mapping of tensors, or a list/tuple of tensors or mappings"
ACCEPTED = (
    "an iterable of batches (a torch DataLoader, a list, a generator); a batch is " + BATCH
)

# What a caller may pass through to the audit of each batch. The rest of `audit`'s options
# judge findings (select, ignore, fail_on, baseline, expect) or read values (metadata_only),
# and this report has neither: the score and the allocator's load are computed regardless.
OPTIONS = ("config", "gpu_budget")

# How many batches above the threshold the summary names before it counts the rest.
_NAMED = 10


@dataclass
class FragmentationSample:
    """One batch: its index in the order the loader gave it, TP301's score (``None`` below
    two storages, or when every storage is empty), whether that score is above the threshold,
    its storage count and that of its tensors with a storage (sparse ones have none), and the
    simulated allocator's load of its storages (requested, allocated and reserved bytes,
    segments, and ``fragmentation``: the share of reserved bytes not allocated)."""

    index: int
    score: Optional[float]
    above_threshold: bool
    storages: int
    tensors: int
    requested_bytes: int
    allocated_bytes: int
    reserved_bytes: int
    segments: int
    fragmentation: float
    #: Whether the batch fits ``gpu_budget``; ``None`` without one.
    fits_budget: Optional[bool] = None


class FragmentationReport:
    """The fragmentation score over sampled batches: ``samples`` (one ``FragmentationSample``
    per batch, in order), ``threshold`` (TP301's), ``passed`` (no batch's score above the
    threshold: TP301 fires above it, not at it), ``above_threshold`` (those batches),
    ``worst`` (the batch of the highest score), ``mean_score``, ``data`` / ``to_json()``,
    ``to_html()`` / ``write_html(path)`` (the time series as a standalone page), and
    ``str()``: a short summary."""

    def __init__(self, samples, threshold):
        self.samples: List[FragmentationSample] = list(samples)
        self.threshold: float = threshold

    @property
    def scored(self):
        """The samples that have a score."""
        return [s for s in self.samples if s.score is not None]

    @property
    def above_threshold(self):
        return [s for s in self.samples if s.above_threshold]

    @property
    def passed(self):
        return not self.above_threshold

    @property
    def worst(self):
        """The sample of the highest score (the first of equals), or ``None`` when no batch
        has one."""
        scored = self.scored
        return max(scored, key=lambda s: s.score) if scored else None

    @property
    def mean_score(self):
        """The mean of the batches' scores, those without one left out (``None`` if none)."""
        scores = [s.score for s in self.scored]
        return sum(scores) / len(scores) if scores else None

    @property
    def data(self):
        worst = self.worst
        return {
            "batches": len(self.samples),
            "threshold": self.threshold,
            "passed": self.passed,
            "mean_score": self.mean_score,
            "worst": None if worst is None else worst.index,
            "above_threshold": [s.index for s in self.above_threshold],
            "samples": [asdict(s) for s in self.samples],
        }

    def to_json(self):
        return json.dumps(self.data, indent=2)

    def __str__(self):
        n = len(self.samples)
        head = f"fragmentation over {n} batch{'es' if n != 1 else ''}"
        worst, mean = self.worst, self.mean_score
        if worst is None:
            scores = "no batch has two storages to score"
        else:
            scores = (
                f"mean score {mean:.2f}, worst {worst.score:.2f} (batch {worst.index}), "
                f"threshold {_number(self.threshold)}"
            )
        if self.passed:
            return f"{head}: passed; {scores}"
        above = self.above_threshold
        named = ", ".join(f"batch {s.index} ({s.score:.2f})" for s in above[:_NAMED])
        if len(above) > _NAMED:
            named += f" and {len(above) - _NAMED} more"
        count = f"{len(above)} batch{'es' if len(above) != 1 else ''}"
        return f"{head}: FAILED, {count} above the threshold: {named}; {scores}"

    def __repr__(self):
        return f"<FragmentationReport {self}>"

    def _repr_html_(self):
        return f"<div>{self._body(table=False)}</div>"

    def to_html(self):
        """The standalone page ``write_html`` writes: inline CSS and SVG, no script, nothing
        fetched."""
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"/>'
            '<meta name="viewport" content="width=device-width,initial-scale=1"/>'
            f"<title>tensorplay fragmentation report</title><style>{_STYLE}</style></head>"
            f"<body><h1>tensorplay fragmentation report</h1>{self._body(table=True)}"
            "</body></html>\n"
        )

    def write_html(self, path):
        """Writes ``to_html()`` to ``path`` whole or not at all, as the command writes its
        reports."""
        from . import _tensorplay

        _tensorplay.write_text(os.fspath(path), self.to_html())

    def _judged(self):
        """What the verdict judges, and what the bytes beside it are: a page showing 95 %
        reserved-but-unallocated next to "passed" must say why that is not the verdict."""
        text = (
            f"The verdict is TP301's alone: a batch fails when the variance / mean² of its "
            f"storage sizes is above {_number(self.threshold)}. The bytes are the simulated "
            "CUDA caching allocator's, shown and not judged: requested is the storages' sizes, "
            "allocated those rounded to the allocator's blocks, reserved the segments holding "
            "them; reserved but unallocated is the share of reserved bytes no storage holds."
        )
        small = [s for s in self.samples if _small_pool_only(s)]
        if small:
            text += (
                f" In {len(small)} of {len(self.samples)} batches every segment is a 2 MiB "
                "small-pool segment: the allocator serves requests of 1 MiB or less from "
                "2 MiB segments, so a small batch leaves most of each unallocated. That is "
                "its rounding, not fragmentation."
            )
        return text

    def _body(self, table):
        verdict = "pass" if self.passed else "fail"
        parts = [
            f'<p class="verdict {verdict}" id="verdict">{_text(str(self))}</p>',
            f'<p class="note" id="judged">{_text(self._judged())}</p>',
            '<section id="score"><h2>Fragmentation score per batch (TP301)</h2>',
            _score_chart(self.samples, self.threshold),
            "</section>",
            '<section id="memory"><h2>Reserved and allocated bytes per batch '
            "(simulated CUDA caching allocator)</h2>",
            _bytes_chart(self.samples),
            "</section>",
        ]
        if table:
            parts.append(_table(self.samples))
        return "".join(parts)


def fragmentation(loader_or_batches, batches=100, **options):
    """TP301's fragmentation score of each of the first ``batches`` batches (default 100)
    that ``loader_or_batches`` gives (a torch DataLoader, a list, a generator), and the
    simulated caching allocator's load of each, as a ``FragmentationReport``; the loader is
    never drawn past them, and no batch is kept once audited.

    A batch is a tensor, a mapping of tensors, or a list/tuple of tensors or mappings: an
    ``(x, y)`` pair's tensors are named ``0`` and ``1``, nested ones ``0.key``; values holding
    no tensor are left out. Options: ``config`` (its ``thresholds.fragmentation_score`` is the
    threshold) and ``gpu_budget`` (each sample then says whether the batch fits it).
    Raises TypeError for an argument of the wrong kind (a loader that is not iterable, a batch
    holding no tensor), ValueError when ``batches`` is not positive or the loader gives no
    batch."""
    if isinstance(batches, bool) or not isinstance(batches, int):
        raise TypeError(f"fragmentation(): batches={batches!r}: expected a positive int")
    if batches <= 0:
        raise ValueError(f"fragmentation(): batches={batches!r}: expected a positive int")
    # Checked before the loader is touched: a bad option costs no worker start, no loading.
    from . import _tensorplay

    unexpected = sorted(set(options) - set(OPTIONS))
    if unexpected:
        raise TypeError(
            f"fragmentation() got an unexpected keyword argument {unexpected[0]!r}; "
            f"it accepts {', '.join(OPTIONS)}"
        )
    checked = _tensorplay.options(
        "fragmentation",
        "live",
        {**options, "select": ["TP301", "TP302"], "metadata_only": True},
    )
    torch = _torch()
    kind = type(loader_or_batches).__name__
    if (torch is not None and isinstance(loader_or_batches, torch.Tensor)) or isinstance(
        loader_or_batches, Mapping
    ):
        # Iterable, but one batch, not batches: a tensor would give its rows, a dict its keys.
        raise TypeError(
            f"fragmentation() takes {ACCEPTED}, not {kind} (pass [batch] for one batch)"
        )
    if isinstance(loader_or_batches, (str, bytes)):
        raise TypeError(f"fragmentation() takes {ACCEPTED}, not {kind}")
    try:
        iterator = iter(loader_or_batches)
    except TypeError:
        raise TypeError(f"fragmentation() takes {ACCEPTED}, not {kind}") from None
    samples = []
    threshold = None
    for index, batch in enumerate(iterator):
        named = _batch_tensors(torch, batch, index)
        label = f"batch {index}"
        report = audit_named(named, label, checked)
        sample, threshold = _sample(index, report, len(_strided(named)))
        samples.append(sample)
        del batch, named, report
        # Stop without drawing another: a loader's next batch may cost a disk read.
        if index + 1 == batches:
            break
    if not samples:
        raise ValueError("fragmentation(): the loader gave no batch")
    return FragmentationReport(samples, threshold)


def _batch_tensors(torch, batch, index):
    """``(name, tensor)`` for every tensor of one batch; TypeError when it is none of the
    accepted kinds or holds no tensor."""
    if torch is None or not isinstance(batch, (torch.Tensor, Mapping, list, tuple)):
        missing = " (torch is not installed)" if torch is None else ""
        raise TypeError(
            f"fragmentation(): batch {index} is of type {type(batch).__name__}; a batch is "
            f"{BATCH}{missing}"
        )
    named = []
    tensors_in(torch, batch, "", named)
    if not named:
        raise TypeError(
            f"fragmentation(): batch {index} ({type(batch).__name__}) holds no tensor; "
            f"a batch is {BATCH}"
        )
    return named


# The caching allocator's small-pool segment (`kSmallBuffer`), which serves every request of
# 1 MiB or less (`kSmallSize`).
_SMALL_SEGMENT = 2 << 20


def _small_pool_only(sample):
    """Whether every segment of the batch's load is a small-pool segment."""
    return sample.segments > 0 and sample.reserved_bytes == sample.segments * _SMALL_SEGMENT


def _sample(index, native, tensors):
    """One batch's sample from the extension's report of it, and TP301's threshold."""
    (layout,) = native.layouts
    file = native.data["files"][0]
    memory = file.get("memory")
    if layout is None or memory is None:
        # The audit refused the batch (a configuration's max_memory, say): nothing to place.
        messages = "; ".join(f["message"] for f in file.get("findings", []))
        raise ReadError(f"batch {index} could not be judged: {messages}")
    score = layout["fragmentation_score"]
    threshold = layout["fragmentation_threshold"]
    sample = FragmentationSample(
        index=index,
        score=score,
        # TP301's comparison: it fires above the threshold, not at it.
        above_threshold=score is not None and score > threshold,
        storages=file["storages"],
        tensors=tensors,
        requested_bytes=memory["requested_bytes"],
        allocated_bytes=memory["allocated_bytes"],
        reserved_bytes=memory["reserved_bytes"],
        segments=memory["segments"],
        fragmentation=memory["fragmentation"],
        fits_budget=memory.get("fits_budget"),
    )
    return sample, threshold


# The page: inline CSS and SVG only, so it opens offline and from a CI artifact.
_STYLE = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;"
    "color:#1d2330;padding:0 16px}"
    "h1{font-size:22px;margin:0 0 12px}"
    "h2{font-size:17px;margin:24px 0 8px;border-bottom:1px solid #dde}"
    ".verdict{padding:10px 14px;border-radius:6px;font-weight:600}"
    ".pass{background:#e3f6e8;color:#135c2a}.fail{background:#fde6e6;color:#8a1111}"
    "table{border-collapse:collapse;width:100%;font-size:13px}"
    "th,td{text-align:right;padding:3px 6px;border-bottom:1px solid #e4e6ee}"
    "tr.over td{color:#b00020;font-weight:600}"
    "svg{display:block;max-width:100%;height:auto}"
)

_WIDTH, _HEIGHT = 760.0, 270.0
# The right margin holds the threshold's label and the legend, clear of the lines.
_LEFT, _RIGHT, _TOP, _BOTTOM = 78.0, 92.0, 16.0, 46.0
_FONT = 'font-family="system-ui,sans-serif" font-size="11"'
_TEXT = f'{_FONT} fill="#5a6275"'
_BLUE, _ORANGE, _RED = "#4a78c2", "#d9822b", "#b00020"


def _text(value):
    return html.escape(str(value), quote=True)


def _number(value):
    return f"{value:g}"


def _bytes(n):
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    step = 0
    while abs(n) >= 1024 and step < len(units) - 1:
        n /= 1024
        step += 1
    return f"{n:.0f} B" if step == 0 else f"{n:.1f} {units[step]}"


def _x(i, count):
    width = _WIDTH - _LEFT - _RIGHT
    # One batch sits in the middle; more spread from the left axis to the right edge.
    return _LEFT + (width / 2 if count == 1 else width * i / (count - 1))


def _y(value, top):
    return _TOP + (_HEIGHT - _TOP - _BOTTOM) * (1 - value / top)


def _frame(label, y_title, top, format_value, count):
    """The svg's opening, both axes with their titles, y ticks at 0, half and the top, and x
    ticks at no more than about ten batch indices."""
    base = _HEIGHT - _BOTTOM
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {_WIDTH:.0f} '
        f'{_HEIGHT:.0f}" width="{_WIDTH:.0f}" height="{_HEIGHT:.0f}" role="img" '
        f'aria-label="{_text(label)}">',
        f'<line class="axis" x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{base}" y2="{base}" '
        'stroke="#99a"/>',
        f'<line class="axis" x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{base}" stroke="#99a"/>',
    ]
    for share in (0.0, 0.5, 1.0):
        y = _y(top * share, top)
        parts.append(
            f'<text class="tick" x="{_LEFT - 5}" y="{y + 4:.1f}" text-anchor="end" {_TEXT}>'
            f"{_text(format_value(top * share))}</text>"
        )
    step = max(1, math.ceil(count / 10))
    for i in range(0, count, step):
        parts.append(
            f'<text class="tick" x="{_x(i, count):.1f}" y="{base + 15}" text-anchor="middle" '
            f"{_TEXT}>{i}</text>"
        )
    middle = _TOP + (base - _TOP) / 2
    parts.append(
        f'<text class="axistitle" x="14" y="{middle:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {middle:.1f})" {_TEXT}>{_text(y_title)}</text>'
        f'<text class="axistitle" x="{_LEFT + (_WIDTH - _LEFT - _RIGHT) / 2:.1f}" '
        f'y="{_HEIGHT - 6}" text-anchor="middle" {_TEXT}>batch</text>'
    )
    return parts


def _top(values):
    top = max(values, default=0.0)
    return top * 1.1 if top > 0 else 1.0


def _score_chart(samples, threshold):
    """The score per batch as a line, a gap where a batch has no score, the threshold as a
    dashed line; a point per scored batch, red above the threshold."""
    count = len(samples)
    scores = [s.score for s in samples if s.score is not None]
    top = _top([*scores, threshold])
    parts = _frame("fragmentation score per batch", "variance / mean²", top, _score, count)
    ty = _y(threshold, top)
    parts.append(
        f'<line class="threshold" x1="{_LEFT}" x2="{_WIDTH - _RIGHT}" y1="{ty:.1f}" '
        f'y2="{ty:.1f}" stroke="{_RED}" stroke-dasharray="5 4"><title>threshold '
        f"{_text(_number(threshold))}</title></line>"
        f'<text class="tick" x="{_WIDTH - _RIGHT + 6}" y="{ty + 4:.1f}" fill="{_RED}" '
        f'{_FONT}>threshold {_text(_number(threshold))}</text>'
    )
    run = []
    for sample in [*samples, None]:
        if sample is not None and sample.score is not None:
            run.append(f"{_x(sample.index, count):.1f},{_y(sample.score, top):.1f}")
            continue
        if run:
            parts.append(
                f'<polyline class="line" points="{" ".join(run)}" fill="none" '
                f'stroke="{_BLUE}" stroke-width="2"/>'
            )
            run = []
    for sample in samples:
        if sample.score is None:
            continue
        colour = _RED if sample.above_threshold else _BLUE
        parts.append(
            f'<circle class="point" cx="{_x(sample.index, count):.1f}" '
            f'cy="{_y(sample.score, top):.1f}" r="3" fill="{colour}"><title>batch '
            f"{sample.index}: {_text(_score(sample.score))}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _score(value):
    return f"{value:.2f}"


def _bytes_chart(samples):
    """Reserved and allocated bytes per batch, one line each, with a legend."""
    count = len(samples)
    top = _top([s.reserved_bytes for s in samples])
    parts = _frame("reserved and allocated bytes per batch", "bytes", top, _bytes, count)
    for key, colour, title in (
        ("reserved_bytes", _ORANGE, "reserved"),
        ("allocated_bytes", _BLUE, "allocated"),
    ):
        points = " ".join(
            f"{_x(s.index, count):.1f},{_y(getattr(s, key), top):.1f}" for s in samples
        )
        parts.append(
            f'<polyline class="{title}" points="{points}" fill="none" stroke="{colour}" '
            f'stroke-width="2"><title>{title} bytes</title></polyline>'
        )
    for row, (colour, title) in enumerate(((_ORANGE, "reserved"), (_BLUE, "allocated"))):
        y = _TOP + 8 + 15 * row
        x = _WIDTH - _RIGHT + 8
        parts.append(
            f'<line x1="{x}" x2="{x + 18}" y1="{y}" y2="{y}" stroke="{colour}" '
            f'stroke-width="2"/><text class="legend" x="{x + 24}" y="{y + 4}" {_TEXT}>'
            f"{title}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(samples):
    head = (
        "<tr><th>batch</th><th>storages</th><th>tensors</th><th>score</th>"
        "<th>requested</th><th>allocated</th><th>reserved</th><th>segments</th>"
        "<th>reserved, not allocated</th></tr>"
    )
    rows = []
    for s in samples:
        cells = (
            s.index,
            s.storages,
            s.tensors,
            "none" if s.score is None else _score(s.score),
            _bytes(s.requested_bytes),
            _bytes(s.allocated_bytes),
            _bytes(s.reserved_bytes),
            s.segments,
            f"{s.fragmentation * 100:.1f}%",
        )
        over = ' class="over"' if s.above_threshold else ""
        rows.append(
            f"<tr{over}>" + "".join(f"<td>{_text(c)}</td>" for c in cells) + "</tr>"
        )
    return (
        '<section id="batches"><h2>Batches</h2><table><thead>'
        f"{head}</thead><tbody>{''.join(rows)}</tbody></table></section>"
    )
