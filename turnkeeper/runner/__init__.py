"""The runner: a per-project daemon that owns the host processes of turns, so that a
control plane that dies does not take its turns with it.

``turnkeeper runner start`` (or ``serve``, in the foreground) runs it; its state is
``.turnkeeper/runner/`` (see :mod:`turnkeeper.runner.paths`). Every host event is
committed to the runner's journal before any client sees it; a control plane reads
them, keeps them, acknowledges them, and if it crashes, its successor reattaches and
reads on from its last acknowledged seq.

Client API (all on this machine, through ``.turnkeeper/runner/runner.sock``)::

    from turnkeeper.runner import RunnerClient, RunnerHost, runner_available

    client = RunnerClient(project.state_dir)          # the .turnkeeper/ directory
    runner_available(project.state_dir) -> bool       # a runner answers hello

    host = RunnerHost("subprocess", config, client)   # a Host (hosts/base.py)
    run = host.start(request)                         # a RunnerRun (a HostRun)
    for event in run.events(after_seq):               # journaled, then live
        keep(event); run.ack(event.seq)               # after keeping it durably
    outcome = run.wait(timeout)                       # HostOutcome
    run.turn_end().end_reason                         # None, or why the runner ended it
    run.kill_tree(); run.is_alive(); run.close()      # close: forget the acked turn

    run = client.attach(turn_id)                      # a restarted control plane
    client.hello()                                    # RunnerIdentity: pid, start time,
                                                      # boot id, each turn's seqs
    client.start_turn(kind, config, request, command_id=...)  # ProcessIdentity
    client.events(turn_id, after_seq) / ack / kill / outcome / close_turn

    prove_hosts_ended(state_dir) -> list[HostProof]   # the runner is dead: end and
                                                      # account for its turns

Errors are the library's typed errors: ``Unavailable`` (``runner_unavailable``) when
no runner answers, ``HostSpawnFailed`` when the host did not start, ``AlreadyExists``
(``command_id_reused``, ``turn_exists``), ``Aborted`` (``command_indeterminate``: the
runner died while executing that command; it is never executed again),
``FailedPrecondition`` (``ack_regressed``, ``ack_beyond_produced``, ``events_pruned``,
``turn_not_finished``, ``turn_not_acked``, ``runner_alive``), ``PermissionDenied``
(``bad_token``, ``peer_uid_refused``).

A turn the runner ended itself finishes with ``end_reason`` ``runner_backpressure``
(unacknowledged events at the cap for too long), ``runner_stopped`` (``runner stop
--force``) or ``runner_lost`` (the runner died; its successor recorded it).
"""

from turnkeeper.runner.client import RunnerClient, runner_available
from turnkeeper.runner.host import RunnerHost, RunnerRun
from turnkeeper.runner.proof import HostProof, prove_hosts_ended
from turnkeeper.runner.protocol import RunnerIdentity, TurnEnd, TurnInfo

__all__ = [
    "HostProof",
    "RunnerClient",
    "RunnerHost",
    "RunnerIdentity",
    "RunnerRun",
    "TurnEnd",
    "TurnInfo",
    "prove_hosts_ended",
    "runner_available",
]
