"""The wheel's ``tensorplay`` command: the Rust command line, run in this process."""

import signal
import sys


def main() -> int:
    # Ctrl-C ends the command at once, as it ends the native binary; Python's own handler
    # would only raise KeyboardInterrupt once the Rust code returned.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from tensorplay._tensorplay import run

    # The command's own name, whatever started it (`python -m tensorplay` too): usage lines
    # read as the binary's do.
    return run(["tensorplay", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
