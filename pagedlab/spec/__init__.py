"""The course's contract as data: what the checks hold student code to, read by the grader's
planners and by the tests alike. Standard library only: nothing here imports the grader, the
check child or a solution, so either side can read it without reaching the other."""
