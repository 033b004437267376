"""The probes on live tensors: real views, ties and devices, judged by the command's rules."""

import json

import pytest
import tensorplay

torch = pytest.importorskip("torch")

from conftest import command_report


def test_inspect_shows_the_four_layers_with_the_real_data_ptr():
    x = torch.arange(6.0).view(2, 3).t()
    layers = tensorplay.inspect(x)
    assert layers.sizes == (3, 2) and layers.strides == (1, 3)
    assert layers.data_ptr == x.data_ptr() == x.untyped_storage().data_ptr()
    assert layers.storage_nbytes == 24 and layers.dtype == "float32"
    assert layers.is_view and layers.view_of.startswith("a tensor of sizes (6,)")
    assert layers.data_ptr_consistent
    text = str(layers)
    for label in ("Tensor", "TensorImpl", "Storage", "DataPtr"):
        assert any(line.startswith(label) for line in text.splitlines()), text
    assert f"0x{x.data_ptr():x}" in text
    assert "<table>" in layers._repr_html_()


def test_inspect_names_the_tensors_sharing_a_storage_and_grad_history():
    w = torch.randn(4, 4, requires_grad=True)
    v = w.narrow(0, 1, 2).t()
    layers = tensorplay.inspect({"w": w, "v": v, "other": torch.zeros(2)})
    by_name = {layer.name: layer for layer in layers}
    assert by_name["v"].shared_by == ["w", "v"]
    assert by_name["v"].view_of == "w"
    assert by_name["v"].grad_fn == "TBackward0" and not by_name["v"].is_leaf
    assert by_name["v"].storage_offset == 4
    assert by_name["v"].data_ptr == w.data_ptr() + 16
    assert by_name["other"].shared_by == ["other"]
    assert str(layers).count("TensorImpl") == 3


def test_show_view_chain_goes_back_to_the_leaf():
    leaf = torch.randn(4, 6, requires_grad=True)
    view = leaf.narrow(1, 2, 3).transpose(0, 1)
    chain = tensorplay.show_view_chain(view)
    assert chain.base.sizes == (4, 6) and chain.base.requires_grad
    assert chain.ops == ["NarrowBackward0", "TransposeBackward0"] or chain.ops == [
        "SliceBackward0",
        "TransposeBackward0",
    ]
    assert chain.tensor.sizes == (3, 4)
    assert "base:" in str(chain) and "TransposeBackward0" in str(chain)
    plain = tensorplay.show_view_chain(torch.zeros(3))
    assert plain.base is None and str(plain) == "tensor: not a view"


def test_list_shared_storages_finds_ties_and_overlaps():
    base = torch.zeros(10)
    tied = torch.randn(3)
    shared = tensorplay.list_shared_storages(
        {"a": base[0:6], "b": base[4:10], "t1": tied, "t2": tied, "alone": torch.ones(2)}
    )
    assert len(shared) == 2
    overlap = next(s for s in shared if s.tensors[0][0] == "a")
    assert overlap.tensors == [("a", 0, 24), ("b", 16, 40)]
    assert overlap.nbytes == 40 and overlap.data_ptr == base.data_ptr()
    assert [name for name, *_ in shared[1].tensors] == ["t1", "t2"]


def test_expanded_views_reach_their_bytes_once():
    row = torch.arange(3.0)
    wide = row.expand(4, 3)
    (shared,) = tensorplay.list_shared_storages({"row": row, "wide": wide})
    assert shared.tensors == [("row", 0, 12), ("wide", 0, 12)]
    assert tensorplay.verify_data_ptr_consistency(wide)


class _Storage:
    def __init__(self, ptr, nbytes):
        self._ptr, self._nbytes = ptr, nbytes

    def data_ptr(self):
        return self._ptr

    def nbytes(self):
        return self._nbytes


class _Broken:
    """A tensor-like object whose data pointer is not its storage's plus its offset."""

    shape = (2,)

    def __init__(self, data_ptr, nbytes=8):
        self._data_ptr, self._storage = data_ptr, _Storage(0x1000, nbytes)

    def untyped_storage(self):
        return self._storage

    def storage_offset(self):
        return 1

    def element_size(self):
        return 4

    def data_ptr(self):
        return self._data_ptr

    def numel(self):
        return 2

    def stride(self):
        return (1,)


def test_verify_data_ptr_consistency():
    x = torch.arange(10.0)[3:7]
    assert tensorplay.verify_data_ptr_consistency(x)
    assert tensorplay.verify_data_ptr_consistency(torch.empty(3, device="meta")[1:])
    with pytest.raises(tensorplay.DataPtrError, match="not the storage's 0x1000 \\+ 1 x 4 B"):
        tensorplay.verify_data_ptr_consistency(_Broken(0x2000))
    with pytest.raises(tensorplay.DataPtrError, match="past the storage's 8 bytes"):
        tensorplay.verify_data_ptr_consistency(_Broken(0x1004, nbytes=8))


