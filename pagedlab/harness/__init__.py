"""The harness: what the checks and notebooks use to build and inspect engines without the
student's code. Engines are copied from bytes the grader wrote (`hw3.load`) and derived from
them with data (`hw3.derive`), so nothing here computes a task's answer (not even Task 1's empty
engine); it stays outside the student API all the same (see `pagedlab.student`).
`answers/` holds the models that answer Tasks 11-13 whole: instructor edition only, never
imported where checks run, root-only in the grading set-up (`pagedlab.sandbox.private`)."""
