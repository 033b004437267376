"""Device probes on live tensors: audit_device_consistency and watch() around real forward
passes. Without a GPU the second device is `meta` (TP204); the CUDA cases run where one is."""

import gc
import json
import weakref

import pytest
import tensorplay

torch = pytest.importorskip("torch")

from conftest import command, command_report

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _registry_device_rules():
    """The rules the installed command's registry tags `devices`."""
    done = command("rules", "--format", "json")
    assert done.returncode == 0, done.stderr
    rules = json.loads(done.stdout)["rules"]
    return {r["code"]: r["name"] for r in rules if "devices" in r["tags"]}


def _flagged(report, code):
    return sorted(name for f in report.findings if f.code == code for name in f.tensors)


def _no_hooks(model):
    return all(not m._forward_hooks for m in model.modules())


def test_the_device_rules_are_the_registrys():
    from tensorplay._devices import device_rules

    registry = _registry_device_rules()
    assert registry, "the registry tags no rule `devices`"
    assert device_rules() == registry


class TiedPartlyMeta(torch.nn.Module):
    """A tie (TP103, a view rule) and a layer moved to meta (TP204, a device rule)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 3)
        self.out = torch.nn.Linear(3, 5, bias=False)
        self.out.weight = self.emb.weight
        self.head = torch.nn.Linear(5, 2)
        self.head.to("meta")


def test_a_module_moved_partly_to_meta_gets_the_device_findings_only(tmp_path):
    model = TiedPartlyMeta()
    report = tensorplay.audit_device_consistency(model)
    assert report.codes == ["TP204"] and not report.passed
    assert _flagged(report, "TP204") == ["head.bias", "head.weight"]
    assert report.files[0]["path"] == "<live TiedPartlyMeta>"
    # The whole audit sees the tie too; the device probe runs the device rules alone.
    assert "TP103" in tensorplay.audit(model).codes
    # What the command reports with the device rules on the same tensors saved.
    torch.save(model.state_dict(keep_vars=True), tmp_path / "m.pt")
    rules = ",".join(_registry_device_rules())
    saved, code = command_report(tmp_path, tmp_path / "m.pt", flags=["--select", rules])
    assert code == report.exit_code
    # The same findings, worded for what holds the tensors: the file, or the live object.
    assert all("the object holds no data" in f.message for f in report.findings)
    assert [f["message"] for f in saved["files"][0]["findings"]] == [
        f.message.replace("the object holds", "the file holds") for f in report.findings
    ]


def test_a_model_on_one_device_passes_and_takes_a_state_dict_or_a_tensor():
    model = torch.nn.Linear(3, 2)
    clean = tensorplay.audit_device_consistency(model, label="clean")
    assert clean.passed and clean.findings == [] and clean.files[0]["path"] == "clean"
    mixed = {"w": torch.zeros(2), "m": torch.empty(2, device="meta")}
    assert _flagged(tensorplay.audit_device_consistency(mixed), "TP204") == ["m"]
    alone = tensorplay.audit_device_consistency(torch.empty(3, device="meta"))
    assert _flagged(alone, "TP204") == ["tensor"]


def test_select_narrows_to_device_rules_and_refuses_others():
    model = TiedPartlyMeta()
    assert tensorplay.audit_device_consistency(model, select="meta-tensor").codes == ["TP204"]
    # Meta storages are TP204's, not TP201's: one device holding data is not mixed.
    assert tensorplay.audit_device_consistency(model, select=["tp201"]).passed
    assert tensorplay.audit_device_consistency(model, ignore="TP204").passed
    # A prefix, as for audit(): TP2 is every device rule, TP20 too.
    assert tensorplay.audit_device_consistency(model, select="TP2").codes == ["TP204"]
    assert tensorplay.audit_device_consistency(model, select="tp201,meta-tensor").codes == ["TP204"]
    with pytest.raises(tensorplay.UsageError, match="select='TP1' is not a device rule"):
        tensorplay.audit_device_consistency(model, select="TP1")
    with pytest.raises(tensorplay.UsageError, match=r"did you mean TP204 meta-tensor\?"):
        tensorplay.audit_device_consistency(model, select="meta-tensr")
    with pytest.raises(tensorplay.UsageError, match="select='TP103' is not a device rule"):
        tensorplay.audit_device_consistency(model, select=["TP204", "TP103"])
    with pytest.raises(TypeError, match="select=3"):
        tensorplay.audit_device_consistency(model, select=3)
    with pytest.raises(TypeError, match=r"audit_device_consistency\(\) got an unexpected .*load_to"):
        tensorplay.audit_device_consistency(model, load_to="cpu")
    with pytest.raises(TypeError, match=r"audit_device_consistency\(\) takes .* not int"):
        tensorplay.audit_device_consistency(42)


@cuda
def test_a_model_split_over_cpu_and_cuda_is_mixed():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).cuda())
    report = tensorplay.audit_device_consistency(model)
    assert {"TP201", "TP202"} <= set(report.codes) and not report.passed
    assert "TP202" not in tensorplay.audit_device_consistency(model, ignore="TP202").codes


class CachesOnMeta(torch.nn.Module):
    """Registers a buffer on meta during its first forward, and returns a side output there."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        if not hasattr(self, "cache"):
            self.register_buffer("cache", torch.zeros(3, device="meta"))
        return self.fc(x), {"side": [torch.empty(2, device="meta"), 7]}


