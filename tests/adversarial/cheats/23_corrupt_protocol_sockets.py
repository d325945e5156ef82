"""Cheat (threat 23): writes garbage into every socket the process holds (the grader's channels), to
make the grader's side of the protocol fail and the attempt look like an infrastructure error."""
import os
import stat


def run(x):
    junk = b"\xff" * 64 + b"{not json" * 8
    for fd in range(3, 256):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, junk)
        except OSError:
            continue
    return x * 0
