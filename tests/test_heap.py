"""simserve/heap.py: the collector paused while a command imports, and the heap frozen only in the console
script."""

from __future__ import annotations

import gc
import subprocess
import sys

from simserve import heap


def test_paused_collector_comes_back_and_freezes_nothing_outside_the_console_script(monkeypatch):
    monkeypatch.setattr(heap, "FREEZE_HEAP", False)
    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    with heap.collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == frozen  # a test session keeps collecting everything
    gc.disable()
    try:
        with heap.collector_paused():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()


def test_the_console_script_freezes_what_it_imported():
    code = (
        "import gc, sys\n"
        "from simserve import heap\n"
        "heap.FREEZE_HEAP = True\n"
        "with heap.collector_paused():\n"
        "    import json\n"
        "assert gc.isenabled() and gc.get_freeze_count() > 0, gc.get_freeze_count()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
