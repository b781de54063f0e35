"""traceml-ai 0.5.0 (the peer) in a throwaway venv, for the same loop side by side.

Our own distribution is also named traceml-ai, so the peer never goes into .venv: the benchmark
creates a venv in a temp dir, pip-installs `traceml-ai==0.5.0` there (its dependencies are small;
torch is an extra it does not pull), and reaches .venv's torch through a .pth file appended after
the venv's own site-packages (a plain path entry: .venv's editable install of our `traceml` is
not processed from it, so `import traceml_ai` is the peer's and nothing of ours is loaded).
Its API (read from the installed package): `import traceml_ai as traceml; traceml.init(mode=
"auto")`, `with traceml.trace_step(model):`, and its launcher `traceml run script.py`.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

PEER = "traceml-ai==0.5.0"


def make_peer_venv() -> Path:
    """A venv with the peer installed; returns its bin dir. Raises SystemExit when pip fails."""
    root = Path(tempfile.mkdtemp(prefix="traceml-peer-"))
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    pip = subprocess.run(
        [str(root / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", PEER],
        capture_output=True,
        text=True,
    )
    if pip.returncode != 0:
        raise SystemExit(f"cannot install {PEER} into {root}:\n{pip.stderr[-2000:]}")
    ours = sysconfig.get_paths()["purelib"]
    site = subprocess.run(
        [
            str(root / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "zz_torch_from_bench_venv.pth").write_text(ours + "\n")
    return root / "bin"
