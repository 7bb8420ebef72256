"""The host side of ``SpecVerifyRuntime``'s results: the host copies of each step's fields
(``runtime/host_mirror.py``), the tickets that name them, and the device guard's flag read from the copies
that have completed (``runtime/verify_graph.py`` describes the whole)."""

from __future__ import annotations

from .host_mirror import HostResult
from .step_records import StepResult

__all__ = ["HostSide"]


class HostSide:
    """The host-copy methods of ``SpecVerifyRuntime`` (which owns every attribute they read)."""

    def _copy_to_host(self, result: StepResult, batch: int) -> None:
        if self._mirror is None:
            return
        if result.fast_path and self._mirror.in_graph:  # the replayed graph packed its bucket's rows
            self._mirror.copy_packed(self._bucket(batch), batch)
        else:
            self._mirror.copy(result, batch, flag=self._guard.flag if self._guard is not None else None)

    def _device_trip(self) -> bool:
        """Whether the device guard flagged an earlier step; clears the flag and counts its conditions.

        On a device the flag is read from host copies that have completed
        (never waited for); on the CPU from the flag itself.
        """
        guard = self._guard
        if guard is None:
            return False
        bits = self._mirror.poll_flag(self._guard_reset) if self._mirror is not None else int(guard.flag[0])
        if not bits:
            return False
        guard.flag.zero_()
        if self._mirror is not None:
            self._guard_reset = self._mirror.copies
        self._guard_trips.update(guard.names(bits))
        return True

    def host_result(self, steps_back: int = 0) -> HostResult | None:
        """The host copy of the latest (``steps_back=0``) or the previous (1) step's results.

        Waits on that step's copy event only; None when no such step ran.
        """
        if steps_back not in (0, 1):
            raise ValueError("steps_back must be 0 (latest step) or 1 (the one before)")
        return self._mirror.result(steps_back) if self._mirror is not None else None

    def result_ticket(self) -> int:
        """A ticket for the latest step's host copy (the copies made so far), for ``host_result_of``; 0 when
        the runtime keeps no host copies (the CPU, where ``step_in_place``'s result is final)."""
        return self._mirror.copies if self._mirror is not None else 0

    def host_result_of(self, ticket: int) -> HostResult:
        """The host copy of the step whose ``result_ticket()`` was ``ticket``: that step or the one after it
        must be the latest (a copy stays readable until two later ones are made); waits on its event only."""
        if self._mirror is None:
            raise ValueError("this runtime keeps no host copies (the CPU): read the step's result directly")
        back = self._mirror.copies - ticket
        if back not in (0, 1):
            raise ValueError(f"the host copy of step ticket {ticket} is gone: {back} steps were copied after it")
        return self._mirror.result(back)
