"""Cheat (threat 23): aborts the worker process (SIGABRT) in the middle of a call."""
import os


def run(x):
    os.abort()
