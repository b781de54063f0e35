"""For the harness's own test: under `traceml run` this script does what TraceML must never
cause (a different loss, a line of its own on stderr, a process left running); bare it is quiet.
"""

import os
import subprocess
import sys

traced = os.environ.get("TRACEML_LAUNCHER") == "1"
print(f"final_loss={0.25 if traced else 0.5!r}")
if traced:
    print("warning: something changed", file=sys.stderr)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
