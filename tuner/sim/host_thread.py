"""The CPU host thread that issues a service's launches (``service.launch``).

Each executor has one host thread. It issues launch ``i`` of a batch's lane at
``base + (i + 1)·host_launch_s``, ``base`` being the batch's start plus a graph replay's
cost; a kernel whose stream is free before then waits for the host, and that wait is the
iteration's host wait. An iteration is host-bound when its GPU waited on the host for
most of it. Under ``launch: graphs`` with no replay cost the host never paces the GPU
(``paces`` is false) and none of this is computed.
"""

from __future__ import annotations


class HostThread:
    """The executors' host threads in one run: when each stream's next launch is issued,
    each executor's host wait in its current iteration, and how many iterations were
    host-bound.

    Streams and executors are numbered as the run numbers them: lane ``l`` of executor
    ``e`` is stream ``l·E + e`` (``E`` executors), so a stream's executor is
    ``stream % E``.
    """

    def __init__(self, executors: int, streams: int, host_launch_s: float, graph_replay_s: float) -> None:
        self.executors = executors
        self.host_launch_s = host_launch_s
        self.replay_s = graph_replay_s
        self.paces = host_launch_s > 0.0 or graph_replay_s > 0.0
        self.issue_base = [0.0] * streams  # per stream: its batch's start plus the replay
        self.issue: list[tuple[int, ...] | None] = [None] * streams  # per stream: launch -> host order, or None
        self.host_wait = [0.0] * executors
        self.iteration_start = [0.0] * executors
        self.host_bound = 0

    def start_iteration(self, executor: int, host_wait: float, now: float) -> None:
        """``executor`` starts a batch at ``now`` whose program already waits ``host_wait``
        on the host (:attr:`tuner.sim.program.Program.host_wait`)."""
        self.host_wait[executor] = host_wait
        self.iteration_start[executor] = now

    def start_lane(self, stream: int, issue: tuple[int, ...] | None, now: float) -> None:
        """A batch's lane starts on ``stream`` at ``now``; ``issue`` gives the order in
        which the host issues its launches (None: in program order)."""
        self.issue_base[stream] = now + self.replay_s
        self.issue[stream] = issue

    def issued(self, stream: int, pc: int, now: float) -> float:
        """How long launch ``pc`` of ``stream`` waits at ``now`` for the host to issue it:
        the executor's host thread issues its batch's launches in order, ``host_launch``
        each, after the graph replay's cost; counted as host wait."""
        issue = self.issue[stream]
        issued = self.issue_base[stream] + ((pc if issue is None else issue[pc]) + 1) * self.host_launch_s
        if issued <= now:
            return 0.0
        self.host_wait[stream % self.executors] += issued - now
        return issued - now

    def end_iteration(self, executor: int, now: float) -> None:
        """``executor``'s batch ended at ``now``: count it when host-bound."""
        if self.paces and 2.0 * self.host_wait[executor] > now - self.iteration_start[executor]:
            self.host_bound += 1  # its GPU waited on the host for most of the iteration
