"""Who may use the device when: many slots check outputs at once, one slot times alone.

Timing is only worth its confidence interval if nothing else runs on the device meanwhile: not
another slot's check calls, not the float64 references the parent computes on the device. Check
work takes the lock shared; timing takes it exclusive. A waiting timer stops new check work from
starting (writer preference), so timing waits at most for the checks already running.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager


class DeviceLock:
    def __init__(self):
        self._cond = threading.Condition()
        self._sharers = 0
        self._timing = False
        self._timers_waiting = 0

    @contextmanager
    def shared(self):
        """Check calls and references: any number at once, never during timing."""
        with self._cond:
            while self._timing or self._timers_waiting:
                self._cond.wait()
            self._sharers += 1
        try:
            yield
        finally:
            with self._cond:
                self._sharers -= 1
                if self._sharers == 0:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self):
        """Timing: the device to itself, once the running checks have finished."""
        with self._cond:
            self._timers_waiting += 1
            try:
                while self._timing or self._sharers:
                    self._cond.wait()
            finally:
                self._timers_waiting -= 1
            self._timing = True
        try:
            yield
        finally:
            with self._cond:
                self._timing = False
                self._cond.notify_all()
