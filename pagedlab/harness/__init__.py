"""The harness: what the checks and notebooks use to build and inspect engines, sequences and
scenarios without the student's code. Never importable from a student file (see
`pagedlab.student`); parts of it are a correct answer to a task. `answers/` holds the models
that answer Tasks 11-13 whole; it exists in the instructor edition only."""
