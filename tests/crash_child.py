"""`kernelfix ARGS...` that kills itself with SIGKILL at one exact point, for test_agent_crash.py.

    python tests/crash_child.py after_commit:N ARGS...     once turn N's git commit is made (the
                                                           feedback node has not returned yet)
    python tests/crash_child.py after_writes:NODE ARGS...  once NODE's writes are in the checkpoint
                                                           database, before the next checkpoint
    python tests/crash_child.py in_create ARGS...          once the new session directory is built,
                                                           before it is renamed into place
    python tests/crash_child.py in_commit:N ARGS...        mid-way through turn N's git commit: the
                                                           branch's lock file written, not renamed over
    python tests/crash_child.py after_reply:N ARGS...      once model reply N (0-based) is journaled,
                                                           before the graph checkpoints it
    python tests/crash_child.py after_replies:N ARGS...    once N replies are journaled, whichever
                                                           calls they answer (a round's slots draw in
                                                           parallel: reply 1 may land before reply 0)

Some moments are too short to hit from outside (the gap between a node's saved writes and the
next checkpoint is milliseconds); wrapping the real function and killing the process right after
it returns puts a real kill -9 exactly there. Nothing else is changed.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    at, args = sys.argv[1], sys.argv[2:]
    kind, _, arg = at.partition(":")
    if kind == "after_commit":
        from kernelfix.agent.session_dir import SessionDir

        record_turn = SessionDir.record_turn

        def record_then_die(self, turn, **kw):
            sha = record_turn(self, turn, **kw)
            if turn.index == int(arg):
                _die()
            return sha

        SessionDir.record_turn = record_then_die
    elif kind == "after_writes":
        from langgraph.checkpoint.sqlite import SqliteSaver

        put_writes = SqliteSaver.put_writes

        def put_then_die(self, config, writes, task_id, task_path=""):
            put_writes(self, config, writes, task_id, task_path)
            if arg in str(task_path).replace(",", " ").split():
                _die()

        SqliteSaver.put_writes = put_then_die
    elif kind == "after_reply":
        from kernelfix.agent.session_dir import SessionDir

        journal_reply = SessionDir.journal_reply

        def journal_then_die(self, call_index, prompt_sha, reply):
            journal_reply(self, call_index, prompt_sha, reply)
            if call_index == int(arg):
                _die()

        SessionDir.journal_reply = journal_then_die
    elif kind == "after_replies":
        import threading

        from kernelfix.agent.session_dir import SessionDir

        journal_reply, lock, seen = SessionDir.journal_reply, threading.Lock(), [0]

        def count_then_die(self, call_index, prompt_sha, reply):
            journal_reply(self, call_index, prompt_sha, reply)
            with lock:
                seen[0] += 1
                if seen[0] == int(arg):
                    _die()

        SessionDir.journal_reply = count_then_die
    elif kind == "in_commit":
        from git.util import LockedFD

        from kernelfix.agent.session_dir import SessionDir

        record_turn, commit = SessionDir.record_turn, LockedFD.commit
        armed = False

        def record_armed(self, turn, **kw):
            nonlocal armed
            armed = turn.index == int(arg)
            return record_turn(self, turn, **kw)

        def commit_or_die(self):
            if armed and "refs" in Path(self._filepath).parts:
                _die()
            return commit(self)

        SessionDir.record_turn, LockedFD.commit = record_armed, commit_or_die
    elif kind == "in_create":
        import git

        init = git.Repo.init

        def init_then_die(*a, **kw):
            init(*a, **kw)
            _die()

        git.Repo.init = init_then_die
    else:
        raise SystemExit(f"unknown kill point {at}")
    from kernelfix.cli import main as kernelfix

    return kernelfix(args)


if __name__ == "__main__":
    sys.exit(main())
