"""Device probes on live tensors: ``audit_device_consistency`` and ``watch`` around a forward
pass. Both run the command's device rules (TP2xx) through the same live audit as ``audit``;
torch is imported only when they are called."""

import weakref

from ._live import _torch, audit_named, named_tensors, tensors_in
from ._report import Report
from ._errors import UsageError


def device_rules():
    """The registry's device rules (``tensorplay rules``: the rules tagged ``devices``) as
    ``{code: name}``, asked of the extension: the package keeps no list of rules."""
    from . import _tensorplay

    return {code: name for code, name, tags in _tensorplay.rules() if "devices" in tags}


def _device_select(function, options):
    """``options`` with ``select`` narrowed to the device rules: all four by default, or those
    of them the caller names (codes, prefixes such as ``TP2``, or names, resolved as the
    command resolves ``--select``). A rule that is not a device rule is refused
    (``UsageError``) rather than run, so a device probe never reports a view or memory
    finding."""
    from . import _tensorplay

    options = dict(options)
    devices = device_rules()
    select = options.get("select")
    if select is None:
        options["select"] = list(devices)
        return options
    # The option's own type check first, so a wrong kind is a TypeError as for audit().
    _tensorplay.options(function, "live", {"select": select})
    items = [select] if isinstance(select, str) else list(select)
    # Commas separate rules, as in the command's `--select TP201,TP204`.
    items = [part for item in items for part in item.split(",")]
    codes = []
    for item in items:
        named = _tensorplay.select_rules([item])
        others = [code for code in named if code not in devices]
        if others:
            known = ", ".join(f"{c} {n}" for c, n in devices.items())
            raise UsageError(f"{function}(): select={item!r} is not a device rule ({known})")
        codes.extend(named)
    options["select"] = codes
    return options


def _audit_named(function, named, label, options):
    """The live audit of ``(name, tensor)`` pairs, its option errors naming ``function``."""
    from . import _tensorplay

    return Report(audit_named(named, label, _tensorplay.options(function, "live", options)))


def _label(obj, label):
    if label is not None and not isinstance(label, str):
        raise TypeError(f"label={label!r}: expected a str")
    return label or f"<live {type(obj).__name__}>"


def audit_device_consistency(obj, label=None, **options):
    """The device rules (TP201 mixed devices, TP202 unexpected device, TP203 tensor/storage
    device mismatch, TP204 meta tensors) over the live tensors of ``obj`` (a tensor, a
    state_dict or an ``nn.Module``, named as ``audit`` names them), as a ``Report`` labelled
    like ``audit``'s. ``select`` may narrow the rules to some of these four (codes or names);
    any other rule is a ``UsageError``. TP202 judges storages against ``allowed_devices`` of
    the configuration (default ``["cpu"]``): a model kept on a GPU gets that warning unless
    the configuration allows its device or ``ignore="TP202"`` is given. The other options are
    ``audit``'s."""
    named = named_tensors(obj, "audit_device_consistency")
    options = _device_select("audit_device_consistency", options)
    return _audit_named("audit_device_consistency", named, _label(obj, label), options)