def test_is_safe_view_follows_the_design_rule():
    leaf = torch.randn(4, 4, requires_grad=True)
    assert not tensorplay.is_safe_view(leaf.narrow(0, 0, 2).t())
    assert tensorplay.is_safe_view(leaf)  # not a view
    assert tensorplay.is_safe_view(torch.randn(4, 4).narrow(0, 0, 2))
    history = torch.randn(4, requires_grad=True) * 2
    assert not tensorplay.is_safe_view(history[1:])
    # The rule's point: an in-place op through such a view breaks autograd.
    with pytest.raises(RuntimeError):
        leaf.narrow(0, 0, 2).add_(1)


class Tied(torch.nn.Module):
    """Every view rule: a tie, two overlapping parameters of one base, a slice that drags its
    storage, a NaN."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.out = torch.nn.Linear(4, 10, bias=False)
        self.out.weight = self.emb.weight
        base = torch.zeros(10)
        self.a = torch.nn.Parameter(base[0:6])
        self.b = torch.nn.Parameter(base[4:10])
        self.register_buffer("small", torch.zeros(1 << 20)[:3])
        self.register_buffer("bad", torch.tensor([1.0, float("nan"), float("inf")]))


def _findings(data):
    return [
        (f["code"], f["severity"], f["tensors"], f["message"], f.get("fix"))
        for file in data["files"]
        for f in file["findings"]
    ]


def test_audit_reports_the_commands_findings_on_the_same_tensors_saved(tmp_path):
    torch.manual_seed(0)
    model = Tied()
    report = tensorplay.audit(model)
    assert {"TP101", "TP102", "TP103", "TP104", "TP106", "TP401"} <= set(report.codes)
    assert not report.passed and report.exit_code == 1
    # The same tensors in a file: the parameters as they are (keep_vars), so requires_grad too.
    torch.save(model.state_dict(keep_vars=True), tmp_path / "model.pt")
    saved, code = command_report(tmp_path, tmp_path / "model.pt")
    assert code == report.exit_code
    assert _findings(report.data) == _findings(saved)
    live_file, saved_file = report.files[0], saved["files"][0]
    assert live_file.keys() == saved_file.keys()
    assert report.data.keys() == saved.keys() and report.summary.keys() == saved["summary"].keys()
    assert live_file["format"] == "live" and live_file["path"] == "<live Tied>"
    for key in ("tensors", "storages", "bytes", "devices", "dtypes"):
        assert live_file[key] == saved_file[key], key
    nan = next(f for f in report.findings if f.code == "TP401")
    assert nan.tensor == "bad" and "1 NaN, 1 +Inf" in nan.message


class Pair(torch.nn.Module):
    """Two layers over one weight: tied (one Parameter under both names), or not (a second
    Parameter over the first's bytes)."""

    def __init__(self, tie):
        super().__init__()
        self.enc = torch.nn.Linear(3, 3, bias=False)
        self.dec = torch.nn.Linear(3, 3, bias=False)
        self.dec.weight = self.enc.weight if tie else torch.nn.Parameter(self.enc.weight.data)


def test_a_tie_is_info_and_separate_parameters_over_one_view_warn(tmp_path):
    for tie, severity in ((True, "info"), (False, "warning")):
        model = Pair(tie)
        # What the audit sees is what torch made: one Parameter, or two.
        assert len(list(model.parameters())) == (1 if tie else 2)
        found = [(f.severity, f.tensors) for f in tensorplay.audit(model).findings]
        assert found == [(severity, ["enc.weight", "dec.weight"])], found
        # The same objects in a file: torch.save keeps one object once.
        torch.save(model.state_dict(keep_vars=True), tmp_path / "pair.pt")
        saved, _ = command_report(tmp_path, tmp_path / "pair.pt")
        assert _findings(saved) == _findings(tensorplay.audit(model).data)


def test_a_module_partly_on_meta_carries_no_data(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model[1].to("meta")
    report = tensorplay.audit(model, label="partly-meta")
    assert report.codes == ["TP204"] and not report.passed
    meta = next(f for f in report.findings if f.code == "TP204")
    assert meta.tensor.startswith("1.")
    assert report.files[0]["devices"] == ["cpu", "meta"]
    torch.save(model.state_dict(), tmp_path / "m.pt")
    saved, _ = command_report(tmp_path, tmp_path / "m.pt")
    assert sorted({c for c, *_ in _findings(saved)}) == report.codes


def test_a_clean_model_passes_and_options_apply():
    model = torch.nn.Linear(3, 3)
    assert tensorplay.audit(model).passed
    assert tensorplay.audit(model.state_dict()).passed
    base = torch.zeros(10)
    overlapping = {"a": base[0:6], "b": base[4:10], "nan": torch.tensor([float("nan")])}
    assert tensorplay.audit(overlapping, select=["TP101"]).codes == ["TP101"]
    assert "TP401" not in tensorplay.audit(overlapping, metadata_only=True).codes
    with pytest.raises(TypeError, match="unexpected keyword argument 'load_to'"):
        tensorplay.audit(model, load_to="cuda:0")


def test_audit_takes_a_tensor_or_nested_state():
    assert tensorplay.audit(torch.tensor([float("inf")])).codes == ["TP401"]
    nested = {"model": {"w": torch.zeros(2)}, "epoch": 3}
    report = tensorplay.audit(nested)
    assert report.summary["tensors"] == 1 and report.passed


def test_lists_and_tuples_are_named_by_index_as_the_command_names_them_saved(tmp_path):
    shared = torch.zeros(4)
    state = {"layers": [shared[:2], {"w": torch.ones(2)}], "pair": (shared[2:], 3), "epoch": 1}
    names = [t.name for t in tensorplay.inspect(state)]
    assert names == ["layers.0", "layers.1.w", "pair.0"]
    torch.save(state, tmp_path / "state.pt")
    saved = tensorplay.inspect_file(tmp_path / "state.pt").data
    assert sorted(t["name"] for t in saved["tensors"]) == sorted(names)
    assert _findings(tensorplay.audit(state).data) == _findings(
        command_report(tmp_path, tmp_path / "state.pt")[0]
    )


def test_a_container_inside_itself_is_walked_once_and_a_shared_one_under_each_name():
    looped = {"w": torch.zeros(2)}
    looped["self"] = looped
    assert [t.name for t in tensorplay.inspect(looped)] == ["w"]
    assert tensorplay.audit(looped).summary["tensors"] == 1
    inner = [torch.ones(2)]
    both = {"a": inner, "b": inner}
    assert [t.name for t in tensorplay.inspect(both)] == ["a.0", "b.0"]


def test_bad_arguments_name_what_is_accepted():
    for probe in (tensorplay.audit, tensorplay.inspect, tensorplay.list_shared_storages):
        with pytest.raises(TypeError, match="a torch.Tensor, a dict of tensors .* or a torch.nn.Module, not int"):
            probe(42)
    with pytest.raises(TypeError, match=r"is_safe_view\(\) takes a torch.Tensor, not str"):
        tensorplay.is_safe_view("x")
    with pytest.raises(TypeError, match="recommend_fix\\(\\) takes a Finding"):
        tensorplay.recommend_fix(3)


def test_recommend_fix_gives_the_rules_remedy():
    base = torch.zeros(10)
    report = tensorplay.audit({"a": base[0:6], "b": base[4:10]})
    overlap = next(f for f in report.findings if f.code == "TP101")
    assert tensorplay.recommend_fix(overlap) == "save independent copies: `a.clone()` and `b.clone()`"
    assert tensorplay.recommend_fix(overlap.data) == tensorplay.recommend_fix(overlap)


def test_live_reports_write_like_file_reports(tmp_path):
    report = tensorplay.audit(Tied())
    report.write_junit(tmp_path / "live.xml")
    assert "TP101" in (tmp_path / "live.xml").read_text()
    report.write_html(tmp_path / "live.html")
    assert "&lt;live Tied&gt;" in (tmp_path / "live.html").read_text()
    assert json.loads(report.to_json())["files"][0]["format"] == "live"


def _row(name, tensor, data_ptr):
    return (name, 0, list(tensor.shape), list(tensor.stride()), tensor.storage_offset(),
            "float32", "cpu", False, False, data_ptr, id(tensor))


def test_the_extension_reads_only_memory_a_storage_object_reports():
    from tensorplay import _tensorplay

    x = torch.arange(4.0)
    args = _tensorplay.options("test", "live", {})
    # Not a storage: refused before anything is read, whatever address it claims.
    with pytest.raises(TypeError, match="expected a torch.UntypedStorage, not _Storage"):
        _tensorplay.audit_live(
            args, "<live>", [("0", "float32", _Storage(x.data_ptr(), 16))],
            [_row("x", x, x.data_ptr())],
        )
    storage = [("0", "float32", x.untyped_storage())]
    assert _tensorplay.audit_live(args, "<live>", storage, [_row("x", x, x.data_ptr())]).passed
    # A tensor whose data_ptr is not its storage's + offset: a check only a live process makes.
    with pytest.raises(tensorplay.ReadError, match=r"'x'.*data_ptr 0x[0-9a-f]+ is not its storage"):
        _tensorplay.audit_live(args, "<live>", storage, [_row("x", x, x.data_ptr() + 4)])


def test_a_tensor_claiming_one_device_over_bytes_on_another_is_tp203():
    # A fake tensor (torch.compile's tracing) claims cuda:0 over a meta storage, GPU or not.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        fake = torch.empty(4, device="cuda")
    report = tensorplay.audit({"fake": fake, "real": torch.zeros(2)}, select="TP203")
    (finding,) = report.findings
    assert finding.message == "'fake' claims cuda:0 but its storage 0 is on meta"
