"""fragmentation(): TP301's score and the simulated allocator's load per sampled batch, and the
HTML time series as a browser renders it."""

import json
import os
import re
import shutil
import statistics
import subprocess

import pytest
import tensorplay

torch = pytest.importorskip("torch")


def expected_score(sizes):
    """TP301's score, computed here: population variance / mean² of the storage sizes."""
    return statistics.pvariance(sizes) / statistics.mean(sizes) ** 2


def floats(n):
    """A float32 tensor of n elements: a storage of 4·n bytes."""
    return torch.zeros(n, dtype=torch.float32)


def test_each_batch_scores_variance_over_mean_squared_of_its_storage_sizes():
    shapes = [[10, 1000, 3], [7, 7], [1, 2, 3, 4, 500]]
    batches = [{f"t{i}": floats(n) for i, n in enumerate(shape)} for shape in shapes]
    report = tensorplay.fragmentation(batches)
    assert [s.index for s in report.samples] == [0, 1, 2]
    for sample, shape, batch in zip(report.samples, shapes, batches):
        sizes = [4 * n for n in shape]
        assert sample.score == pytest.approx(expected_score(sizes), rel=1e-12)
        assert sample.storages == sample.tensors == len(shape)
        assert sample.requested_bytes == sum(sizes)
        # The allocator's numbers are the live audit's own, batch by batch.
        memory = tensorplay.audit(batch, metadata_only=True).data["files"][0]["memory"]
        assert sample.allocated_bytes == memory["allocated_bytes"]
        assert sample.reserved_bytes == memory["reserved_bytes"]
        assert sample.segments == memory["segments"]
        assert sample.fragmentation == pytest.approx(
            1 - sample.allocated_bytes / sample.reserved_bytes
        )
    assert report.threshold == 5
    assert report.passed and not report.above_threshold
    assert report.mean_score == pytest.approx(statistics.mean(s.score for s in report.samples))
    assert report.worst.index == max(range(3), key=lambda i: report.samples[i].score)
    assert "passed" in str(report)


def test_a_batch_above_the_threshold_fails():
    small = {"a": floats(100), "b": floats(120)}
    skewed = {"big": floats(100_000), **{f"s{i}": floats(1) for i in range(50)}}
    skewed_score = expected_score([400_000] + [4] * 50)
    assert skewed_score > 5  # the premise: above the default threshold
    report = tensorplay.fragmentation([small, skewed, small])
    assert not report.passed
    assert [s.index for s in report.above_threshold] == [1]
    assert report.worst.index == 1
    assert report.worst.score == pytest.approx(skewed_score)
    text = str(report)
    assert "FAILED" in text and f"batch 1 ({skewed_score:.2f})" in text
    assert "batch 0 (" not in text.split(";")[0]
    assert report.data["above_threshold"] == [1] and report.data["passed"] is False


def test_the_threshold_is_the_configs_and_fires_above_it_not_at_it(tmp_path):
    # Sizes 4 and 12 bytes: mean 8, variance 16, score exactly 0.25.
    batch = (floats(1), floats(3))
    assert expected_score([4, 12]) == 0.25
    at = tmp_path / "at.toml"
    at.write_text("[thresholds]\nfragmentation_score = 0.25\n")
    below = tmp_path / "below.toml"
    below.write_text("[thresholds]\nfragmentation_score = 0.2\n")
    report = tensorplay.fragmentation([batch], config=at)
    assert report.threshold == 0.25 and report.samples[0].score == 0.25
    assert report.passed
    report = tensorplay.fragmentation([batch], config=str(below))
    assert report.threshold == 0.2 and not report.passed


def test_batches_bounds_how_far_the_loader_is_drawn():
    pulled = []

    def loader(limit):
        for i in range(1000):
            if i >= limit:
                raise AssertionError(f"drawn past {limit} batches")
            pulled.append(i)
            yield floats(i + 1), floats(1)

    report = tensorplay.fragmentation(loader(3), batches=3)
    assert len(report.samples) == 3 and pulled == [0, 1, 2]
    pulled.clear()
    report = tensorplay.fragmentation(loader(100))
    assert len(report.samples) == 100 and len(pulled) == 100
    # Fewer batches than asked for: all of them.
    assert len(tensorplay.fragmentation([floats(2)] * 4, batches=10).samples) == 4


def test_a_dataloader_over_a_tensor_dataset():
    from torch.utils.data import DataLoader, TensorDataset

    x = torch.randn(50, 7)
    y = torch.arange(50)  # int64: 8 bytes an element against x's 28 a row
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    report = tensorplay.fragmentation(loader)
    assert len(report.samples) == len(loader) == 7
    for sample, (bx, by) in zip(report.samples, loader):
        sizes = [bx.untyped_storage().nbytes(), by.untyped_storage().nbytes()]
        assert sample.storages == 2
        assert sample.score == pytest.approx(expected_score(sizes))
    # The short last batch asks for fewer bytes than a full one.
    assert report.samples[-1].requested_bytes < report.samples[0].requested_bytes