def _unique(name, taken):
    """``name``, or ``name~2``, ``name~3``… where a model tensor already has it."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}~{n}"
    return candidate


class watch:
    """Device checks around a forward pass::

        with tensorplay.watch(model) as w:
            y = model(x)
        w.report  # the device rules over the model's tensors and the outputs, after forward

    On enter, the model's named tensors (as ``audit`` names them) are snapshot (name, device,
    identity) and audited (``w.before``), and a forward hook is put on every submodule, the
    model included. Each hook keeps references to its module's output tensors (nested tuples,
    lists and mappings; no copies), named ``<qualified name>.output`` (``<root>.output`` for
    the model) with ``.i``/``.key`` for each level; a module called more than once in the
    watch gets the call's index, ``<name>.output@0``, ``@1``… On exit the hooks are removed,
    even when the body raised, and the device rules run over the model's tensors as they are
    now plus the recorded outputs. Then the references are dropped: the outputs live no
    longer than the watch, but every submodule's output lives until the watch ends (as
    autograd keeps them when training; under ``no_grad`` it is memory a plain forward frees).

    Results: ``report`` (a ``Report``), ``before`` (the ``Report`` on enter), ``created``
    (names of tensors that did not exist on enter: buffers or parameters registered during
    forward), ``moved`` (``(name, device before, device after)``), ``replaced`` (names whose
    tensor is another object now, such as a buffer reassigned during forward), ``outputs``
    (the output names recorded), ``passed``.

    Findings do not raise unless ``strict=True``: then a failing report raises
    ``AssertionError`` with the human report on exit. When the body raises, the audit still
    runs (so ``report`` can explain a device error) but never replaces the body's exception:
    ``strict`` does not raise then, and if the audit itself fails, ``report`` stays None.
    ``label`` and the options are ``audit_device_consistency``'s.
    """

    def __init__(self, model, label=None, strict=False, **options):
        torch = _torch()
        if torch is None or not isinstance(model, torch.nn.Module):
            raise TypeError(f"watch() takes a torch.nn.Module, not {type(model).__name__}")
        if not isinstance(strict, bool):
            raise TypeError(f"watch(): strict={strict!r}: expected True or False")
        self.model = model
        self.label = _label(model, label)
        self.strict = strict
        self._options = _device_select("watch", options)
        # Checked now, so a bad option fails before the forward, not after it.
        from . import _tensorplay

        _tensorplay.options("watch", "live", self._options)
        self._handles = []
        self._reset()

    def _reset(self):
        self.report = None
        self.before = None
        self.created = []
        self.moved = []
        self.replaced = []
        self.outputs = []
        self._snapshot = {}
        self._records = []
        self._calls = {}

    @property
    def passed(self):
        """Whether the report after forward passed (None before the watch ends)."""
        return None if self.report is None else self.report.passed

    def __enter__(self):
        if self._handles:
            raise RuntimeError("this watch is already active; nest a new watch() instead")
        self._reset()
        named = named_tensors(self.model, "watch")
        # Weak references: identity without keeping a replaced tensor alive.
        self._snapshot = {
            name: (str(tensor.device), weakref.ref(tensor)) for name, tensor in named
        }
        self.before = _audit_named("watch", named, self.label, self._options)
        try:
            for qualname, module in self.model.named_modules():
                self._handles.append(module.register_forward_hook(self._hook(qualname)))
        except BaseException:
            self._remove_hooks()
            raise
        return self

    def _hook(self, qualname):
        name = qualname or "<root>"

        def record(module, args, output):
            call = self._calls.get(name, 0)
            self._calls[name] = call + 1
            self._records.append((name, call, output))

        return record

    def _remove_hooks(self):
        handles, self._handles = self._handles, []
        for handle in handles:
            handle.remove()

    def __exit__(self, exc_type, exc, tb):
        self._remove_hooks()
        try:
            self._judge()
        except Exception:
            if exc_type is None:
                raise
            # The body's exception is the one the caller must see.
            self.report = None
        finally:
            self._records = []
        if exc_type is None and self.strict and not self.report.passed:
            raise AssertionError(self.report.human())
        return False

    def _judge(self):
        torch = _torch()
        now = named_tensors(self.model, "watch")
        names = {name for name, _ in now}
        for name, tensor in now:
            if name not in self._snapshot:
                self.created.append(name)
                continue
            device, ref = self._snapshot[name]
            if str(tensor.device) != device:
                self.moved.append((name, device, str(tensor.device)))
            if ref() is not tensor:
                self.replaced.append(name)
        recorded = []
        for module, call, output in self._records:
            prefix = f"{module}.output"
            if self._calls[module] > 1:
                prefix = f"{prefix}@{call}"
            # Other objects in an output (dataclasses included) are left out.
            tensors_in(torch, output, prefix, recorded)
        taken = set(names)
        outputs = []
        for name, tensor in recorded:
            name = _unique(name, taken)
            taken.add(name)
            outputs.append((name, tensor))
        self.outputs = [name for name, _ in outputs]
        self.report = _audit_named("watch", now + outputs, self.label, self._options)

    def __repr__(self):
        state = "active" if self._handles else ("done" if self.report else "not run")
        return f"<tensorplay.watch {self.label} {state}>"
