"""The child process that runs check drivers against a student's code.

    PAGEDLAB_RECORD_FD=N python -m pagedlab.drivers.child  < request.json

The request names the task, the implementation, and the checks to run, as a finished plan: a
public check by its driver's name (`module:function`) and its case data, a hidden one by its
public driver and the scenario the grader drew for it, as data. No registry is consulted here, so
the grader's list of checks is the one that runs. Nothing here sees a hidden seed or imports a
hidden check. A `probe` request only loads the plan's drivers and reports `start`: the grader
asks it, with no submission file loaded, when a child ended before its checks started. Each
driver's record is written to descriptor N (a file the parent opened in a folder of its own) as
one JSON line, flushed at once, after a `begin` line,
so when the student's code kills this process the parent knows which check it died in. Nothing
written here is trusted: the parent's judge compares every record with the trusted one.
faulthandler prints the Python stack on a fatal signal and just before the time limit, so the
parent can say where the student's code was.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import threading
import time

SEAL_ENV = "PAGEDLAB_SEAL"  # set by the parent for a sandboxed child: seal before anything runs
# Seconds (of CPU time, or after the signal) before the fallback dump of a process stuck inside
# one C call, where the main thread never runs the signal handler; below grader.pipeline.GRACE.
C_FALLBACK = 2.0


def _emit(out, **event) -> None:
    out.write(json.dumps(event) + "\n")
    out.flush()


def _dump_stack_at(seconds: float, real_exit, began: float) -> None:
    """Once this process's session has used `seconds` of CPU time (the parent's limit counts CPU
    time, as pagedlab.cputime does here), or spent `seconds` on the clock mostly asleep (neither
    running nor waiting for a CPU: the parent ends a sleeper then too), print the main thread's
    stack and exit 1, from inside the main thread.

    faulthandler.dump_traceback_later alone dumps from its watchdog thread while the main thread
    runs on: a loop that calls functions pushes and pops frames under it, and the dump comes out
    cut short or as `File ???`. A signal handled between two bytecodes sees a whole stack.

    Code stuck inside one C call never reaches a bytecode, so the signal is never handled; two
    fallbacks still show where it was (its stack cannot change while it is stuck):
    - the C call released the GIL (a ctypes call): the watcher dumps the stack itself, C_FALLBACK
      s after the signal, and exits 1;
    - it holds the GIL (a regex that backtracks forever), so the watcher never runs either: an
      interval timer on this process's own CPU time (ITIMER_PROF, never the clock: a starved
      process is not cut short) raises SIGPROF C_FALLBACK s of CPU time past the limit, and
      faulthandler's C handler dumps the stack and lets SIGPROF end the process, well before the
      parent's kill GRACE s past the limit.
    """
    from ..cputime import tree_cpu

    def dump_and_exit(signum, frame):
        sys.stderr.write(f"Timeout ({seconds:g} s): the check ran out of time here\n")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=False)
        sys.stderr.flush()
        real_exit(1)

    signal.signal(signal.SIGUSR2, dump_and_exit)
    main_thread = threading.main_thread().ident
    if hasattr(signal, "setitimer") and hasattr(faulthandler, "register"):
        # chain=True: after the dump, SIGPROF's default action (terminate) ends the process.
        sys.stderr.flush()
        faulthandler.register(signal.SIGPROF, file=sys.stderr, all_threads=True, chain=True)
        signal.setitimer(signal.ITIMER_PROF, seconds + C_FALLBACK)

    def watch():
        while True:
            time.sleep(0.5)  # each look reads /proc: a few ms
            cpu, waited = tree_cpu(os.getsid(0), None)
            wall = time.time() - began  # since the parent started this process, as it counts
            if cpu >= seconds or (wall >= seconds and cpu + waited < 0.5 * wall):
                break
        signal.pthread_kill(main_thread, signal.SIGUSR2)
        time.sleep(C_FALLBACK)
        # Still here: the main thread is inside one C call that released the GIL.
        sys.stderr.write(f"Timeout ({seconds:g} s): the check ran out of time inside a C call here\n")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        real_exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _wanted(task: str, item: dict):
    """(check, scenario data, engines) for one planned check, from the plan alone: a drawn
    scenario's driver is looked up by name in the public drivers, a public check's driver by the
    name the grader gave (`registry.public_driver`), with its case data. No registry is consulted:
    the grader's list of checks is the one that counts. The engines are the bytes of the empty
    engines the grader wrote for it (never made here)."""
    from ..spec import catalog
    from . import record

    engines = item.get("engines") if isinstance(item.get("engines"), dict) else {}
    if "driver" in item:
        driver = record.find_scenario_driver(item["driver"])
        return catalog.Check(task, str(item["key"]), driver, hidden=True), item.get("scenario"), engines
    driver = record.find_public_driver(item["function"], item.get("file"))
    return catalog.Check(task, str(item["key"]), driver, cases=item.get("cases")), None, engines


def main() -> int:
    if os.environ.get(SEAL_ENV):
        # Before any submission byte: non-dumpable, no-new-privs, seccomp (pagedlab.sandbox.seal).
        from ..sandbox import seal

        try:
            seal.seal()
        except OSError as exc:
            print(f"the check process could not seal itself: {exc}", file=sys.stderr)
            return 3
    request = json.load(sys.stdin)
    faulthandler.enable(all_threads=True)
    impl = request["impl"]
    os.environ["PAGEDLAB_IMPL"] = impl
    if request.get("track") in ("c", "python"):  # Part A's track, as the grader decided it
        os.environ["PAGEDLAB_TRACK"] = request["track"]
    # The parent's descriptor, never a path: the folder this process can write holds no record.
    record_fd = int(os.environ["PAGEDLAB_RECORD_FD"])
    os.set_inheritable(record_fd, False)  # not for the kernel runner, compilers, a student's exec
    out = os.fdopen(record_fd, "w", encoding="utf-8")
    # os._exit in student code ends the process without a traceback: print where it was first.
    real_exit = os._exit

    def exit_with_stack(code=0):
        sys.stderr.write(f"os._exit({code!r}) called here:\n")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=False)
        sys.stderr.flush()
        real_exit(code)

    os._exit = exit_with_stack
    if request.get("dump_after"):
        _dump_stack_at(float(request["dump_after"]), real_exit, float(request.get("began") or time.time()))
    from ..guard import audit as student_api
    from ..loader import impl_dir
    from . import given, record

    # Which functions of a course file are given, as the grader read them (its files, not ours).
    given.use(request.get("given") if isinstance(request.get("given"), dict) else {})
    try:
        if request.get("plugin"):  # a test's stand-in checks, which the grader loaded too: the
            record.load_file(record.PLUGIN_MODULE, request["plugin"])  # plan names the file
        wanted = [_wanted(request["task"], item) for item in request["checks"]]
        if request.get("probe"):
            # The grader asks whether its plan starts at all here, with no submission file
            # loaded: a child that ended before its checks started is then the grader's problem.
            _emit(out, event="start")
            real_exit(0)
        student_api.install(impl_dir(impl))  # before any student file loads; cannot be undone
        from ..engine import ctrack

        # A C-only memory_manager: its library runs in a runner process with no Python; the heap
        # and pools are shared memory from here on (before any check makes one).
        ctrack.use_runner_for(impl_dir(impl))
    except Exception as exc:  # noqa: BLE001 - no `start` follows: the parent reports the grader's problem
        print(f"loading the checks failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    _emit(out, event="start")
    for index, (c, scenario, engines) in enumerate(wanted):
        _emit(out, event="begin", index=index)
        stream = record.drive(c, impl, 0, scenario=scenario, engines=engines)
        _emit(out, event="record", index=index, record=stream.to_json())
    _emit(out, event="done")
    out.close()
    sys.stdout.flush()
    # Skip interpreter teardown: a student's half-broken heap must not turn a finished run into a
    # crash report (and atexit hooks of student code get no say).
    real_exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
