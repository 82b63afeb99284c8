"""The fast tier's limit per test (tests/conftest.py) is on CPU time, not on the wall clock: a test
that computes past the limit fails naming its CPU and wall seconds, while a test that waits as long
(as a fast test does on a busy machine, its process off the CPU) passes. CPU burnt in a child process
the test waits for counts. Run on a copy of the conftest in a throwaway directory, with a limit of
0.5 CPU s."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parent / "conftest.py"

PLANTED = '''
import subprocess, sys, time


def _burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_computes():
    _burn(1.0)


def test_computes_in_a_child():
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 1.0\\n"
                    "while time.process_time() < end: pass"], check=True)


def test_waits():
    time.sleep(1.5)


def test_fast():
    _burn(0.1)
'''


def test_the_limit_is_on_cpu_time_not_the_wall_clock(tmp_path):
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_planted.py").write_text(PLANTED)
    env = {**os.environ, "ATTNSVM_FAST_LIMIT_S": "0.5"}
    env.pop("ATTNSVM_DURATIONS_LOG", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-m", "not slow", "-p", "no:xdist", "-p",
                          "no:cacheprovider", "-q", "-rf", str(tmp_path)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    assert "2 failed, 2 passed" in text, text
    for name in ("test_computes", "test_computes_in_a_child"):
        assert f"test_planted.py::{name} used " in text and "CPU seconds per test" in text, text
    # the same tests outside the fast tier (no marker expression) are not limited
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider",
                          "-q", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert "4 passed" in out.stdout, out.stdout + out.stderr
