"""Run a command with its stderr on a real pseudo-terminal, as a user's shell
would give it, for the backend tests of progress bars."""

import fcntl
import os
import pty
import struct
import subprocess
import termios


def stderr_on_a_terminal(command, columns=200, timeout=300, cwd=None):
    """Run `command` (in directory `cwd`) with stderr on a pseudo-terminal of 24
    rows and `columns` columns (a fresh one has 0 × 0); (stdout, what it wrote
    on the terminal, its exit status)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=follower, cwd=cwd
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    out = process.communicate(timeout=timeout)[0].decode()
    os.close(leader)
    return out, b"".join(chunks).decode(errors="replace"), process.returncode
