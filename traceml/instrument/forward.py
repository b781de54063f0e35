"""Forward time of every root module that runs inside a step, without touching any module.

Auto mode replaces `torch.nn.Module.__call__`, the class attribute through which every module
call goes, with one wrapper for the whole process. Nothing of TraceML's is ever stored in a
user's module, optimizer or tensor: no hook dict entry, no attribute, no closure. So
`torch.save(model)` then `torch.load` with `weights_only=True` (or on a machine without TraceML),
`copy.deepcopy`, `state_dict`, `torch.jit`, `torch.export` and `torch.compile` see exactly what they
would without TraceML, and every model of the step is timed, whichever one `trace_step` names: a
GAN's generator and discriminator, an encoder and its decoder, a teacher and its student.

Where torch's `__call__` is the `_wrapped_call_impl` TraceML knows (the same bytecode as
`TORCH_CALL` below: torch 2.2 and later), TraceML does not wrap it but swaps the code of that
function for TRACED_CALL's: torch's own body behind one attribute test, and for a root the same
body between two C calls that open and close it (make_edges). Every module call, root or nested,
then runs as many Python frames as without TraceML (a wrapper around it added one frame, one
argument tuple and one keyword dict to every module call, 0.1-0.3 µs each, 100-170 µs a forward of
a 500-module model), and `nn.Module.__call__` stays the very function object torch defined, which
dynamo compares by identity. The names the swapped code reads (`_traceml_state`, `_traceml_enter`,
`_traceml_leave`, `_traceml_compiling`) sit in torch's module namespace while TraceML runs and
leave it at the undo. The swapped code reports torch's file and lines, so tracebacks read as
without TraceML. Any other torch keeps the wrapper.

The outermost module call on the training thread is a "root": its time is `forward`. Calls nested
in a root pass straight through (one attribute test: 0.01-0.02 µs in torch's swapped code, about
0.15 µs through the wrapper). A forward inside backward
(activation checkpointing's recompute) stays `backward`, whose cost it is; a forward inside
`optimizer.step(closure)` (LBFGS) is `forward`, as the timer's innermost-phase rule says.

While dynamo traces a compiled module, `torch.compiler.is_dynamo_compiling()` is constant True,
so the traced graph holds only the original call (no graph break, no guard on TraceML's state).
In eager mode it is one Python call returning False; `is_compiling()`, which also says True
under non-strict export, costs a second call (`torch.jit.is_scripting`) on every root call.
"""

from __future__ import annotations

import ast
import dis
import threading
import types
from collections.abc import Callable
from typing import Any

from traceml.instrument.timer import BACKWARD, FORWARD, Timer, native_for

OnError = Callable[[BaseException], None]


class RootState:
    """Mutable state shared by the wrapper, the session and fork handling."""

    __slots__ = ("busy", "owner")

    def __init__(self) -> None:
        self.busy = False
        """True while the training thread is inside a root module's call."""
        self.owner: int | None = threading.get_ident()
        """Thread id of the training loop; None turns the wrapper into a pure pass-through."""


_NOTHING, _OPENED, _TIMED = 0, 1, 2
"""What the owner thread's open root is: none, open (`busy`) but not timed, open and timed."""


Enter = Callable[[], None]
Leave = Callable[[], None]


def make_edges(timer: Timer, state: RootState, on_error: OnError) -> tuple[Enter, Leave]:
    """A root module call's two sides, run around torch's own call:
    `try: enter(); <torch's call> finally: leave()`.

    `enter` opens the root (`busy`, so the calls nested in it pass straight through) when it is
    the training thread's, and times it as `forward` inside a step unless backward is open;
    `leave`, on that thread, closes what `enter` opened. `enter` sits inside the `try`: an
    interrupt delivered as its call returns still reaches `leave`. With the C timer they are
    the methods of one C object, `_native.Roots`; the Python below is their reference.
    """
    c = native_for(timer)
    if c is not None:
        roots = c.Roots(timer, state, on_error, FORWARD, BACKWARD)
        return roots.enter, roots.leave
    get_ident = threading.get_ident
    opened = [_NOTHING]  # what the owner thread's open root is, if any

    def py_enter() -> None:
        if get_ident() != state.owner:
            return
        timed = timer.inside and not timer.in_phase(BACKWARD)
        opened[0] = _TIMED if timed else _OPENED  # first: busy is never set with nothing noted
        state.busy = True  # set outside steps too, so a compiled module sees one value
        if timed:
            try:
                timer.begin(FORWARD)
            except Exception as e:  # noqa: BLE001 - never into the user's loop
                on_error(e)

    def py_leave() -> None:
        was = opened[0]
        if was == _NOTHING or get_ident() != state.owner:
            return  # another thread's call never closes the owner's root
        opened[0] = _NOTHING
        try:
            if was == _TIMED:
                try:
                    timer.end(FORWARD)
                except Exception as e:  # noqa: BLE001
                    on_error(e)
        finally:
            state.busy = False

    return py_enter, py_leave