def test_pairs_and_nested_batches_name_and_place_every_tensor():
    from tensorplay._fragmentation import _batch_tensors

    x, y, mask = floats(12), floats(2), torch.ones(12, dtype=torch.bool)
    named = _batch_tensors(torch, (x, {"y": y, "meta": "text", "mask": mask}), 0)
    assert [name for name, _ in named] == ["0", "1.y", "1.mask"]
    assert _batch_tensors(torch, x, 0) == [("tensor", x)]
    # A tensor given twice is one storage; a view shares its base's.
    report = tensorplay.fragmentation([(x, x[2:], y)])
    sample = report.samples[0]
    assert sample.tensors == 3 and sample.storages == 2
    assert sample.score == pytest.approx(expected_score([48, 8]))


def test_a_gpu_budget_says_whether_each_batch_fits():
    batches = [(floats(10), floats(20))]
    assert tensorplay.fragmentation(batches).samples[0].fits_budget is None
    assert tensorplay.fragmentation(batches, gpu_budget="1GiB").samples[0].fits_budget is True
    assert tensorplay.fragmentation(batches, gpu_budget=64).samples[0].fits_budget is False


def test_bad_arguments_name_what_is_accepted():
    accepted = "an iterable of batches .* a batch is a torch.Tensor, a mapping of tensors"
    with pytest.raises(TypeError, match=f"{accepted}.*not int"):
        tensorplay.fragmentation(42)
    # One batch is not batches: a tensor would be iterated row by row.
    for one in (floats(3), {"x": floats(3)}):
        with pytest.raises(TypeError, match=r"pass \[batch\] for one batch"):
            tensorplay.fragmentation(one)
    with pytest.raises(TypeError, match="batch 1 is of type int"):
        tensorplay.fragmentation([floats(1), 7])
    with pytest.raises(TypeError, match=r"batch 0 \(list\) holds no tensor"):
        tensorplay.fragmentation([[1, 2, "x"]])
    for bad in ("3", 2.0, True, None):
        with pytest.raises(TypeError, match="batches=.*expected a positive int"):
            tensorplay.fragmentation([floats(1)], batches=bad)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="expected a positive int"):
            tensorplay.fragmentation([floats(1)], batches=bad)
    with pytest.raises(TypeError, match="unexpected keyword argument 'select'"):
        tensorplay.fragmentation([floats(1)], select="TP301")

    class Untouched:
        def __iter__(self):
            raise AssertionError("the loader was started")

    # A bad option is refused before the loader starts (workers, files).
    with pytest.raises(TypeError, match="gpu_budget=1.5"):
        tensorplay.fragmentation(Untouched(), gpu_budget=1.5)
    with pytest.raises(TypeError, match=r"config=3: .*expected a path"):
        tensorplay.fragmentation([floats(1)], config=3)
    with pytest.raises(ValueError, match="gave no batch"):
        tensorplay.fragmentation(iter([]))


def test_a_bad_config_is_the_commands_read_error(tmp_path):
    config = tmp_path / "tensorplay.toml"
    config.write_text("[thresholds]\nfragmentation_score = 'high'\n")
    with pytest.raises(tensorplay.ReadError):
        tensorplay.fragmentation([floats(1)], config=config)


def test_a_batch_below_two_storages_has_no_score_and_no_point():
    report = tensorplay.fragmentation([(floats(1), floats(9)), floats(4), (floats(2), floats(2))])
    assert [s.score is None for s in report.samples] == [False, True, False]
    assert report.mean_score == pytest.approx(
        statistics.mean([expected_score([4, 36]), expected_score([8, 8])])
    )
    score_svg = _svgs(report.to_html())[0]
    assert score_svg.count('class="point"') == 2
    # The line breaks at the batch without a score rather than bridging it.
    assert score_svg.count("<polyline") == 2


def _svgs(page):
    return re.findall(r"<svg.*?</svg>", page, flags=re.S)


def _points(svg, cls):
    (points,) = re.findall(rf'<polyline class="{cls}" points="([^"]*)"', svg)
    return [tuple(map(float, p.split(","))) for p in points.split()]


def skewed_batches(n):
    """n batches, their dispersion growing with the index: the later ones above 5."""
    return [
        {"big": floats(1000 * (i + 1)), **{f"s{j}": floats(1) for j in range(4 * i + 1)}}
        for i in range(n)
    ]


