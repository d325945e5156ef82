"""The slot threads' stack sampler (bench/stacksample.py): it reads only the threads that run a slot, names where
each was by the grader's innermost frame, and sums its shares to the whole."""
import importlib.util
import re
import threading
import time

from bench.stacksample import StackSampler, is_slot, where


def _module(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"fake_{path.parent.name}_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_only_slot_threads_are_sampled_and_each_by_the_grader_frame_it_waits_in(tmp_path):
    """A thread under a `grader/service.py` `_run_slot` is a slot's; one under the same function elsewhere, or under
    none, is not. A slot thread blocked in a wait shows the grader line that called it."""
    wire = _module(tmp_path / "grader" / "wire.py", "def recv(ev):\n    ev.wait()\n")
    service = _module(tmp_path / "grader" / "service.py",
                      "def _run_slot(recv, ev):\n    recv(ev)\n")
    other = _module(tmp_path / "elsewhere" / "service.py", "def _run_slot(ev):\n    ev.wait()\n")
    ev = threading.Event()
    threads = [threading.Thread(target=service._run_slot, args=(wire.recv, ev), daemon=True),
               threading.Thread(target=other._run_slot, args=(ev,), daemon=True),
               threading.Thread(target=ev.wait, daemon=True)]
    for t in threads:
        t.start()
    sampler = StackSampler(interval_s=0.005).start()
    t0 = time.perf_counter()
    try:
        while len(sampler.ticks) < 20 and time.perf_counter() < t0 + 10:
            time.sleep(0.01)
        import sys

        frames = sys._current_frames()
        slot_frame = frames[threads[0].ident]
        grader, inner = where(slot_frame, 1)  # one frame deep: the event's wait; the grader's line all the same
        assert is_slot(slot_frame) and grader == "wire.py:recv:2" and inner.startswith("threading.py:wait:")
        assert " < " not in inner
        del slot_frame
        assert not is_slot(frames[threads[1].ident]) and not is_slot(frames[threads[2].ident])
        del frames
    finally:
        sampler.stop()
        ev.set()
    assert sampler.samples and {s[1] for s in sampler.samples} == {"wire.py:recv:2"}
    # the innermost three frames, whatever their module: the event's wait in threading.py, then the grader's line
    assert all(s[2].startswith("threading.py:wait:") and s[2].endswith(" < wire.py:recv:2") for s in sampler.samples)
    lines = sampler.lines(t0, time.perf_counter(), "run")
    head = re.fullmatch(r"  run\t(\d+) slot-thread samples in (\d+) ticks \(every [\d.]+ ms, asked 5\), ([\d.]+) slot "
                        r"threads a tick", lines[0])
    assert head and float(head.group(3)) <= 1.0, lines[0]  # one slot thread: at most one sample a tick
    assert "  run\t  wire.py:recv:2\t100.0%\t" + head.group(1) in lines  # a fake wire.py: not a known wait
    assert sampler.lines(0.0, 1.0, "before") == ["  before\tno slot thread sampled"]


def test_the_tables_name_the_top_rows_and_sum_the_rest(monkeypatch):
    """What each sample waited for (a worker's reply, the device lock, or nothing: the parent's own Python), then
    by place; more places than a table's rows: the largest first, the others in one row, the shares summing to 100%."""
    import bench.stacksample as stacksample

    monkeypatch.setattr(stacksample, "TOP", 2)
    sampler = StackSampler(interval_s=0.01)
    sampler.ticks = [1.0, 1.01]
    sampler.samples = ([(1.0, "session.py:_verify:10", "session.py:_verify:10 < session.py:_check:3")] * 5
                       + [(1.0, "wire.py:_recv_exact:105", "wire.py:_recv_exact:105 < wire.py:recv:84")] * 3
                       + [(1.01, "devicelock.py:acquire:104", "threading.py:wait:327 < devicelock.py:acquire:104")]
                       + [(1.01, "launcher.py:spawn:9", "launcher.py:spawn:9")])
    lines = sampler.lines(0.0, 2.0, "r")
    assert lines[0].endswith("5.0 slot threads a tick")
    assert lines[1:5] == ["  r\tby what it waited for\tshare\tsamples",
                          f"  r\t  {stacksample.OWN}\t60.0%\t6", "  r\t  a worker's reply\t30.0%\t3",
                          "  r\t  (the other 1)\t10.0%\t1"]
    assert lines[5:9] == ["  r\tby innermost grader frame\tshare\tsamples", "  r\t  session.py:_verify:10\t50.0%\t5",
                          "  r\t  wire.py:_recv_exact:105\t30.0%\t3", "  r\t  (the other 2)\t20.0%\t2"]
    assert stacksample.what_waited("devicelock.py:acquire:104", "threading.py:wait:327") == "the device lock"
    copy = stacksample.what_waited("wire.py:_read:179", "wire.py:_read:179 < wire.py:read:396")
    assert copy.startswith("a host copy")
