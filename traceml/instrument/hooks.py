"""Auto mode's patches and hooks: DataLoader wait, forward, backward, optimizer, host-to-device.

Every patch is on a torch class or module-level hook registry, never on a user's object (see
instrument.forward), recorded with its undo; `remove()` undoes all of them (idempotent), so
nothing leaks past shutdown. The wrappers run on the training thread: a timestamp each side, and
any failure inside TraceML is reported once and never reaches the user's code.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from traceml.instrument import forward
from traceml.instrument.comm import CommLink, CommWait, attach_ddp
from traceml.instrument.timer import BACKWARD, DATALOADER, H2D, OPTIMIZER, Timer, native_for
from traceml.probe import warn_once

OnError = Callable[[BaseException], None]


class Hooks:
    """Installs timing hooks around torch and remembers how to take each one away."""

    def __init__(self, timer: Timer, on_error: OnError, skip: frozenset[str] = frozenset()) -> None:
        self._timer = timer
        self._on_error = on_error
        self._skip = skip
        """Patches left out (config.PATCHES names, from TRACEML_SKIP)."""
        self._undo: list[Callable[[], None]] = []
        self.roots: forward.RootState | None = None
        """State of the `nn.Module.__call__` wrapper while it is installed (auto mode)."""
        self.optimizers: dict[str, None] = {}
        """Class names of the optimizers stepped so far, in first-seen order (insertion only)."""
        self.comm = CommWait()
        """DDP all-reduce wait of the current step, fed by the comm hook and backward's end."""
        self._links: list[CommLink] = []
        self._backward: Any = None
        """The backward wrapper (auto mode). Its `after` ends DDP's comm wait at backward's end,
        set only once a DDP model is attached: other runs pay no call for it each step."""

    @property
    def installed(self) -> int:
        """Number of patches and hooks currently in place (0 after `remove()`)."""
        return len(self._undo)

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        own = name in owner.__dict__
        original = owner.__dict__[name] if own else getattr(owner, name)
        setattr(owner, name, make(original))
        if own:
            self._undo.append(lambda: setattr(owner, name, original))
        else:  # inherited: deleting ours uncovers the base class's again
            self._undo.append(lambda: delattr(owner, name))

    def _timed(self, idx: int, original: Callable[..., Any]) -> Any:
        """`original` timed as phase `idx`. Its `after` (None at first) may be set to a callable
        to run when each call's phase has ended."""
        timer, on_error = self._timer, self._on_error
        c = native_for(timer)
        if c is not None:  # the same wrapper in C: no Python frame per call
            return c.Timed(timer, idx, original, None, on_error)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                timer.begin(idx)
            except Exception as e:  # noqa: BLE001 - never into the user's loop
                on_error(e)
            try:
                return original(*args, **kwargs)
            finally:
                try:
                    timer.end(idx)
                    after = wrapper.after  # type: ignore[attr-defined]
                    if after is not None:
                        after()
                except Exception as e:  # noqa: BLE001
                    on_error(e)

        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        wrapper.after = None  # type: ignore[attr-defined]
        return wrapper

    def install_auto(self, torch: Any, h2d: bool) -> None:
        """Patch what auto mode needs, less `skip`; `h2d` only when the run uses CUDA."""
        skip = self._skip
        if "forward" not in skip:
            self.roots, undo = forward.install(torch, self._timer, self._on_error)
            self._undo.append(undo)
        if "dataloader" not in skip:
            dl = importlib.import_module("torch.utils.data.dataloader")._BaseDataLoaderIter
            self._patch(dl, "__next__", lambda f: self._timed(DATALOADER, f))
        if "backward" not in skip:
            # `Tensor.backward` looks `torch.autograd.backward` up at each call, so one wrapper
            # times both (one layer, not two: ~1 µs a step less).
            self._patch(torch.autograd, "backward", self._timed_backward)
        if "optimizer" not in skip:
            self._install_optimizer(torch)
        if h2d:
            self.install_h2d(torch)

    def _install_optimizer(self, torch: Any) -> None:
        timer, on_error, seen = self._timer, self._on_error, self.optimizers
        opt = importlib.import_module("torch.optim.optimizer")

        def note(optimizer: Any) -> None:  # the findings' advice depends on the class
            seen.setdefault(type(optimizer).__name__)

        c = native_for(timer)
        if c is not None:  # the same hooks in C; `note` runs when the optimizer's class changes
            pre = c.Edge(timer, OPTIMIZER, True, on_error, note)
            self._hook_optimizer(opt, pre, c.Edge(timer, OPTIMIZER, False, on_error))
            return
        last: list[type] = [type(None)]

        def pre_py(optimizer: Any, _args: Any, _kwargs: Any) -> None:
            try:
                timer.begin(OPTIMIZER)
                if type(optimizer) is not last[0]:
                    last[0] = type(optimizer)
                    note(optimizer)
            except Exception as e:  # noqa: BLE001
                on_error(e)

        def post(_opt: Any, _args: Any, _kwargs: Any) -> None:
            try:
                timer.end(OPTIMIZER)
            except Exception as e:  # noqa: BLE001
                on_error(e)

        self._hook_optimizer(opt, pre_py, post)

    def _hook_optimizer(
        self, opt: Any, pre: Callable[..., None], post: Callable[..., None]
    ) -> None:
        for handle in (
            opt.register_optimizer_step_pre_hook(pre),
            opt.register_optimizer_step_post_hook(post),
        ):
            self._undo.append(handle.remove)

    def _timed_backward(self, original: Callable[..., Any]) -> Any:
        self._backward = self._timed(BACKWARD, original)
        self._arm_backward()
        return self._backward

    def _arm_backward(self) -> None:
        """Backward's wrapper ends DDP's comm wait once a DDP model is attached (either order)."""
        if self._backward is not None and self._links:
            self._backward.after = self.comm.backward_done

    def install_h2d(self, torch: Any) -> None:
        """Time host-to-device copies started inside the step (`Tensor.to`, `Tensor.cuda`)."""
        if "h2d" in self._skip or getattr(torch.Tensor.to, "__traceml__", False):
            return
        timer = self._timer

        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            timed = self._timed(H2D, original)

            def wrapper(t: Any, *args: Any, **kwargs: Any) -> Any:
                if timer.inside and not t.is_cuda:
                    return timed(t, *args, **kwargs)
                return original(t, *args, **kwargs)

            wrapper.__traceml__ = True  # type: ignore[attr-defined]
            return wrapper

        self._patch(torch.Tensor, "to", make)
        self._patch(torch.Tensor, "cuda", make)

    def watch_model(self, model: Any) -> None:
        """The model given to `trace_step`: its thread is the training thread; time DDP's wait.

        Forward needs nothing per model: every root module's call is timed (instrument.forward).
        """
        if self.roots is not None and self.roots.owner is not None:
            self.roots.owner = threading.get_ident()
        self.watch_ddp(model)

    def forget_thread(self) -> None:
        """A forked child: the wrapper passes every call straight through from now on."""
        if self.roots is not None:
            self.roots.owner = None

    def watch_ddp(self, model: Any) -> None:
        """Time DDP's gradient all-reduce of `model` (CPU DDP without a comm hook of its own).

        A comm hook cannot be removed, so a user who registers one only after the first
        `trace_step` gets DDP's "can only be called once" error: register hooks before training.
        """
        if "comm" in self._skip:
            return
        try:
            link = attach_ddp(model, self.comm)
        except Exception as e:  # noqa: BLE001 - not measured, training goes on untouched
            warn_once("comm wait", f"DDP all-reduce wait not measured ({type(e).__name__}: {e})")
            return
        if link is not None:
            self._links.append(link)
            self._timer.use_comm(self.comm.take)
            self._arm_backward()

    def remove(self) -> None:
        """Undo every patch and hook, newest first. Safe to call twice."""
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception as e:  # noqa: BLE001
                self._on_error(e)
        self.roots = None
        self._backward = None
        for link in self._links:
            link.comm = None
        if self._links:
            self._timer.use_comm(None)
        self._links.clear()
