"""The run is named after what the user runs: a script, or the notebook a kernel runs."""

from __future__ import annotations

import pytest

from traceml.instrument.session import script_name


@pytest.mark.parametrize(
    ("argv0", "notebook", "name"),
    [
        ("/home/u/train.py", "", "train.py"),
        ("-c", "", "python"),
        (
            "/venv/lib/python3.11/site-packages/ipykernel_launcher.py",
            "/u/exp/tune.ipynb",
            "tune.ipynb",
        ),
        ("/venv/lib/python3.11/site-packages/ipykernel_launcher.py", "", "ipykernel_launcher.py"),
        ("/home/u/train.py", "/u/exp/tune.ipynb", "train.py"),  # a script a notebook started
    ],
)
def test_script_name(monkeypatch: pytest.MonkeyPatch, argv0: str, notebook: str, name: str) -> None:
    monkeypatch.setattr("sys.argv", [argv0])
    monkeypatch.setenv("JPY_SESSION_NAME", notebook)
    assert script_name() == name