def make_call(
    original: Callable[..., Any],
    timer: Timer,
    state: RootState,
    on_error: OnError,
    is_compiling: Callable[[], bool],
) -> Callable[..., Any]:
    """A wrapper of `torch.nn.Module.__call__` (`original`), for a torch whose `__call__` is not
    the one TRACED_CALL repeats.

    The first test stays Python, so nested calls pay no C call and dynamo, which traces through
    this function, sees `is_compiling()` and the original call.
    """
    enter, leave = make_edges(timer, state, on_error)

    # The module is args[0]: passing `args` on as it came builds no new tuple, where
    # `original(self, *args)` builds a list and a tuple on every module call. Most module calls
    # take no keyword: `f(*args)` then passes the tuple on, where `f(*args, **kwargs)` builds
    # and merges one more dict on every call.
    def __call__(*args: Any, **kwargs: Any) -> Any:
        if state.busy or is_compiling():
            if kwargs:
                return original(*args, **kwargs)
            return original(*args)
        try:
            enter()
            if kwargs:
                return original(*args, **kwargs)
            return original(*args)
        finally:
            leave()

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    __call__.__traceml__ = True  # type: ignore[attr-defined]
    return __call__


TORCH_CALL = """\
def _wrapped_call_impl(self, *args, **kwargs):
    if self._compiled_call_impl is not None:
        return self._compiled_call_impl(*args, **kwargs)  # type: ignore[misc]
    else:
        return self._call_impl(*args, **kwargs)
"""
"""torch's `nn.Module._wrapped_call_impl` (torch/nn/modules/module.py, 2.2 and later): its code
is swapped only for a function of exactly this bytecode."""

TRACED_CALL = """\
def _wrapped_call_impl(self, *args, **kwargs):
    if _traceml_state.busy or _traceml_compiling():
        if self._compiled_call_impl is not None:
            return self._compiled_call_impl(*args, **kwargs)
        else:
            return self._call_impl(*args, **kwargs)
    try:
        _traceml_enter()
        if self._compiled_call_impl is not None:
            return self._compiled_call_impl(*args, **kwargs)
        else:
            return self._call_impl(*args, **kwargs)
    finally:
        _traceml_leave()
"""
"""The code torch's `__call__` runs while TraceML does: torch's own body for a call nested in a
root, another thread's call, or while dynamo traces (`is_dynamo_compiling()` is then constant
True and the graph holds only torch's call); the same body between a root's `enter` and `leave`
(make_edges) otherwise, in the same frame: a root call runs no Python frame more than torch's.
The names it reads are torch's module globals while it is installed."""

_TORCH_LINE = {
    1: 0, 2: 0, 3: 1, 4: 2, 5: 3, 6: 4,  # the def, the test, torch's body
    7: 0, 8: 0, 9: 1, 10: 2, 11: 3, 12: 4, 13: 0, 14: 0,  # try, enter, torch's body, leave
}  # fmt: skip
"""TRACED_CALL's line -> TORCH_CALL's (0 is the `def`). The code reports torch's file and lines,
torch's statements at their own (both copies of its body): a traceback through a module call,
root or nested, reads exactly as without TraceML. TraceML's own lines report the `def` line,
whole."""
_TORCH_LINES = frozenset({3, 4, 5, 6, 9, 10, 11, 12})
"""TRACED_CALL's lines holding torch's statements (one level deeper than in its class)."""
_WHOLE_LINE = 10_000
"""An end column past any line's end: a traceback underlines no part of the line."""

_CODE_FIELDS = (
    "co_code", "co_consts", "co_names", "co_varnames", "co_argcount", "co_posonlyargcount",
    "co_kwonlyargcount", "co_flags", "co_freevars", "co_cellvars",
)  # fmt: skip