def test_the_page_draws_one_point_per_batch_and_the_threshold(tmp_path):
    report = tensorplay.fragmentation(skewed_batches(6))
    assert 0 < len(report.above_threshold) < 6  # both sides of the threshold are drawn
    page_path = tmp_path / "fragmentation_report.html"
    report.write_html(page_path)
    assert os.listdir(tmp_path) == ["fragmentation_report.html"]  # no temporary left
    page = page_path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    score_svg, bytes_svg = _svgs(page)
    assert score_svg.count('class="point"') == 6
    line = _points(score_svg, "line")
    assert len(line) == 6
    # x grows with the batch; a higher score is drawn higher (smaller y).
    assert [x for x, _ in line] == sorted(x for x, _ in line)
    scores = [s.score for s in report.samples]
    for (_, ya), (_, yb), sa, sb in zip(line, line[1:], scores, scores[1:]):
        assert (ya > yb) == (sa < sb)
    # The threshold line sits between the points below it and those above it.
    (threshold_y,) = map(float, re.findall(r'class="threshold"[^>]*y1="([\d.]+)"', score_svg))
    for (_, y), sample in zip(line, report.samples):
        assert (y < threshold_y) == sample.above_threshold
    assert score_svg.count(f'fill="#b00020"><title>batch') == len(report.above_threshold)
    assert "variance / mean²" in score_svg and ">batch</text>" in score_svg
    assert len(_points(bytes_svg, "reserved")) == len(_points(bytes_svg, "allocated")) == 6
    assert ">bytes</text>" in bytes_svg
    # One table row per batch, the ones above the threshold marked.
    assert page.count("<tr") == 7 and page.count('<tr class="over">') == len(report.above_threshold)
    assert "<svg" in report._repr_html_() and "<table" not in report._repr_html_()


def test_the_page_says_what_is_judged_and_when_rounding_explains_the_bytes():
    # Small batches: every storage under 1 MiB, each batch in one 2 MiB small-pool segment,
    # mostly unallocated, and passed: the page says the share is not what is judged.
    report = tensorplay.fragmentation([{"a": floats(10), "b": floats(10)} for _ in range(3)])
    assert report.passed
    assert all(s.fragmentation > 0.9 and s.reserved_bytes == 2 << 20 for s in report.samples)
    page = report.to_html()
    judged = re.search(r'<p class="note" id="judged">(.*?)</p>', page).group(1)
    assert "TP301" in judged and f"above {report.threshold:g}" in judged
    assert "not judged" in judged
    assert "In 3 of 3 batches every segment is a 2 MiB small-pool segment" in judged
    # A batch with a large-pool segment is not said to be rounding.
    big = tensorplay.fragmentation([{"a": floats(1 << 20)}])
    assert "small-pool" not in big.to_html()


def test_the_page_is_written_whole_or_not_at_all(tmp_path):
    report = tensorplay.fragmentation([(floats(1), floats(2))])
    target = tmp_path / "taken"
    target.mkdir()
    with pytest.raises(tensorplay.ReadError):
        report.write_html(target)  # a directory cannot be replaced by the page
    assert os.listdir(tmp_path) == ["taken"] and not os.listdir(target)
    page = tmp_path / "report.html"
    page.write_text("old")
    report.write_html(str(page))
    assert page.read_text(encoding="utf-8") == report.to_html()


def test_data_and_json_carry_every_sample():
    report = tensorplay.fragmentation(skewed_batches(3))
    data = json.loads(report.to_json())
    assert data == report.data
    assert data["batches"] == 3 and len(data["samples"]) == 3
    assert [s["score"] for s in data["samples"]] == [s.score for s in report.samples]
    assert data["worst"] == report.worst.index and data["threshold"] == report.threshold


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def test_the_report_renders_in_chromium(tmp_path):
    browser = _chromium()
    if browser is None:
        message = "no chromium, chromium-browser or google-chrome on PATH"
        if os.environ.get("TENSORPLAY_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"{message}, and TENSORPLAY_REQUIRE_CHROMIUM=1")
        pytest.skip(message)
    batches = 9
    report = tensorplay.fragmentation(skewed_batches(batches))
    page = tmp_path / "fragmentation_report.html"
    report.write_html(page)
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    dom = done.stdout
    # The browser parsed the charts into SVG elements: the score line with a point per batch.
    score_svg, bytes_svg = _svgs(dom)
    assert len(_points(score_svg, "line")) == batches
    assert score_svg.count("<circle") == batches
    assert len(_points(bytes_svg, "reserved")) == batches
    assert f"fragmentation over {batches} batches" in dom
    assert dom.count("<tr") == batches + 1


def test_a_batch_the_audit_refused_is_a_read_error():
    # What the extension gives for a file the audit could not judge (a read failure claimed
    # by a rule): no layout, no memory facts, the finding saying why.
    from tensorplay._fragmentation import _sample

    class Refused:
        layouts = [None]
        finding = {"code": "TP506", "message": "needs more memory than allowed"}
        data = {"files": [{"memory": None, "findings": [finding]}]}

    with pytest.raises(tensorplay.ReadError, match="batch 4 could not be judged: needs more"):
        _sample(4, Refused(), 2)