def test_watch_finds_a_buffer_created_during_forward_and_an_output_on_meta():
    model = CachesOnMeta()
    with tensorplay.watch(model) as w:
        assert not _no_hooks(model)  # the hooks are there during the body
        model(torch.randn(2, 4))
    assert w.before.passed and w.before.findings == []
    assert w.created == ["cache"]
    assert w.moved == [] and w.replaced == []
    assert w.outputs == ["fc.output", "<root>.output.0", "<root>.output.1.side.0"]
    assert _flagged(w.report, "TP204") == ["<root>.output.1.side.0", "cache"]
    assert w.passed is False and w.report.files[0]["path"] == "<live CachesOnMeta>"
    assert w.report.summary["tensors"] == 3 + 3  # fc.weight, fc.bias, cache and the outputs
    assert _no_hooks(model)


def test_watch_names_each_call_when_modules_run_more_than_once():
    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = torch.nn.Linear(2, 2)
            self.last = torch.nn.Linear(2, 1)

        def forward(self, x):
            return self.last(self.block(self.block(x)))

    model = Shared()
    with tensorplay.watch(model) as w:
        model(torch.ones(1, 2))
    assert w.outputs == ["block.output@0", "block.output@1", "last.output", "<root>.output"]
    with tensorplay.watch(model) as w:
        model(torch.ones(1, 2))
        model(torch.ones(1, 2))
    assert [n for n in w.outputs if n.startswith("<root>")] == [
        "<root>.output@0",
        "<root>.output@1",
    ]
    assert len([n for n in w.outputs if n.startswith("block.")]) == 4
    assert w.passed and w.report.findings == []


def test_watch_sees_tensors_moved_and_replaced_during_forward():
    class Mover(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)
            self.keep = torch.nn.Linear(2, 2)
            self.register_buffer("stats", torch.zeros(2))

        def forward(self, x):
            self.stats = self.stats.to("meta")  # a new tensor under the same name
            self.fc.to("meta")
            self.keep.weight.data.mul_(2)  # changed in place: same tensor, same device
            return x

    model = Mover()
    weight = model.fc.weight
    with tensorplay.watch(model) as w:
        model(torch.ones(2))
    assert sorted(w.moved) == [
        ("fc.bias", "cpu", "meta"),
        ("fc.weight", "cpu", "meta"),
        ("stats", "cpu", "meta"),
    ]
    # Module.to keeps a Parameter object only where torch can swap its data in place.
    fc_replaced = ["fc.weight", "fc.bias"] if model.fc.weight is not weight else []
    assert sorted(w.replaced) == sorted(["stats", *fc_replaced])
    assert w.created == []
    assert _flagged(w.report, "TP204") == ["fc.bias", "fc.weight", "stats"]