def _function_code(module: types.CodeType) -> types.CodeType:
    return next(c for c in module.co_consts if isinstance(c, types.CodeType))


def inlinable(call: Any) -> bool:
    """Whether `call` is torch's `_wrapped_call_impl` as TORCH_CALL has it (same bytecode)."""
    code = getattr(call, "__code__", None)
    if not isinstance(call, types.FunctionType) or call.__closure__ is not None or code is None:
        return False
    # dont_inherit: this module's `from __future__ import annotations` would set a code flag.
    known = _function_code(compile(TORCH_CALL, "<torch>", "exec", dont_inherit=True))
    return all(getattr(code, f) == getattr(known, f) for f in _CODE_FIELDS)


def traced_code(torch_code: types.CodeType) -> types.CodeType:
    """TRACED_CALL compiled as if it sat where torch's function does: its file, its lines (each
    of torch's statements at its own line and column), its name."""
    tree = ast.parse(TRACED_CALL)
    first = torch_code.co_firstlineno
    # Columns: torch's `if self._compiled_call_impl` test, in its file (a method in a class)
    # and in TRACED_CALL; TraceML's own lines sit one level less deep than torch's there.
    # (Python 3.10 has no columns: nothing to align.)
    found = (getattr(i, "positions", None) for i in dis.get_instructions(torch_code))
    torch_col = next((p.col_offset for p in found if p is not None and p.col_offset), None)
    shift = 0 if torch_col is None else torch_col - TRACED_CALL.splitlines()[2].index("self")
    for node in ast.walk(tree):
        line, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if line is None or end is None:
            continue
        node.lineno = first + _TORCH_LINE[line]  # type: ignore[attr-defined]
        node.end_lineno = max(node.lineno, first + _TORCH_LINE[end])  # type: ignore[attr-defined]
        if line in _TORCH_LINES:
            node.col_offset += shift  # type: ignore[attr-defined]
        else:
            node.col_offset = 0  # type: ignore[attr-defined]
        if end in _TORCH_LINES:
            node.end_col_offset += shift  # type: ignore[attr-defined]
        elif getattr(node, "end_col_offset", None) is not None:
            node.end_col_offset = _WHOLE_LINE  # type: ignore[attr-defined]
    tree.body[0].end_lineno = first + max(_TORCH_LINE.values())
    module = compile(tree, torch_code.co_filename, "exec", dont_inherit=True)
    code: Any = _function_code(module)
    qualname = getattr(torch_code, "co_qualname", None)  # Python 3.11 and later
    return code.replace(co_qualname=qualname) if qualname is not None else code  # type: ignore[no-any-return]


def install(torch: Any, timer: Timer, on_error: OnError) -> tuple[RootState, Callable[[], None]]:
    """Time root module calls: swap the code of torch's `__call__` for TRACED_CALL's where it is
    the one TraceML knows, else replace `torch.nn.Module.__call__` with a wrapper. Returns the
    shared state and the undo.

    The undo puts torch's code (or its function) back only if ours is still there; if another
    tool wrapped or replaced it since, ours stays in its chain as a pure pass-through (owner
    None).
    """
    module_cls = torch.nn.Module
    original = module_cls.__call__
    state = RootState()
    compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
    if inlinable(original) and module_cls.__dict__.get("_wrapped_call_impl") is original:
        return state, _swap_code(original, timer, state, on_error, compiling)
    ours = make_call(original, timer, state, on_error, compiling)
    module_cls.__call__ = ours

    def undo() -> None:
        state.owner = None
        if module_cls.__dict__.get("__call__") is ours:
            module_cls.__call__ = original

    return state, undo


def _swap_code(
    call: types.FunctionType,
    timer: Timer,
    state: RootState,
    on_error: OnError,
    compiling: Callable[[], bool],
) -> Callable[[], None]:
    """Give torch's `call` the traced code and its module the names that code reads."""
    torch_code = call.__code__
    ours = traced_code(torch_code)
    enter, leave = make_edges(timer, state, on_error)
    scope = call.__globals__
    names = {
        "_traceml_state": state,
        "_traceml_enter": enter,
        "_traceml_leave": leave,
        "_traceml_compiling": compiling,
    }
    scope.update(names)
    call.__code__ = ours

    def undo() -> None:
        state.owner = None
        if call.__code__ is ours:
            call.__code__ = torch_code
            for name, value in names.items():
                if scope.get(name) is value:
                    del scope[name]

    return undo
