"""Grading around the sealed grader: the backend resource and its Ray fan-out, the contention replay with its
co-tenant and grader processes, and the agreement of two grades."""
