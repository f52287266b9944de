"""One cause, one explanation: failures that share a cause are explained once.

Checks often fail for one reason. A student file that does not compile fails every check of
every task that loads it, and the compiler's ten lines under each of them bury the one that
matters. A rule broken in one check (an append that never copies a shared block) also breaks
every later check whose scenario relies on that rule (records read back after forks), and that
later check, judged on its own, blames its own rule (address translation), which sends the
student to code that is right.

So, after a task's checks are judged:

- a failure whose verdict names a `cause` (`judge.Verdict.cause`, e.g. a file that does not
  load) is shown in full under the first check it broke, in the task or earlier in the same
  grade; later ones say it is the same and where it is shown;
- a failed check that `follows` (`catalog.Check.follows`) another check of the task that failed
  too is reported as following from it: fix that one first. Its own first line stays, so nothing
  it saw is hidden, but its explanation no longer competes with the root cause's.

Outcomes are anything with .name, .passed, .message, .hidden and .cause.
"""

from __future__ import annotations


def _first(message: str) -> str:
    return next((line.strip() for line in (message or "").split("\n") if line.strip()), "")


NOT_IMPLEMENTED = "not implemented yet"  # record.explain_exception's words for a stub


def refer_to_causes(outcomes, follows: dict | None = None, *, shown: dict | None = None,
                    label: str = "") -> None:
    """Rewrite, in place, the messages of `outcomes` (one task's, in report order) whose cause
    was already explained. `follows`: check name -> names it follows. `shown`: cause -> where
    it was explained, shared by the tasks of one grade (`label`: this task's name there)."""
    shown = {} if shown is None else shown
    referred = set()
    for outcome in outcomes:
        cause = getattr(outcome, "cause", "")
        if outcome.passed is not False or not cause:
            continue
        if cause in shown:
            task, name = shown[cause]
            where = f"✗ {name} above" if task == label else f"{task} (its full text is there)"
            outcome.message = f"{_first(outcome.message).rstrip(':')}: the same error as under {where}"
            referred.add(id(outcome))
        elif not outcome.hidden:  # a hidden check's name is not shown, so never referred to
            shown[cause] = (label, outcome.name)
    failed = {o.name for o in outcomes if o.passed is False and not o.hidden}
    for outcome in outcomes:
        if outcome.passed is not False or outcome.hidden or id(outcome) in referred:
            continue
        # An unwritten function says so (as on the stubs): no other check is the one to fix first.
        if outcome.message.startswith(NOT_IMPLEMENTED):
            continue
        first = _root(outcome.name, follows or {}, failed)
        if first is None or getattr(outcome, "cause", ""):
            continue
        outcome.message = (f"follows from ✗ {first}: this check relies on that check's rule too, so it "
                           f"cannot pass until that one does. Fix that one first.\n"
                           f"  here: {_first(outcome.message)}")


def _root(name: str, follows: dict, failed: set) -> str | None:
    """The failed check `name` follows, traced back to one that follows no failed check."""
    seen, found = {name}, None
    while True:
        nxt = next((n for n in follows.get(name, ()) if n in failed and n not in seen), None)
        if nxt is None:
            return found
        seen.add(nxt)
        found = name = nxt
