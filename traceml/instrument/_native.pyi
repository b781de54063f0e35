from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

N_PHASES: int
BETWEEN: int
OTHER: int
RSS_INTERVAL_NS: int

class StepTimer:
    inside: bool
    seen: int
    step: int
    def __init__(
        self,
        out: deque[Any],
        raw_type: type[tuple[Any, ...]],
        clock: Callable[[], int] | None = None,
        read_rss: Callable[[], int] | None = None,
        mark: Callable[[], Any] | None = None,
    ) -> None: ...
    @property
    def open_phase(self) -> int: ...
    @property
    def _acc(self) -> list[int]: ...
    def begin(self, idx: int) -> None: ...
    def end(self, idx: int) -> None: ...
    def enter(self) -> None: ...
    def exit(self) -> None: ...
    def rest(self) -> None: ...
    def in_phase(self, idx: int) -> bool: ...
    def use_cuda(self, mark: Callable[[], Any], read_device: Callable[[], Any]) -> None: ...
    def use_comm(self, take: Callable[[], int] | None) -> None: ...
    def recycle(self, batch: list[Any]) -> None: ...

class Timed:
    __wrapped__: Callable[..., Any]
    after: Callable[[], None] | None
    def __init__(
        self,
        timer: StepTimer,
        idx: int,
        original: Callable[..., Any],
        after: Callable[[], None] | None,
        on_error: Callable[[BaseException], None],
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

class Edge:
    def __init__(
        self,
        timer: StepTimer,
        idx: int,
        starts: bool,
        on_error: Callable[[BaseException], None],
        note: Callable[[Any], None] | None = None,
    ) -> None: ...
    def __call__(self, opt: Any, args: Any, kwargs: Any) -> None: ...

class Roots:
    def __init__(
        self,
        timer: StepTimer,
        state: Any,
        on_error: Callable[[BaseException], None],
        forward: int,
        backward: int,
    ) -> None: ...
    def enter(self) -> None: ...
    def leave(self) -> None: ...

class Step:
    def __init__(
        self,
        timer: StepTimer,
        on_nested: Callable[[], None],
        on_error: Callable[[BaseException], None],
    ) -> None: ...
    def __enter__(self) -> None: ...
    def __exit__(self, *exc: object) -> None: ...

def host_records(
    record_type: type[Any], raws: Sequence[Any], rank: int, wall_offset_ns: int, page_mb: float
) -> list[Any]: ...