def test_hooks_are_removed_when_the_body_raises_and_its_exception_is_kept():
    model = CachesOnMeta()
    mine = model.fc.register_forward_hook(lambda *args: None)
    w = tensorplay.watch(model, strict=True)
    with pytest.raises(ValueError, match="from the body"):
        with w:
            model(torch.randn(1, 4))
            raise ValueError("from the body")
    # The watch's hooks are gone; the caller's own hook is kept.
    assert [m for m in model.modules() if m._forward_hooks] == [model.fc]
    assert list(model.fc._forward_hooks) == [mine.id]
    # The audit still ran: it explains the state the failing body left.
    assert w.created == ["cache"] and "TP204" in w.report.codes
    mine.remove()
    assert _no_hooks(model)


def test_a_failing_audit_never_hides_the_bodys_exception(monkeypatch):
    import tensorplay._devices as devices

    def broken(*args):
        raise tensorplay.InternalError("audit failed")

    model = torch.nn.Linear(2, 2)
    w = tensorplay.watch(model, strict=True)
    with pytest.raises(ValueError, match="from the body"):
        with w:
            monkeypatch.setattr(devices, "_audit_named", broken)
            raise ValueError("from the body")
    assert w.report is None and w.passed is None and _no_hooks(model)
    # Without an exception from the body, the audit's own failure is raised.
    monkeypatch.undo()
    with pytest.raises(tensorplay.InternalError, match="audit failed"):
        with tensorplay.watch(model):
            monkeypatch.setattr(devices, "_audit_named", broken)
    assert _no_hooks(model)


def test_strict_raises_the_human_report_on_findings_only():
    model = CachesOnMeta()
    with pytest.raises(AssertionError) as raised:
        with tensorplay.watch(model, strict=True) as w:
            model(torch.randn(1, 4))
    assert str(raised.value) == w.report.human()
    assert "error[TP204]" in str(raised.value)
    assert _no_hooks(model)
    clean = torch.nn.Linear(2, 2)
    with tensorplay.watch(clean, strict=True) as w:
        clean(torch.ones(2))
    assert w.passed is True


def test_outputs_are_not_kept_alive_after_the_watch():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    refs = []
    hook = model[0].register_forward_hook(lambda m, a, out: refs.append(weakref.ref(out)))
    with tensorplay.watch(model) as w:
        model(torch.ones(3))  # the result is dropped at once
        gc.collect()
        assert refs[0]() is not None  # the watch holds it for the audit
    gc.collect()
    assert refs[0]() is None
    assert "0.output" in w.outputs
    hook.remove()


def test_watch_refuses_wrong_arguments_before_the_forward():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"watch\(\) takes a torch.nn.Module, not dict"):
        tensorplay.watch(dict(model.state_dict()))
    with pytest.raises(TypeError, match="strict='yes'"):
        tensorplay.watch(model, strict="yes")
    with pytest.raises(TypeError, match="unexpected keyword argument 'load_to'"):
        tensorplay.watch(model, load_to="cpu")
    with pytest.raises(tensorplay.UsageError, match="not a device rule"):
        tensorplay.watch(model, select="TP101")
    w = tensorplay.watch(model)
    with w:
        with pytest.raises(RuntimeError, match="already active"):
            w.__enter__()
    assert _no_hooks(model)
    # A finished watch can be entered again: its results are the new run's.
    with w:
        pass
    assert w.outputs == [] and w.passed


@cuda
def test_watch_finds_an_output_on_cuda_from_a_cpu_model():
    class ToCuda(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x).cuda()

    model = ToCuda()
    with tensorplay.watch(model) as w:
        model(torch.ones(2))
    assert "TP201" in w.report.codes and w.before.passed
