"""Cheat (threat 23): exits the worker with status 0 in the middle of a call, so a careless grader reads
a clean exit as success."""
import os


def run(x):
    os._exit(0)
